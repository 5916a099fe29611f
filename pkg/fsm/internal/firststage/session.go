package firststage

// Bounds of the history a session keeps (DESIGN §2, §4).
const (
	// TransitionsKept is how many of the latest transitions a session keeps.
	TransitionsKept = 64
	// RejectionsKept is how many of the latest rejections a session keeps.
	RejectionsKept = 16
	// IDWindow is how many of the latest event ids a session remembers to
	// recognise duplicates.
	IDWindow = 128
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
	CreatedAt            int64 // occurredAt of SessionCreated
	UpdatedAt            int64 // occurredAt of the last applied event
	StateEnteredAt       int64 // occurredAt of the event that entered State
	Version              uint64
	LastEventID          EventID // the last applied event
	Counters             Counters
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
	State   State // the state the session was in
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
}

// Failure describes how a FAILED session failed.
type Failure struct {
	Failed bool
	Reason string
	At     int64
	From   State
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
	// Forced is set when the cancellation completed because the cancellation
	// timeout expired, or when it was requested in forced mode.
	Forced bool
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

// RestoreTransition appends t as the newest kept transition. Decoders use it
// to rebuild a session; appending in oldest-first order restores exactly what
// was encoded.
func (s *Session) RestoreTransition(t Transition) { s.transitions.push(t, TransitionsKept) }

// RestoreRejection appends r as the newest kept rejection (see RestoreTransition).
func (s *Session) RestoreRejection(r Rejection) { s.rejections.push(r, RejectionsKept) }

// RestoreSeenID appends id as the newest id of the duplicate window (see
// RestoreTransition).
func (s *Session) RestoreSeenID(id EventID) { s.window.push(id, IDWindow) }

// ring keeps the latest limit values pushed. Once full, head is the index of
// the oldest value.
type ring[T any] struct {
	buf  []T
	head int
}

func (r *ring[T]) push(v T, limit int) {
	if len(r.buf) < limit {
		if cap(r.buf) == 0 {
			r.buf = make([]T, 0, min(limit, 8))
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
