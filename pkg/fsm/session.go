package fsm

import "unsafe"

// Bounds of the history a session keeps (docs/lifecycle.md).
const (
	// TransitionsKept is how many of the latest transitions a session keeps.
	TransitionsKept = 64
	// RejectionsKept is how many of the latest rejections a session keeps.
	RejectionsKept = 16
	// IDWindow is how many of the latest event ids a session remembers to
	// recognise duplicates.
	IDWindow = 128
	// AnnotationsKept is how many of the latest custom events a session
	// keeps in its annotations (docs/lifecycle.md).
	AnnotationsKept = 16
	// MaxCustomTypes is how many distinct custom types a session counts;
	// an event of one more type is rejected too_many_custom_types.
	MaxCustomTypes = 64
	// MaxAnnotationPayload is the largest payload (compact JSON bytes) an
	// annotation keeps; a larger one is omitted from the annotation.
	MaxAnnotationPayload = 1 << 10
)

// Session is the folded state of one session: everything the read model
// shows and everything the fold needs to continue. Times are nanoseconds
// since the Unix epoch, taken from the events' occurredAt, never from a
// clock.
//
// The zero Session is "no session yet". A Session is owned by one goroutine
// at a time; the reducer mutates it in place.
type Session struct {
	ID                   string
	State                State
	CorrelationID        string
	Goal                 string
	PredecessorSessionID string
	// Labels are the session's labels, sorted by key (see the package doc
	// for how the fold bounds labels written by other producers).
	Labels []Label
	// Metadata is SessionCreated.metadata as compact JSON ("" when absent),
	// stored verbatim and never read by the fold.
	Metadata          string
	ParentSessionID   string
	ParentClosePolicy ParentClosePolicy
	// Timeouts are the durations the session's SessionCreated named (zero
	// for a kind it left out). Service defaults are not applied here: the
	// component that arms deadlines applies them.
	Timeouts Timeouts
	// SuccessorSessionID is set once SessionReplaced has been applied.
	SuccessorSessionID string
	// Replacement is the link to the predecessor, for a session created
	// with a predecessorSessionId.
	Replacement    Replacement
	CreatedAt      int64 // occurredAt of SessionCreated
	UpdatedAt      int64 // occurredAt of the last applied event
	StateEnteredAt int64 // occurredAt of the event that entered State
	Version        uint64
	LastEventID    EventID // the last applied event
	Counters       Counters
	// Durations holds, per state, the total of the closed intervals spent in
	// it (the current, open interval is not included).
	Durations    [NumStates]int64
	Approval     Approval
	Failure      Failure
	Cancellation Cancellation
	Recovery     Recovery
	// Digest is the head of the hash chain over the applied events:
	// Digest = SHA-256(previous Digest || AppendCanonical(event)), starting
	// from 32 zero bytes.
	Digest [32]byte

	transitions ring[Transition]
	rejections  ring[Rejection]
	window      ring[EventID]
	annotations ring[Annotation]
	custom      []CustomCount
	decisions   ring[Decision]
}

// ReplacementStatus is where the link of a successor to its predecessor
// stands (docs/lifecycle.md, "Replacements and children").
type ReplacementStatus uint8

// Replacement statuses. ReplacementStatusNone: the session names no predecessor.
const (
	ReplacementStatusNone ReplacementStatus = iota
	ReplacementStatusPending
	ReplacementStatusLinked
	ReplacementStatusRefused
)

// String returns "", "pending", "linked" or "refused".
func (r ReplacementStatus) String() string {
	switch r {
	case ReplacementStatusPending:
		return "pending"
	case ReplacementStatusLinked:
		return "linked"
	case ReplacementStatusRefused:
		return "refused"
	}
	return ""
}

// ParseReplacementStatus returns the status spelled name.
func ParseReplacementStatus(name string) (ReplacementStatus, bool) {
	for r := ReplacementStatusPending; r <= ReplacementStatusRefused; r++ {
		if r.String() == name {
			return r, true
		}
	}
	return ReplacementStatusNone, false
}

// Replacement is the successor side of a replacement: pending from the
// creation until ReplacementLinked or ReplacementRefused is applied.
type Replacement struct {
	Status            ReplacementStatus
	PredecessorDigest [32]byte // set when linked
	Reason            string   // set when refused, at most MaxReasonBytes
}

// CustomCount is how many events of one custom type a session applied.
type CustomCount struct {
	Type  string
	Count uint64
}

// Annotation is one applied custom event, as kept in annotations.
type Annotation struct {
	EventID EventID
	Type    string
	At      int64
	// Payload is the event's payload (compact JSON) when it is at most
	// MaxAnnotationPayload bytes, and "" otherwise.
	Payload string
}

// Counters count what happened to a session. Events counts every event seen
// for the session, rejected and duplicate ones included.
type Counters struct {
	Events             uint64
	ModelTurns         uint64
	ToolCalls          uint64
	ToolFailures       uint64
	RepairCycles       uint64
	Pauses             uint64
	ApprovalsRequested uint64
	ApprovalsGranted   uint64
	ApprovalsDenied    uint64
	Recoveries         uint64
	Rejected           uint64
	Duplicates         uint64
	// SupersededTimeouts counts TimeoutExpired events whose armedVersion
	// was not the session's version (docs/timeouts.md).
	SupersededTimeouts uint64
}

// Transition is one applied state change.
type Transition struct {
	From    State
	To      State
	Type    EventType
	EventID EventID
	At      int64
}

// Rejection is one event the table did not allow.
type Rejection struct {
	EventID EventID
	Type    EventType
	Custom  string // the type name when Type is EventCustom
	State   State  // the state the session was in
	Reason  Reason
	At      int64 // the event's occurredAt
}

// Approval tracks waiting for approval decisions. A wait begins with
// ApprovalRequested and ends when the session moves to a state other than
// AWAITING_APPROVAL or RECOVERING (a recovery does not end the wait: the
// approval is still pending when it returns).
type Approval struct {
	Pending      bool
	PendingSince int64
	Waited       int64 // total of the finished waits, in nanoseconds
	// RequestID is the pending request's requestId (its eventId when the
	// request named none), and PendingReason its reason; both are cleared
	// when the wait ends.
	RequestID     string
	PendingReason string
}

// Failure describes how a FAILED session failed.
type Failure struct {
	Failed    bool
	Reason    string
	Category  FailureCategory
	Code      string // "" when the failure named no valid code
	Retryable bool
	At        int64
	From      State
}

// Cancellation describes a cancellation, requested by CancellationRequested
// or by a TimeoutExpired that leads to CANCELLING.
type Cancellation struct {
	Requested   bool
	RequestedAt int64
	Reason      string      // payload.reason, or "timeout:<kind>" for timeouts
	Mode        CancelMode  // payload.mode; graceful when absent
	Timeout     TimeoutKind // the timeout that requested it, if any
	Completed   bool
	CompletedAt int64
	// Forced is set only when the cancellation deadline completed the
	// cancellation (TimeoutExpired cancellation), whatever Mode is: a
	// forced request or an escalation arms that deadline sooner, and one
	// that SessionCancelled completes first stays Forced false.
	Forced bool
	// EscalatedAt is when a forced CancellationRequested escalated a
	// graceful cancellation (zero when none did); the cancellation
	// deadline of a forced cancellation runs from it, else from
	// RequestedAt.
	EscalatedAt int64
}

// Recovery describes the latest recovery.
type Recovery struct {
	Started     bool  // a recovery has started at least once
	Active      bool  // the session is RECOVERING now
	ResumeTo    State // the state RecoveryCompleted returns to
	StartedAt   int64
	CompletedAt int64 // when the latest recovery completed, if Active is false
}

// Terminal reports whether the session is in a terminal state.
func (s *Session) Terminal() bool { return s.State.Terminal() }

// Exists reports whether the session has been created.
func (s *Session) Exists() bool { return s.State != StateNone }

// NumTransitions returns how many transitions are kept (at most TransitionsKept).
func (s *Session) NumTransitions() int { return s.transitions.len() }

// TransitionAt returns the i-th kept transition, oldest first.
func (s *Session) TransitionAt(i int) Transition { return s.transitions.at(i) }

// NumRejections returns how many rejections are kept (at most RejectionsKept).
func (s *Session) NumRejections() int { return s.rejections.len() }

// RejectionAt returns the i-th kept rejection, oldest first.
func (s *Session) RejectionAt(i int) Rejection { return s.rejections.at(i) }

// NumSeenIDs returns how many event ids the duplicate window holds.
func (s *Session) NumSeenIDs() int { return s.window.len() }

// SeenIDAt returns the i-th id of the duplicate window, oldest first.
func (s *Session) SeenIDAt(i int) EventID { return s.window.at(i) }

// Seen reports whether the duplicate window holds id.
func (s *Session) Seen(id EventID) bool {
	for i := range s.window.buf {
		if s.window.buf[i] == id {
			return true
		}
	}
	return false
}

// NumAnnotations returns how many annotations are kept (at most AnnotationsKept).
func (s *Session) NumAnnotations() int { return s.annotations.len() }

// AnnotationAt returns the i-th kept annotation, oldest first.
func (s *Session) AnnotationAt(i int) Annotation { return s.annotations.at(i) }

// NumCustomTypes returns how many custom types the session counts.
func (s *Session) NumCustomTypes() int { return len(s.custom) }

// CustomCountAt returns the i-th custom counter; the counters are sorted
// by type.
func (s *Session) CustomCountAt(i int) CustomCount { return s.custom[i] }

// ring keeps the latest limit values pushed. Once full, head is the index of
// the oldest value.
type ring[T any] struct {
	buf  []T
	head int
}

// ringFirstBytes bounds a ring's first buffer: 16 event ids, 8
// transitions, 2 approval decisions. Most sessions keep a few values of
// each kind, and a first buffer of 8 large values (an approval decision
// is about 90 bytes) was an allocation the fold paid for on every
// session that met one.
const ringFirstBytes = 256

func (r *ring[T]) push(v T, limit int) {
	if len(r.buf) < limit {
		if cap(r.buf) == 0 {
			r.buf = make([]T, 0, min(limit, max(1, ringFirstBytes/int(unsafe.Sizeof(v)))))
		}
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.head] = v
	r.head++
	if r.head == limit {
		r.head = 0
	}
}

func (r *ring[T]) len() int { return len(r.buf) }

func (r *ring[T]) at(i int) T {
	i += r.head
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	return r.buf[i]
}
