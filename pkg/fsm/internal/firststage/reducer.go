package firststage

import (
	"crypto/sha256"
	"fmt"
	"time"
)

// Result says what the fold did with an event.
type Result uint8

// The results of Reducer.Apply.
const (
	// Applied: the event was allowed and its effect is in the session.
	Applied Result = iota + 1
	// Rejected: the table does not allow the event in the current state; the
	// state is unchanged, counters.rejected grew and a rejection is kept.
	Rejected
	// Duplicate: the session has already seen this event id; only
	// counters.duplicates (and counters.events) changed.
	Duplicate
	// Orphan: there is no session and the event is not SessionCreated. The
	// session is left untouched ("no session yet"); the projector sends the
	// event to the dead-letter topic.
	Orphan
)

func (r Result) String() string {
	switch r {
	case Applied:
		return "applied"
	case Rejected:
		return "rejected"
	case Duplicate:
		return "duplicate"
	case Orphan:
		return "orphan"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Reason says why an event was rejected or orphaned.
type Reason uint8

// Rejection reasons (DESIGN §2) and the orphan reason. Values are part of the
// stored snapshot format.
const (
	ReasonNone Reason = iota
	ReasonAfterTerminal
	ReasonInvalidTransition
	ReasonExecutionWhileSuspended
	ReasonExecutionOutsideActive
	ReasonDuplicateCreate
	ReasonUnknownSession

	numReasons = int(ReasonUnknownSession) + 1
)

var reasonNames = [numReasons]string{
	ReasonNone:                    "",
	ReasonAfterTerminal:           "after_terminal",
	ReasonInvalidTransition:       "invalid_transition",
	ReasonExecutionWhileSuspended: "execution_while_suspended",
	ReasonExecutionOutsideActive:  "execution_outside_active",
	ReasonDuplicateCreate:         "duplicate_create",
	ReasonUnknownSession:          "unknown_session",
}

// String returns the reason as spelled in snapshots and metrics.
func (r Reason) String() string {
	if int(r) < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// ParseReason returns the reason spelled name.
func ParseReason(name string) (Reason, bool) {
	for r := ReasonAfterTerminal; int(r) < numReasons; r++ {
		if reasonNames[r] == name {
			return r, true
		}
	}
	return ReasonNone, false
}

// Rejection reports whether r is one of the reasons an event is rejected
// for (every reason but ReasonNone and ReasonUnknownSession).
func (r Reason) Rejection() bool { return r > ReasonNone && r < ReasonUnknownSession }

// MarshalText implements encoding.TextMarshaler.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Outcome is what Reducer.Apply reports about one event. For an applied
// transition From and To differ; for an applied execution event they are both
// ACTIVE; otherwise both are the unchanged state.
type Outcome struct {
	Result Result
	Reason Reason
	From   State
	To     State
	// Closed is how long the session spent in From, for an applied
	// transition: the interval that this event closed (never negative).
	Closed time.Duration
	// ApprovalWait is the approval wait this event ended, if it ended one
	// (granted, denied, timed out, or left for CANCELLING or FAILED).
	ApprovalWait time.Duration
}

// Transitioned reports whether the event changed the session's state
// (including the creation, from StateNone to CREATED).
func (o Outcome) Transitioned() bool { return o.Result == Applied && o.From != o.To }

// Reducer folds events into sessions. Folding is pure: the result depends
// only on the session and the event (no clock, no randomness, no I/O, no map
// iteration), so the same events always give the same session bytes.
//
// The zero Reducer is ready to use. A Reducer keeps a scratch buffer, so it
// must not be used by two goroutines at once; use one per goroutine.
type Reducer struct {
	buf []byte
}

// Apply folds e into s and reports the outcome. It mutates s in place and
// nothing else. The caller routes events by session: e.SessionID must be the
// session's id (or s must be the zero Session for a SessionCreated).
//
// The order of checks, which decides the reason when several apply: an id
// the session has already seen is a duplicate (whether that event was applied
// or rejected, so a resent rejected event is counted once as rejected and
// then as a duplicate); then any event after a terminal state is
// after_terminal; then a second SessionCreated is duplicate_create; then
// execution events outside ACTIVE are execution_while_suspended (PAUSED,
// AWAITING_APPROVAL) or execution_outside_active; then the transition table
// decides (invalid_transition).
func (r *Reducer) Apply(s *Session, e *Event) Outcome {
	at := e.OccurredAt.UnixNano()
	if s.State == StateNone {
		if e.Type != SessionCreated {
			return Outcome{Result: Orphan, Reason: ReasonUnknownSession}
		}
		r.create(s, e, at)
		return Outcome{Result: Applied, From: StateNone, To: StateCreated}
	}

	s.Counters.Events++
	from := s.State
	if s.Seen(e.ID) {
		s.Counters.Duplicates++
		return Outcome{Result: Duplicate, From: from, To: from}
	}
	s.window.push(e.ID, IDWindow)

	if reason, rule := check(s, e); reason != ReasonNone {
		s.Counters.Rejected++
		s.rejections.push(Rejection{EventID: e.ID, Type: e.Type, State: from, Reason: reason, At: at}, RejectionsKept)
		return Outcome{Result: Rejected, Reason: reason, From: from, To: from}
	} else if rule == nil { // an execution event in ACTIVE
		switch e.Type {
		case ModelRequested:
			s.Counters.ModelTurns++
		case ToolRequested:
			s.Counters.ToolCalls++
		case ToolCompleted:
			if e.Fields.ToolFailed {
				s.Counters.ToolFailures++
			}
		case RepairStarted:
			s.Counters.RepairCycles++
		}
		r.applied(s, e, at)
		return Outcome{Result: Applied, From: from, To: from}
	} else {
		waited := s.Approval.Waited
		closed := r.transition(s, e, rule, at)
		return Outcome{Result: Applied, From: from, To: s.State, Closed: time.Duration(closed),
			ApprovalWait: time.Duration(s.Approval.Waited - waited)}
	}
}

func (r *Reducer) create(s *Session, e *Event, at int64) {
	*s = Session{
		ID:                   e.SessionID,
		State:                StateCreated,
		CorrelationID:        e.CorrelationID,
		Goal:                 e.Fields.Goal,
		PredecessorSessionID: e.Fields.PredecessorSessionID,
		CreatedAt:            at,
		StateEnteredAt:       at,
	}
	if s.CorrelationID == "" {
		s.CorrelationID = e.SessionID
	}
	s.Counters.Events = 1
	s.window.push(e.ID, IDWindow)
	r.applied(s, e, at)
}

// check returns the rejection reason for e in s, or ReasonNone and the
// table rule that allows it (nil for an allowed execution event).
func check(s *Session, e *Event) (Reason, *Rule) {
	switch {
	case s.State.Terminal():
		return ReasonAfterTerminal, nil
	case e.Type == SessionCreated:
		return ReasonDuplicateCreate, nil
	case e.Type.Execution():
		switch s.State {
		case StateActive:
			return ReasonNone, nil
		case StatePaused, StateAwaitingApproval:
			return ReasonExecutionWhileSuspended, nil
		}
		return ReasonExecutionOutsideActive, nil
	}
	rule := ruleFor(e.Type, e.Fields.Timeout)
	if rule == nil || !rule.From.Has(s.State) {
		return ReasonInvalidTransition, nil
	}
	return ReasonNone, rule
}

// transition applies an allowed lifecycle event and returns the closed
// interval spent in the previous state.
func (r *Reducer) transition(s *Session, e *Event, rule *Rule, at int64) int64 {
	from := s.State
	to := rule.To
	if rule.Resume {
		to = s.Recovery.ResumeTo
	}
	switch e.Type {
	case SessionPaused:
		s.Counters.Pauses++
	case ApprovalRequested:
		s.Counters.ApprovalsRequested++
		s.Approval.Pending = true
		s.Approval.PendingSince = at
	case ApprovalGranted:
		s.Counters.ApprovalsGranted++
	case ApprovalDenied:
		s.Counters.ApprovalsDenied++
	case CancellationRequested:
		s.Cancellation = Cancellation{Requested: true, RequestedAt: at, Reason: e.Fields.Reason, Mode: e.Fields.Mode}
	case TimeoutExpired:
		if rule.Forced {
			s.Cancellation.Forced = true
			s.Cancellation.Completed = true
			s.Cancellation.CompletedAt = at
		} else {
			s.Cancellation = Cancellation{Requested: true, RequestedAt: at,
				Reason: "timeout:" + e.Fields.Timeout.String(), Timeout: e.Fields.Timeout}
		}
	case SessionCancelled:
		s.Cancellation.Completed = true
		s.Cancellation.CompletedAt = at
		s.Cancellation.Forced = s.Cancellation.Mode == CancelForced
	case SessionFailed:
		s.Failure = Failure{Failed: true, Reason: e.Fields.Reason, At: at, From: from}
	case RecoveryStarted:
		s.Counters.Recoveries++
		s.Recovery = Recovery{Started: true, Active: true, ResumeTo: from, StartedAt: at}
	}
	if s.Recovery.Active && to != StateRecovering {
		s.Recovery.Active = false
		s.Recovery.CompletedAt = at
	}
	if s.Approval.Pending && to != StateAwaitingApproval && to != StateRecovering {
		s.Approval.Waited += nonNegative(at - s.Approval.PendingSince)
		s.Approval.Pending = false
		s.Approval.PendingSince = 0
	}
	closed := nonNegative(at - s.StateEnteredAt)
	s.Durations[from] += closed
	s.State = to
	s.StateEnteredAt = at
	s.transitions.push(Transition{From: from, To: to, Type: e.Type, EventID: e.ID, At: at}, TransitionsKept)
	r.applied(s, e, at)
	return closed
}

// applied records what every applied event changes: version, last event,
// update time and the digest chain.
func (r *Reducer) applied(s *Session, e *Event, at int64) {
	s.Version++
	s.LastEventID = e.ID
	s.UpdatedAt = at
	r.buf = append(r.buf[:0], s.Digest[:]...)
	r.buf = AppendCanonical(r.buf, e)
	s.Digest = sha256.Sum256(r.buf)
}

// nonNegative clamps an interval at zero: occurredAt comes from producers'
// clocks, and a later event stamped earlier must not make a duration negative.
func nonNegative(d int64) int64 { return max(d, 0) }
