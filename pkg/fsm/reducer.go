package fsm

import (
	"crypto/sha256"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
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
	// Superseded: a TimeoutExpired armed at another version than the
	// session's (docs/timeouts.md). Not applied and not a rejection: only
	// counters.events, counters.supersededTimeouts and the duplicate
	// window changed.
	Superseded
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
	case Superseded:
		return "superseded"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Reason says why an event was rejected or orphaned.
type Reason uint8

// Rejection reasons (docs/lifecycle.md) and the orphan reason. Values are
// part of the stored snapshot format.
const (
	ReasonNone Reason = iota
	ReasonAfterTerminal
	ReasonInvalidTransition
	ReasonExecutionWhileSuspended
	ReasonExecutionOutsideActive
	ReasonDuplicateCreate
	ReasonUnknownSession
	// Reasons added later (after the orphan reason, so the stored
	// values above keep their numbers).
	ReasonVersionConflict
	ReasonTooManyCustomTypes
	ReasonInvalidReplacement
	ReasonReplacementPending
	ReasonApprovalMismatch

	// NumReasons is one more than the largest Reason, so arrays indexed by
	// Reason have room for every reason including ReasonNone.
	NumReasons = int(ReasonApprovalMismatch) + 1
)

var reasonNames = [NumReasons]string{
	ReasonNone:                    "",
	ReasonAfterTerminal:           "after_terminal",
	ReasonInvalidTransition:       "invalid_transition",
	ReasonExecutionWhileSuspended: "execution_while_suspended",
	ReasonExecutionOutsideActive:  "execution_outside_active",
	ReasonDuplicateCreate:         "duplicate_create",
	ReasonUnknownSession:          "unknown_session",
	ReasonVersionConflict:         "version_conflict",
	ReasonTooManyCustomTypes:      "too_many_custom_types",
	ReasonInvalidReplacement:      "invalid_replacement",
	ReasonReplacementPending:      "replacement_pending",
	ReasonApprovalMismatch:        "approval_mismatch",
}

// String returns the reason as spelled in snapshots and metrics.
func (r Reason) String() string {
	if int(r) < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// ParseReason returns the reason spelled name.
func ParseReason(name string) (Reason, bool) {
	for r := ReasonAfterTerminal; int(r) < NumReasons; r++ {
		if reasonNames[r] == name {
			return r, true
		}
	}
	return ReasonNone, false
}

// Rejection reports whether r is one of the reasons an event is rejected
// for (every reason but ReasonNone and ReasonUnknownSession).
func (r Reason) Rejection() bool {
	return r != ReasonNone && r != ReasonUnknownSession && int(r) < NumReasons
}

// Rejections yields the reasons an event is rejected for (those whose
// Rejection is true), in their numeric order.
func Rejections() iter.Seq[Reason] {
	return func(yield func(Reason) bool) {
		for r := range Reason(NumReasons) {
			if r.Rejection() && !yield(r) {
				return
			}
		}
	}
}

// MarshalText implements encoding.TextMarshaler.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Outcome is what Reducer.Apply reports about one event. For an applied
// transition From and To differ, except for the escalation of a graceful
// CANCELLING to forced, a transition CANCELLING -> CANCELLING (Escalated);
// for an applied execution event they are both ACTIVE; otherwise both are
// the unchanged state.
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
	// Refusal is, for a SessionReplaced rejected invalid_replacement, why
	// the predecessor refused it (ReplacementRefusal): the reason of the
	// successor's ReplacementRefused.
	Refusal string
	// Escalated is set when a forced CancellationRequested escalated a
	// graceful CANCELLING: the state stays, and the transition CANCELLING
	// -> CANCELLING is recorded like any other.
	Escalated bool
}

// Transitioned reports whether the event recorded a transition: it changed
// the session's state (including the creation, from StateNone to
// CREATED), or escalated a graceful CANCELLING to forced (CANCELLING ->
// CANCELLING). Every transition the snapshot records is one, and each has
// a change record, a span and a count in the transitions counter.
func (o Outcome) Transitioned() bool { return o.Result == Applied && (o.From != o.To || o.Escalated) }

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
// then as a duplicate); then a TimeoutExpired whose armedVersion is not the
// session's version is superseded; then any event after a terminal state is
// after_terminal (except the replacement events, which have their own
// rule); then an expectedVersion other than the session's version is
// version_conflict; then a second SessionCreated is duplicate_create; then
// SessionInitializing or SessionStarted of a successor whose replacement
// is pending is replacement_pending; then an approval decision in
// AWAITING_APPROVAL naming another request is approval_mismatch; then
// custom events (too_many_custom_types) and replacement events
// (invalid_replacement); then execution events where they are not
// accepted are execution_while_suspended (PAUSED, AWAITING_APPROVAL) or
// execution_outside_active (ToolCompleted is accepted in PAUSED,
// AWAITING_APPROVAL and CANCELLING too); then a forced
// CancellationRequested escalates a graceful CANCELLING; then the
// transition table decides (invalid_transition).
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

	if e.Type == TimeoutExpired && e.Fields.HasArmedVersion && e.Fields.ArmedVersion != s.Version {
		s.Counters.SupersededTimeouts++
		return Outcome{Result: Superseded, From: from, To: from}
	}

	reason, rule := check(s, e)
	if reason != ReasonNone {
		s.Counters.Rejected++
		rj := Rejection{EventID: e.ID, Type: e.Type, State: from, Reason: reason, At: at}
		if e.Type == EventCustom {
			rj.Custom = e.Custom
		}
		s.rejections.push(rj, RejectionsKept)
		out := Outcome{Result: Rejected, Reason: reason, From: from, To: from}
		if e.Type == SessionReplaced && reason == ReasonInvalidReplacement {
			out.Refusal = ReplacementRefusal(s)
		}
		return out
	}
	if rule == &escalation {
		r.escalate(s, e, at)
		return Outcome{Result: Applied, From: from, To: from, Escalated: true}
	}
	if rule != nil {
		waited := s.Approval.Waited
		closed := r.transition(s, e, rule, at)
		return Outcome{Result: Applied, From: from, To: s.State, Closed: time.Duration(closed),
			ApprovalWait: time.Duration(s.Approval.Waited - waited)}
	}
	switch e.Type { // an allowed event that keeps the state
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
	case EventCustom:
		r.custom(s, e, at)
	case SessionReplaced:
		s.SuccessorSessionID = e.Fields.SuccessorSessionID
	case ReplacementLinked:
		s.Replacement.Status = ReplacementStatusLinked
		s.Replacement.PredecessorDigest = e.Fields.PredecessorDigest
		if s.Goal == "" {
			s.Goal = cutText(e.Fields.Goal, MaxGoalBytes)
		}
	case ReplacementRefused:
		s.Replacement.Status = ReplacementStatusRefused
		s.Replacement.Reason = cutText(e.Fields.Reason, MaxReasonBytes)
	}
	r.applied(s, e, at)
	return Outcome{Result: Applied, From: from, To: from}
}

// custom counts an allowed custom event and keeps it as an annotation. The
// counters stay sorted by type, so their order does not depend on the order
// the types arrived in (and a snapshot read back from JSON, where they are
// an object, continues byte for byte). The counter's type string is shared
// by the annotation, so a session holds one copy of each type name.
func (r *Reducer) custom(s *Session, e *Event, at int64) {
	i, found := slices.BinarySearchFunc(s.custom, e.Custom, func(c CustomCount, name string) int {
		return strings.Compare(c.Type, name)
	})
	if !found {
		s.custom = slices.Insert(s.custom, i, CustomCount{Type: e.Custom})
	}
	s.custom[i].Count++
	a := Annotation{EventID: e.ID, Type: s.custom[i].Type, At: at}
	if len(e.Payload) <= MaxAnnotationPayload {
		a.Payload = string(e.Payload)
	}
	s.annotations.push(a, AnnotationsKept)
}

func customIndex(s *Session, name string) int {
	i, found := slices.BinarySearchFunc(s.custom, name, func(c CustomCount, name string) int {
		return strings.Compare(c.Type, name)
	})
	if !found {
		return -1
	}
	return i
}

func (r *Reducer) create(s *Session, e *Event, at int64) {
	*s = Session{
		ID:                   e.SessionID,
		State:                StateCreated,
		CorrelationID:        e.CorrelationID,
		Goal:                 cutText(e.Fields.Goal, MaxGoalBytes),
		PredecessorSessionID: e.Fields.PredecessorSessionID,
		Labels:               boundLabels(e.Fields.Labels),
		ParentSessionID:      e.Fields.ParentSessionID,
		ParentClosePolicy:    e.Fields.ParentClosePolicy,
		CreatedAt:            at,
		StateEnteredAt:       at,
	}
	if n := len(e.Fields.Metadata); n > 0 && n <= MaxMetadataBytes {
		s.Metadata = string(e.Fields.Metadata)
	}
	for k, d := range e.Fields.Timeouts {
		if d >= MinTimeout && d <= MaxTimeout {
			s.Timeouts[k] = d
		}
	}
	if s.PredecessorSessionID != "" {
		s.Replacement.Status = ReplacementStatusPending
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
	case e.Type.System():
		// The replacement events have their own rule, terminal states
		// included (a FAILED session is where SessionReplaced applies).
		if e.HasExpectedVersion && e.ExpectedVersion != s.Version {
			return ReasonVersionConflict, nil
		}
		if !replacementAllowed(s, e.Type) {
			return ReasonInvalidReplacement, nil
		}
		if e.Type == ReplacementRefused && !s.State.Terminal() {
			// A refusal fails a live successor (the table's row).
			return ReasonNone, ruleFor(ReplacementRefused, TimeoutNone)
		}
		return ReasonNone, nil
	case s.State.Terminal():
		return ReasonAfterTerminal, nil
	case e.HasExpectedVersion && e.ExpectedVersion != s.Version:
		return ReasonVersionConflict, nil
	case e.Type == SessionCreated:
		return ReasonDuplicateCreate, nil
	case (e.Type == SessionInitializing || e.Type == SessionStarted) && s.Replacement.Status == ReplacementStatusPending:
		return ReasonReplacementPending, nil
	case (e.Type == ApprovalGranted || e.Type == ApprovalDenied) && s.State == StateAwaitingApproval &&
		e.Fields.HasRequestID && e.Fields.RequestID != s.Approval.RequestID:
		return ReasonApprovalMismatch, nil
	case e.Type == EventCustom:
		if len(s.custom) >= MaxCustomTypes && customIndex(s, e.Custom) < 0 {
			return ReasonTooManyCustomTypes, nil
		}
		return ReasonNone, nil
	case e.Type.Execution():
		switch {
		case s.State == StateActive:
			return ReasonNone, nil
		case e.Type == ToolCompleted && inFlightStates.Has(s.State):
			return ReasonNone, nil // work in flight is recorded
		case s.State == StatePaused, s.State == StateAwaitingApproval:
			return ReasonExecutionWhileSuspended, nil
		}
		return ReasonExecutionOutsideActive, nil
	case e.Type == CancellationRequested && s.State == StateCancelling && e.Fields.Mode == CancelForced &&
		s.Cancellation.Mode != CancelForced:
		return ReasonNone, &escalation
	}
	rule := ruleFor(e.Type, e.Fields.Timeout)
	if rule == nil || !rule.From.Has(s.State) {
		return ReasonInvalidTransition, nil
	}
	return ReasonNone, rule
}

// replacementAllowed is the fold rule of the replacement events
// (docs/lifecycle.md, "Replacements and children"): SessionReplaced applies
// to a FAILED session that has no successor yet; ReplacementLinked and
// ReplacementRefused apply, in any state, to a successor whose replacement is
// still pending.
func replacementAllowed(s *Session, t EventType) bool {
	if t == SessionReplaced {
		return ReplacementRefusal(s) == ""
	}
	return s.Replacement.Status == ReplacementStatusPending
}

// escalate applies a forced CancellationRequested to a graceful CANCELLING
// (docs/lifecycle.md, "Forced cancellation"): the mode becomes forced and
// the cancellation deadline runs from now; the state, stateEnteredAt and
// the cancellation's requestedAt and reason stay. It is recorded as a
// transition CANCELLING -> CANCELLING.
func (r *Reducer) escalate(s *Session, e *Event, at int64) {
	s.Cancellation.Mode = CancelForced
	s.Cancellation.EscalatedAt = at
	s.transitions.push(Transition{From: s.State, To: s.State, Type: e.Type, EventID: e.ID, At: at}, TransitionsKept)
	r.applied(s, e, at)
}

// failureOf returns the failure a SessionFailed describes, bounded for
// records from other producers: an unknown category is unknown, an
// invalid code is dropped, the reason is cut.
func failureOf(f *Fields) Failure {
	cat, _ := ParseFailureCategory(f.Category)
	out := Failure{Failed: true, Reason: cutText(f.Reason, MaxReasonBytes), Category: cat, Retryable: f.Retryable}
	if ValidFailureCode(f.Code) {
		out.Code = f.Code
	}
	return out
}

// endWait ends the pending approval wait at at, keeping the decision.
func endWait(s *Session, kind DecisionKind, e *Event, at int64) {
	waited := nonNegative(at - s.Approval.PendingSince)
	d := Decision{RequestID: s.Approval.RequestID, Kind: kind, At: at, Waited: waited}
	if kind == DecisionGranted || kind == DecisionDenied {
		d.By = cutText(e.Fields.By, MaxDeciderBytes)
		d.SentBy = cutText(e.SentBy, MaxDeciderBytes)
		d.Reason = cutText(e.Fields.Reason, MaxReasonBytes)
	}
	s.decisions.push(d, DecisionsKept)
	s.Approval.Waited += waited
	s.Approval.Pending = false
	s.Approval.PendingSince = 0
	s.Approval.RequestID = ""
	s.Approval.PendingReason = ""
}

// boundLabels returns the labels a session keeps from a SessionCreated's
// payload.labels, sorted by key. Ingest refuses labels out of bounds; for
// records from other producers the cut is, in document order: a pair with
// an invalid key or a key already seen is dropped, a value longer than
// MaxLabelValueBytes is cut at a UTF-8 boundary, and pairs after the first
// MaxLabels kept are dropped.
func boundLabels(in []Label) []Label {
	if len(in) == 0 {
		return nil
	}
	out := make([]Label, 0, min(len(in), MaxLabels))
	for _, l := range in {
		if len(out) == MaxLabels {
			break
		}
		if !ValidLabelKey(l.Key) || slices.ContainsFunc(out, func(o Label) bool { return o.Key == l.Key }) {
			continue
		}
		out = append(out, Label{Key: l.Key, Value: cutText(l.Value, MaxLabelValueBytes)})
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b Label) int { return strings.Compare(a.Key, b.Key) })
	return out
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
		s.Approval.RequestID = e.Fields.RequestID
		if !ValidRequestID(s.Approval.RequestID) {
			s.Approval.RequestID = e.ID.String() // one allocation: the string itself
		}
		s.Approval.PendingReason = cutText(e.Fields.Reason, MaxReasonBytes)
	case ApprovalGranted:
		s.Counters.ApprovalsGranted++
	case ApprovalDenied:
		s.Counters.ApprovalsDenied++
	case CancellationRequested:
		s.Cancellation = Cancellation{Requested: true, RequestedAt: at, Reason: cutText(e.Fields.Reason, MaxReasonBytes), Mode: e.Fields.Mode}
	case TimeoutExpired:
		if rule.Forced {
			s.Cancellation.Forced = true
			s.Cancellation.Completed = true
			s.Cancellation.CompletedAt = at
		} else {
			s.Cancellation = Cancellation{Requested: true, RequestedAt: at,
				Reason: timeoutReason(e.Fields.Timeout), Timeout: e.Fields.Timeout}
		}
	case SessionCancelled:
		s.Cancellation.Completed = true
		s.Cancellation.CompletedAt = at
	case SessionFailed:
		s.Failure = failureOf(&e.Fields)
		s.Failure.At, s.Failure.From = at, from
	case ReplacementRefused:
		s.Replacement.Status = ReplacementStatusRefused
		s.Replacement.Reason = cutText(e.Fields.Reason, MaxReasonBytes)
		s.Failure = Failure{Failed: true, Reason: s.Replacement.Reason, Category: FailurePolicy,
			Code: RefusalCode, At: at, From: from}
	case RecoveryStarted:
		s.Counters.Recoveries++
		s.Recovery = Recovery{Started: true, Active: true, ResumeTo: from, StartedAt: at}
	}
	if s.Recovery.Active && to != StateRecovering {
		s.Recovery.Active = false
		s.Recovery.CompletedAt = at
	}
	if s.Approval.Pending && to != StateAwaitingApproval && to != StateRecovering {
		kind := DecisionCancelled
		switch {
		case e.Type == ApprovalGranted:
			kind = DecisionGranted
		case e.Type == ApprovalDenied:
			kind = DecisionDenied
		case e.Type == TimeoutExpired && e.Fields.Timeout == TimeoutApproval:
			kind = DecisionExpired
		}
		endWait(s, kind, e, at)
	}
	closed := nonNegative(at - s.StateEnteredAt)
	s.Durations[from] += closed
	s.State = to
	s.StateEnteredAt = at
	s.transitions.push(Transition{From: from, To: to, Type: e.Type, EventID: e.ID, At: at}, TransitionsKept)
	r.applied(s, e, at)
	return closed
}

// timeoutReasons are the cancellation reasons a TimeoutExpired sets,
// "timeout:<kind>", made once rather than at every expiry.
var timeoutReasons = func() (r [NumTimeoutKinds]string) {
	for k := range TimeoutKind(NumTimeoutKinds) {
		r[k] = "timeout:" + k.String()
	}
	return r
}()

// timeoutReason is the cancellation reason of a timeout of kind k.
func timeoutReason(k TimeoutKind) string {
	if int(k) < NumTimeoutKinds {
		return timeoutReasons[k]
	}
	return "timeout:" + k.String()
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

// cutText returns the longest prefix of s of at most limit bytes that does
// not split a UTF-8 sequence: ingest refuses longer text, but other
// producers may write anything to the topic, and a snapshot must stay small.
// The cut depends only on the bytes, so every fold of the same event keeps
// the same prefix (the digest chain still hashes the whole event).
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// nonNegative clamps an interval at zero: occurredAt comes from producers'
// clocks, and a later event stamped earlier must not make a duration negative.
func nonNegative(d int64) int64 { return max(d, 0) }
