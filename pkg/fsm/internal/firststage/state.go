package firststage

import "fmt"

// State is a session's lifecycle state. The zero value, StateNone, means "no
// session yet": it is the state a Session is in before its SessionCreated event.
type State uint8

// The lifecycle states. The numeric values are part of the stored snapshot
// format (pkg/snapshot) and must never be renumbered.
const (
	StateNone State = iota
	StateCreated
	StateInitializing
	StateActive
	StatePaused
	StateAwaitingApproval
	StateCancelling
	StateCancelled
	StateFailed
	StateCompleted
	StateRecovering

	// NumStates is one more than the largest State, so arrays indexed by State
	// have room for every state including StateNone.
	NumStates = int(StateRecovering) + 1
)

var stateNames = [NumStates]string{
	StateNone:             "NONE",
	StateCreated:          "CREATED",
	StateInitializing:     "INITIALIZING",
	StateActive:           "ACTIVE",
	StatePaused:           "PAUSED",
	StateAwaitingApproval: "AWAITING_APPROVAL",
	StateCancelling:       "CANCELLING",
	StateCancelled:        "CANCELLED",
	StateFailed:           "FAILED",
	StateCompleted:        "COMPLETED",
	StateRecovering:       "RECOVERING",
}

// States lists the lifecycle states in their canonical order, without StateNone.
func States() []State {
	out := make([]State, 0, NumStates-1)
	for s := StateCreated; int(s) < NumStates; s++ {
		out = append(out, s)
	}
	return out
}

// String returns the JSON spelling of the state, for example "AWAITING_APPROVAL".
func (s State) String() string {
	if int(s) < NumStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Valid reports whether s is one of the ten lifecycle states (not StateNone).
func (s State) Valid() bool { return s > StateNone && int(s) < NumStates }

// Terminal reports whether no event can move a session out of s.
func (s State) Terminal() bool {
	return s == StateCancelled || s == StateFailed || s == StateCompleted
}

// MarshalText implements encoding.TextMarshaler with the JSON spelling.
func (s State) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, fmt.Errorf("fsm: invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	v, ok := ParseState(string(b))
	if !ok {
		return fmt.Errorf("fsm: unknown state %q", b)
	}
	*s = v
	return nil
}

// ParseState returns the state spelled name, as in JSON ("ACTIVE").
func ParseState(name string) (State, bool) {
	for s := StateCreated; int(s) < NumStates; s++ {
		if stateNames[s] == name {
			return s, true
		}
	}
	return StateNone, false
}

// StateSet is a set of states, as a bitmask indexed by State.
type StateSet uint16

// SetOf returns the set holding the given states.
func SetOf(states ...State) StateSet {
	var set StateSet
	for _, s := range states {
		set |= 1 << s
	}
	return set
}

// Has reports whether s is in the set.
func (set StateSet) Has(s State) bool { return set&(1<<s) != 0 }

// States returns the members of the set in canonical order.
func (set StateSet) States() []State {
	var out []State
	for s := StateNone; int(s) < NumStates; s++ {
		if set.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

var (
	terminalStates = SetOf(StateCancelled, StateFailed, StateCompleted)
	allStates      = SetOf(StateCreated, StateInitializing, StateActive, StatePaused, StateAwaitingApproval,
		StateCancelling, StateCancelled, StateFailed, StateCompleted, StateRecovering)
	nonTerminal = allStates &^ terminalStates
)
