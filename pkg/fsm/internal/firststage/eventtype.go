package firststage

import "fmt"

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

	numEventTypes = int(RepairStarted) + 1
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
}

// EventTypes lists every known event type in canonical order.
func EventTypes() []EventType {
	out := make([]EventType, 0, numEventTypes-1)
	for t := SessionCreated; int(t) < numEventTypes; t++ {
		out = append(out, t)
	}
	return out
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

// ParseEventType returns the event type spelled name. It does not allocate.
func ParseEventType(name []byte) (EventType, bool) {
	for t := SessionCreated; int(t) < numEventTypes; t++ {
		if eventTypeNames[t] == string(name) {
			return t, true
		}
	}
	return EventUnknown, false
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

	numTimeoutKinds = int(TimeoutCancellation) + 1
)

var timeoutNames = [numTimeoutKinds]string{
	TimeoutNone:         "",
	TimeoutExecution:    "execution",
	TimeoutInactivity:   "inactivity",
	TimeoutApproval:     "approval",
	TimeoutRecovery:     "recovery",
	TimeoutCancellation: "cancellation",
}

// String returns the payload spelling of the kind, for example "approval".
func (k TimeoutKind) String() string {
	if int(k) < numTimeoutKinds {
		return timeoutNames[k]
	}
	return fmt.Sprintf("TimeoutKind(%d)", uint8(k))
}

// ParseTimeoutKind returns the kind spelled name ("execution", ...).
func ParseTimeoutKind(name []byte) (TimeoutKind, bool) {
	for k := TimeoutExecution; int(k) < numTimeoutKinds; k++ {
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
