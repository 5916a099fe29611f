package fsm

import (
	"bytes"
	"fmt"
)

// EventType names what happened to a session. The zero value is
// EventUnknown, which no valid event carries.
type EventType uint8

// The event types of the lifecycle. The numeric values are part of the stored
// snapshot format (transitions and rejections record them) and must never be
// renumbered; add new types at the end.
const (
	EventUnknown EventType = iota
	SessionCreated
	SessionInitializing
	SessionStarted
	SessionPaused
	SessionResumed
	ApprovalRequested
	ApprovalGranted
	ApprovalDenied
	CancellationRequested
	SessionCancelled
	SessionCompleted
	SessionFailed
	RecoveryStarted
	RecoveryCompleted
	TimeoutExpired
	ModelRequested
	ToolRequested
	ToolCompleted
	RepairStarted
	// SessionReplaced, ReplacementLinked and ReplacementRefused are produced
	// by the system only (docs/lifecycle.md): ingest refuses them from clients.
	SessionReplaced
	ReplacementLinked
	ReplacementRefused
	// EventCustom is every custom type x.<vendor>.<Name> (docs/lifecycle.md); the
	// name itself travels in Event.Custom (and in Rejection.Custom).
	EventCustom

	numEventTypes = int(EventCustom) + 1
	// numClientTypes bounds the types a client may send by name.
	numClientTypes = int(RepairStarted) + 1
)

var eventTypeNames = [numEventTypes]string{
	EventUnknown:          "",
	SessionCreated:        "SessionCreated",
	SessionInitializing:   "SessionInitializing",
	SessionStarted:        "SessionStarted",
	SessionPaused:         "SessionPaused",
	SessionResumed:        "SessionResumed",
	ApprovalRequested:     "ApprovalRequested",
	ApprovalGranted:       "ApprovalGranted",
	ApprovalDenied:        "ApprovalDenied",
	CancellationRequested: "CancellationRequested",
	SessionCancelled:      "SessionCancelled",
	SessionCompleted:      "SessionCompleted",
	SessionFailed:         "SessionFailed",
	RecoveryStarted:       "RecoveryStarted",
	RecoveryCompleted:     "RecoveryCompleted",
	TimeoutExpired:        "TimeoutExpired",
	ModelRequested:        "ModelRequested",
	ToolRequested:         "ToolRequested",
	ToolCompleted:         "ToolCompleted",
	RepairStarted:         "RepairStarted",
	SessionReplaced:       "SessionReplaced",
	ReplacementLinked:     "ReplacementLinked",
	ReplacementRefused:    "ReplacementRefused",
	EventCustom:           "custom",
}

// EventTypes lists the event types a client may send, in canonical order:
// every named type except the system-only ones (see SystemEventTypes) and
// the custom types, which have no fixed name.
func EventTypes() []EventType {
	out := make([]EventType, 0, numClientTypes-1)
	for t := SessionCreated; int(t) < numClientTypes; t++ {
		out = append(out, t)
	}
	return out
}

// SystemEventTypes lists the types only the system produces
// (docs/lifecycle.md, "Replacements and children").
func SystemEventTypes() []EventType {
	return []EventType{SessionReplaced, ReplacementLinked, ReplacementRefused}
}

// System reports whether t is produced by the system only.
func (t EventType) System() bool {
	return t == SessionReplaced || t == ReplacementLinked || t == ReplacementRefused
}

// String returns the wire spelling of the type, for example "SessionPaused".
func (t EventType) String() string {
	if t != EventUnknown && int(t) < numEventTypes {
		return eventTypeNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Valid reports whether t is a known event type.
func (t EventType) Valid() bool { return t != EventUnknown && int(t) < numEventTypes }

// Execution reports whether t is an execution event: one that changes
// counters, never the state, and is accepted only in ACTIVE.
func (t EventType) Execution() bool {
	return t == ModelRequested || t == ToolRequested || t == ToolCompleted || t == RepairStarted
}

// MarshalText implements encoding.TextMarshaler with the wire spelling.
func (t EventType) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("fsm: invalid event type %d", uint8(t))
	}
	return []byte(eventTypeNames[t]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *EventType) UnmarshalText(b []byte) error {
	v, ok := ParseEventType(b)
	if !ok {
		return fmt.Errorf("fsm: unknown event type %q", b)
	}
	*t = v
	return nil
}

// ParseEventType returns the named event type spelled name (lifecycle,
// execution or system type). It does not allocate. Custom types are not
// named types: see ValidCustomType.
func ParseEventType(name []byte) (EventType, bool) {
	for t := SessionCreated; t < EventCustom; t++ {
		if eventTypeNames[t] == string(name) {
			return t, true
		}
	}
	return EventUnknown, false
}

// Limits of custom type names (docs/lifecycle.md): x.<vendor>.<Name>.
const (
	MaxCustomVendorLen = 32
	MaxCustomNameLen   = 64
)

// ValidCustomType reports whether name is a custom event type
// x.<vendor>.<Name>, vendor [a-z0-9-]{1,32}, Name [A-Za-z][A-Za-z0-9]{0,63}.
// It does not allocate.
func ValidCustomType(name []byte) bool {
	if len(name) < 5 || name[0] != 'x' || name[1] != '.' {
		return false
	}
	rest := name[2:]
	dot := bytes.IndexByte(rest, '.')
	if dot < 1 || dot > MaxCustomVendorLen {
		return false
	}
	for _, c := range rest[:dot] {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	n := rest[dot+1:]
	if len(n) < 1 || len(n) > MaxCustomNameLen || !(n[0] >= 'A' && n[0] <= 'Z' || n[0] >= 'a' && n[0] <= 'z') {
		return false
	}
	for _, c := range n[1:] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// TimeoutKind is the payload.timeout of a TimeoutExpired event.
type TimeoutKind uint8

// The timeout kinds. TimeoutNone is carried by every event that is not a
// TimeoutExpired. Values are part of the stored snapshot format.
const (
	TimeoutNone TimeoutKind = iota
	TimeoutExecution
	TimeoutInactivity
	TimeoutApproval
	TimeoutRecovery
	TimeoutCancellation

	// NumTimeoutKinds is one more than the largest TimeoutKind, so arrays
	// indexed by kind (Timeouts) have room for every kind including
	// TimeoutNone.
	NumTimeoutKinds = int(TimeoutCancellation) + 1
)

var timeoutNames = [NumTimeoutKinds]string{
	TimeoutNone:         "",
	TimeoutExecution:    "execution",
	TimeoutInactivity:   "inactivity",
	TimeoutApproval:     "approval",
	TimeoutRecovery:     "recovery",
	TimeoutCancellation: "cancellation",
}

// String returns the payload spelling of the kind, for example "approval".
func (k TimeoutKind) String() string {
	if int(k) < NumTimeoutKinds {
		return timeoutNames[k]
	}
	return fmt.Sprintf("TimeoutKind(%d)", uint8(k))
}

// TimeoutKinds lists the timeout kinds in their canonical order, without
// TimeoutNone.
func TimeoutKinds() []TimeoutKind {
	out := make([]TimeoutKind, 0, NumTimeoutKinds-1)
	for k := TimeoutExecution; int(k) < NumTimeoutKinds; k++ {
		out = append(out, k)
	}
	return out
}

// ParseTimeoutKind returns the kind spelled name ("execution", ...).
func ParseTimeoutKind(name []byte) (TimeoutKind, bool) {
	for k := TimeoutExecution; int(k) < NumTimeoutKinds; k++ {
		if timeoutNames[k] == string(name) {
			return k, true
		}
	}
	return TimeoutNone, false
}

// CancelMode is the payload.mode of a CancellationRequested event.
type CancelMode uint8

// Cancellation modes. CancelGraceful is the default when mode is absent.
const (
	CancelGraceful CancelMode = iota
	CancelForced
)

// String returns "graceful" or "forced".
func (m CancelMode) String() string {
	if m == CancelForced {
		return "forced"
	}
	return "graceful"
}

// ParseCancelMode returns the mode spelled name ("graceful" or "forced").
func ParseCancelMode(name string) (CancelMode, bool) {
	switch name {
	case "graceful":
		return CancelGraceful, true
	case "forced":
		return CancelForced, true
	}
	return CancelGraceful, false
}
