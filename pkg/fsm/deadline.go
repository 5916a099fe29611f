package fsm

import (
	"fmt"
	"strings"
	"time"
)

// DefaultTimeouts returns the service defaults (docs/timeouts.md) when none
// is configured: inactivity and approval 24 hours, so that every
// non-terminal state has a deadline armed and every session is bounded,
// and cancellation 5 minutes; execution and recovery unset.
func DefaultTimeouts() Timeouts {
	var t Timeouts
	t[TimeoutInactivity] = 24 * time.Hour
	t[TimeoutApproval] = 24 * time.Hour
	t[TimeoutCancellation] = 5 * time.Minute
	return t
}

// Effective returns the durations that apply: the session's own where it
// named one, else the service default (zero: the kind is not armed).
func (t Timeouts) Effective(defaults Timeouts) Timeouts {
	for k := range t {
		if t[k] == 0 {
			t[k] = defaults[k]
		}
	}
	return t
}

// Deadline is one armed deadline: the kind of timeout and when it expires
// (nanoseconds since the Unix epoch, from the events' occurredAt).
type Deadline struct {
	Kind TimeoutKind
	At   int64
}

// DefaultForcedGrace is the service default of the grace a forced
// cancellation gets before its cancellation deadline (CORREX_FORCED_GRACE,
// docs/timeouts.md): none.
const DefaultForcedGrace time.Duration = 0

// Deadlines returns the deadlines armed for s, one per kind (At zero for a
// kind not armed), with the default forced grace (DefaultForcedGrace); see
// DeadlinesWith.
func Deadlines(s *Session, defaults Timeouts) [NumTimeoutKinds]int64 {
	return DeadlinesWith(s, defaults, DefaultForcedGrace)
}

// DeadlinesWith returns the deadlines armed for s, one per kind (At zero for a
// kind not armed), following docs/timeouts.md: each is the start below plus the
// kind's effective duration (s.Timeouts, else defaults); a kind without a
// duration is not armed.
//
//	execution     the budget left           in CREATED, INITIALIZING, ACTIVE, RECOVERING
//	inactivity    from UpdatedAt            in CREATED, INITIALIZING, ACTIVE, PAUSED, RECOVERING
//	approval      from entering the state   in AWAITING_APPROVAL
//	recovery      from entering the state   in RECOVERING
//	cancellation  from entering the state   in CANCELLING (graceful)
//
// The execution timeout is a budget of running time: on entering a state
// that counts (CountsAsExecution) at StateEnteredAt with u already used
// (Session.ExecutionUsed), it expires at StateEnteredAt + execution - u; in
// PAUSED and AWAITING_APPROVAL it is not armed. A forced cancellation's
// deadline is its request (or escalation) plus forcedGrace instead of the
// cancellation timeout.
//
// UpdatedAt is the occurredAt of the last applied event and StateEnteredAt
// that of the event that entered the current state. In CANCELLING only the
// cancellation timeout is armed: the table accepts no other TimeoutExpired
// there, and an execution deadline armed in CANCELLING would be rejected
// when it fired, and hide the cancellation deadline behind it. Every kind
// armed is thus one the table applies in the session's state. It is a pure function
// of the session and the defaults: a replay arms the same deadlines.
func DeadlinesWith(s *Session, defaults Timeouts, forcedGrace time.Duration) [NumTimeoutKinds]int64 {
	var out [NumTimeoutKinds]int64
	if !s.Exists() || s.Terminal() {
		return out
	}
	eff := s.Timeouts.Effective(defaults)
	arm := func(k TimeoutKind, start int64) {
		if d := eff[k]; d > 0 {
			out[k] = start + int64(d)
		}
	}
	if CountsAsExecution(s.State) {
		arm(TimeoutExecution, s.StateEnteredAt-s.ExecutionUsed())
	}
	switch s.State {
	case StateCreated, StateInitializing, StateActive, StatePaused, StateRecovering:
		arm(TimeoutInactivity, s.UpdatedAt)
	}
	switch s.State {
	case StateAwaitingApproval:
		arm(TimeoutApproval, s.StateEnteredAt)
	case StateRecovering:
		arm(TimeoutRecovery, s.StateEnteredAt)
	case StateCancelling:
		if s.Cancellation.Mode == CancelForced {
			start := s.StateEnteredAt
			if s.Cancellation.EscalatedAt != 0 {
				start = s.Cancellation.EscalatedAt
			}
			out[TimeoutCancellation] = start + int64(max(forcedGrace, 0))
		} else {
			arm(TimeoutCancellation, s.StateEnteredAt)
		}
	}
	return out
}

// NextDeadline returns the earliest deadline armed for s (see Deadlines),
// and false when none is armed. Of two kinds due at the same time the one
// listed first in TimeoutKind order wins, so the result is deterministic.
func NextDeadline(s *Session, defaults Timeouts) (Deadline, bool) {
	return NextDeadlineWith(s, defaults, DefaultForcedGrace)
}

// NextDeadlineWith is NextDeadline with the service's forced grace
// (CORREX_FORCED_GRACE).
func NextDeadlineWith(s *Session, defaults Timeouts, forcedGrace time.Duration) (Deadline, bool) {
	all := DeadlinesWith(s, defaults, forcedGrace)
	var best Deadline
	for k := TimeoutExecution; int(k) < NumTimeoutKinds; k++ {
		if at := all[k]; at != 0 && (best.Kind == TimeoutNone || at < best.At) {
			best = Deadline{Kind: k, At: at}
		}
	}
	return best, best.Kind != TimeoutNone
}

// timeoutArmedFrom says, per kind, where a deadline of the kind runs from:
// the one column of the README's timeout table that is prose
// (TimeoutsMarkdownTable derives the states from DeadlinesWith).
var timeoutArmedFrom = [NumTimeoutKinds]string{
	TimeoutExecution: "a budget of running time: entering a counting state, less the execution time already used (`executionMs`); " +
		"time in PAUSED and AWAITING_APPROVAL does not count, and it is not armed in CANCELLING, where the table would reject it",
	TimeoutInactivity:   "the last applied event's `occurredAt`",
	TimeoutApproval:     "entering AWAITING_APPROVAL",
	TimeoutRecovery:     "entering RECOVERING",
	TimeoutCancellation: "entering CANCELLING (a forced cancellation: its request or escalation, plus the forced grace)",
}

// TimeoutsMarkdownTable renders, as Markdown, each timeout kind, where its
// deadline runs from, and the states in which DeadlinesWith arms it
// (found by asking it, for a session in each state with every kind set).
// The README embeds this text between markers, and a test keeps the two
// identical (`go generate ./pkg/fsm` rewrites it).
func TimeoutsMarkdownTable() string {
	var all Timeouts
	for _, k := range TimeoutKinds() {
		all[k] = time.Hour
	}
	var b strings.Builder
	b.WriteString("| kind | armed from | while |\n|---|---|---|\n")
	for _, k := range TimeoutKinds() {
		var in []string
		for st := StateNone + 1; int(st) < NumStates; st++ {
			s := Session{State: st, Timeouts: all, StateEnteredAt: 1, UpdatedAt: 1}
			if DeadlinesWith(&s, Timeouts{}, time.Hour)[k] != 0 {
				in = append(in, st.String())
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", k, timeoutArmedFrom[k], strings.Join(in, ", "))
	}
	return b.String()
}
