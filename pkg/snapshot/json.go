package snapshot

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// The JSON form of a snapshot is the read model (docs/lifecycle.md, "The
// snapshot"). MarshalJSON gives what the query API serves; EncodeJSON adds an
// "internal" member with the fold state the API hides (the duplicate window
// and exact nanosecond durations), so that JSON is a complete stored format
// too (measured against the binary form by BenchmarkCodec, and readable by
// Decode).

type jsonSnapshot struct {
	SessionID            string            `json:"sessionId"`
	State                fsm.State         `json:"state"`
	Terminal             bool              `json:"terminal"`
	CorrelationID        string            `json:"correlationId"`
	Goal                 string            `json:"goal"`
	PredecessorSessionID *string           `json:"predecessorSessionId"`
	Labels               map[string]string `json:"labels"`
	Metadata             json.RawMessage   `json:"metadata"`
	ParentSessionID      *string           `json:"parentSessionId"`
	ParentClosePolicy    string            `json:"parentClosePolicy"`
	Timeouts             map[string]string `json:"timeouts"`
	Deadline             *jsonDeadline     `json:"deadline"`
	SuccessorSessionID   *string           `json:"successorSessionId"`
	Replacement          *jsonReplacement  `json:"replacement"`
	CreatedAt            jsonTime          `json:"createdAt"`
	UpdatedAt            jsonTime          `json:"updatedAt"`
	StateEnteredAt       jsonTime          `json:"stateEnteredAt"`
	Version              uint64            `json:"version"`
	LastEventID          fsm.EventID       `json:"lastEventId"`
	Position             Position          `json:"position"`
	FirstOffset          int64             `json:"firstOffset"`
	Counters             jsonCounters      `json:"counters"`
	DurationsMs          map[string]int64  `json:"durationsMs"`
	ExecutionMs          int64             `json:"executionMs"`
	Transitions          []jsonTransition  `json:"transitions"`
	Rejections           []jsonRejection   `json:"rejections"`
	Approval             jsonApproval      `json:"approval"`
	Failure              *jsonFailure      `json:"failure"`
	Cancellation         *jsonCancellation `json:"cancellation"`
	Recovery             *jsonRecovery     `json:"recovery"`
	Annotations          []jsonAnnotation  `json:"annotations"`
	Digest               string            `json:"digest"`
	Internal             *jsonInternal     `json:"internal,omitempty"`
}

type jsonCounters struct {
	Events             uint64            `json:"events"`
	ModelTurns         uint64            `json:"modelTurns"`
	ToolCalls          uint64            `json:"toolCalls"`
	ToolFailures       uint64            `json:"toolFailures"`
	RepairCycles       uint64            `json:"repairCycles"`
	Pauses             uint64            `json:"pauses"`
	ApprovalsRequested uint64            `json:"approvalsRequested"`
	ApprovalsGranted   uint64            `json:"approvalsGranted"`
	ApprovalsDenied    uint64            `json:"approvalsDenied"`
	Recoveries         uint64            `json:"recoveries"`
	Rejected           uint64            `json:"rejected"`
	Duplicates         uint64            `json:"duplicates"`
	SupersededTimeouts uint64            `json:"supersededTimeouts"`
	Custom             map[string]uint64 `json:"custom"`
}

type jsonReplacement struct {
	PredecessorSessionID string `json:"predecessorSessionId"`
	Status               string `json:"status"`
	PredecessorDigest    string `json:"predecessorDigest,omitempty"`
	Reason               string `json:"reason,omitempty"`
}

type jsonAnnotation struct {
	EventID fsm.EventID     `json:"eventId"`
	Type    string          `json:"type"`
	At      jsonTime        `json:"at"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type jsonTransition struct {
	From    fsm.State     `json:"from"`
	To      fsm.State     `json:"to"`
	Type    fsm.EventType `json:"type"`
	EventID fsm.EventID   `json:"eventId"`
	At      jsonTime      `json:"at"`
}

type jsonRejection struct {
	EventID fsm.EventID `json:"eventId"`
	Type    string      `json:"type"`
	State   fsm.State   `json:"state"`
	Reason  string      `json:"reason"`
	At      jsonTime    `json:"at"`
}

// jsonDeadline is the earliest armed deadline (docs/timeouts.md).
type jsonDeadline struct {
	Kind string   `json:"kind"`
	At   jsonTime `json:"at"`
}

type jsonApproval struct {
	Pending      *jsonPending   `json:"pending"`
	PendingSince *jsonTime      `json:"pendingSince"`
	WaitedMs     int64          `json:"waitedMs"`
	Decisions    []jsonDecision `json:"decisions"`
}

// jsonPending is the pending approval request.
type jsonPending struct {
	RequestID string   `json:"requestId"`
	Since     jsonTime `json:"since"`
	Reason    string   `json:"reason"`
}

// jsonDecision is how one approval request ended; by and reason are left
// out of expired and cancelled decisions.
type jsonDecision struct {
	RequestID string   `json:"requestId"`
	Decision  string   `json:"decision"`
	At        jsonTime `json:"at"`
	WaitedMs  int64    `json:"waitedMs"`
	By        *string  `json:"by,omitempty"`
	Reason    *string  `json:"reason,omitempty"`
}

type jsonFailure struct {
	Reason    string    `json:"reason"`
	Category  string    `json:"category"`
	Code      *string   `json:"code"`
	Retryable bool      `json:"retryable"`
	At        jsonTime  `json:"at"`
	From      fsm.State `json:"from"`
}

type jsonCancellation struct {
	RequestedAt jsonTime  `json:"requestedAt"`
	Reason      string    `json:"reason"`
	Mode        string    `json:"mode"`
	Timeout     string    `json:"timeout,omitempty"`
	Forced      bool      `json:"forced"`
	CompletedAt *jsonTime `json:"completedAt"`
	// EscalatedAt is when a forced request escalated a graceful
	// cancellation, absent when none did.
	EscalatedAt *jsonTime `json:"escalatedAt,omitempty"`
}

type jsonRecovery struct {
	Active      bool      `json:"active"`
	ResumeTo    fsm.State `json:"resumeTo"`
	StartedAt   jsonTime  `json:"startedAt"`
	CompletedAt *jsonTime `json:"completedAt"`
}

type jsonInternal struct {
	EventIDs    []fsm.EventID    `json:"eventIds"`
	DurationsNs map[string]int64 `json:"durationsNs"`
	WaitedNs    int64            `json:"waitedNs"`
	// DecisionsWaitedNs are the approval decisions' exact waits, in the
	// order of approval.decisions.
	DecisionsWaitedNs []int64 `json:"decisionsWaitedNs,omitempty"`
}

// jsonTime is a time in nanoseconds since the Unix epoch, spelled as RFC 3339
// with nanoseconds in UTC.
type jsonTime int64

func (t jsonTime) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 32)
	b = append(b, '"')
	b = time.Unix(0, int64(t)).UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

func (t *jsonTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = jsonTime(v.UnixNano())
	return nil
}

func timePtr(set bool, v int64) *jsonTime {
	if !set {
		return nil
	}
	t := jsonTime(v)
	return &t
}

func (s *Snapshot) view(internal bool) *jsonSnapshot {
	c := s.Counters
	v := &jsonSnapshot{
		SessionID: s.ID, State: s.State, Terminal: s.Terminal(), CorrelationID: s.CorrelationID,
		Goal: s.Goal, CreatedAt: jsonTime(s.CreatedAt), UpdatedAt: jsonTime(s.UpdatedAt),
		StateEnteredAt: jsonTime(s.StateEnteredAt), Version: s.Version, LastEventID: s.LastEventID,
		Position: s.Position, FirstOffset: s.FirstOffset,
		Counters: jsonCounters{c.Events, c.ModelTurns, c.ToolCalls, c.ToolFailures, c.RepairCycles,
			c.Pauses, c.ApprovalsRequested, c.ApprovalsGranted, c.ApprovalsDenied, c.Recoveries,
			c.Rejected, c.Duplicates, c.SupersededTimeouts, map[string]uint64{}},
		DurationsMs: map[string]int64{},
		Transitions: make([]jsonTransition, s.NumTransitions()),
		Rejections:  make([]jsonRejection, s.NumRejections()),
		Approval: jsonApproval{
			PendingSince: timePtr(s.Approval.Pending, s.Approval.PendingSince),
			WaitedMs:     s.Approval.Waited / int64(time.Millisecond),
			Decisions:    make([]jsonDecision, s.NumDecisions()),
		},
		ExecutionMs:       s.ExecutionUsed() / int64(time.Millisecond),
		Digest:            hex.EncodeToString(s.Digest[:]),
		Labels:            map[string]string{},
		ParentClosePolicy: s.ParentClosePolicy.String(),
		Timeouts:          map[string]string{},
		Annotations:       make([]jsonAnnotation, s.NumAnnotations()),
	}
	if s.PredecessorSessionID != "" {
		p := s.PredecessorSessionID
		v.PredecessorSessionID = &p
	}
	if a := s.Approval; a.Pending {
		v.Approval.Pending = &jsonPending{RequestID: a.RequestID, Since: jsonTime(a.PendingSince), Reason: a.PendingReason}
	}
	for i := range v.Approval.Decisions {
		d := s.DecisionAt(i)
		v.Approval.Decisions[i] = jsonDecision{RequestID: d.RequestID, Decision: d.Kind.String(), At: jsonTime(d.At),
			WaitedMs: d.Waited / int64(time.Millisecond)}
		if d.Kind == fsm.DecisionGranted || d.Kind == fsm.DecisionDenied {
			if d.By != "" {
				v.Approval.Decisions[i].By = &d.By
			}
			if d.Reason != "" {
				v.Approval.Decisions[i].Reason = &d.Reason
			}
		}
	}
	for _, l := range s.Labels {
		v.Labels[l.Key] = l.Value
	}
	if s.Metadata != "" {
		v.Metadata = json.RawMessage(s.Metadata)
	}
	if s.ParentSessionID != "" {
		p := s.ParentSessionID
		v.ParentSessionID = &p
	}
	// The API form shows the effective timeouts (the session's own, else
	// the service defaults); the internal form keeps the session's own, so
	// that it reads back exactly.
	timeouts := s.Timeouts
	if !internal {
		timeouts = timeouts.Effective(s.TimeoutDefaults)
	}
	for k, d := range timeouts {
		if d > 0 {
			v.Timeouts[fsm.TimeoutKind(k).String()] = d.String()
		}
	}
	if d, ok := fsm.NextDeadline(&s.Session, s.TimeoutDefaults); ok {
		v.Deadline = &jsonDeadline{Kind: d.Kind.String(), At: jsonTime(d.At)}
	}
	if s.SuccessorSessionID != "" {
		p := s.SuccessorSessionID
		v.SuccessorSessionID = &p
	}
	if rp := s.Replacement; rp.Status != fsm.ReplacementStatusNone {
		v.Replacement = &jsonReplacement{PredecessorSessionID: s.PredecessorSessionID, Status: rp.Status.String(),
			Reason: rp.Reason}
		if rp.Status == fsm.ReplacementStatusLinked {
			v.Replacement.PredecessorDigest = hex.EncodeToString(rp.PredecessorDigest[:])
		}
	}
	for i := range s.NumCustomTypes() {
		c := s.CustomCountAt(i)
		v.Counters.Custom[c.Type] = c.Count
	}
	for i := range v.Annotations {
		a := s.AnnotationAt(i)
		v.Annotations[i] = jsonAnnotation{EventID: a.EventID, Type: a.Type, At: jsonTime(a.At)}
		if a.Payload != "" {
			v.Annotations[i].Payload = json.RawMessage(a.Payload)
		}
	}
	for st := 1; st < fsm.NumStates; st++ {
		if ms := s.Durations[st] / int64(time.Millisecond); ms > 0 {
			v.DurationsMs[fsm.State(st).String()] = ms
		}
	}
	for i := range v.Transitions {
		t := s.TransitionAt(i)
		v.Transitions[i] = jsonTransition{t.From, t.To, t.Type, t.EventID, jsonTime(t.At)}
	}
	for i := range v.Rejections {
		r := s.RejectionAt(i)
		name := r.Type.String()
		if r.Type == fsm.EventCustom {
			name = r.Custom
		}
		v.Rejections[i] = jsonRejection{r.EventID, name, r.State, r.Reason.String(), jsonTime(r.At)}
	}
	if f := s.Failure; f.Failed {
		v.Failure = &jsonFailure{Reason: f.Reason, Category: f.Category.String(), Retryable: f.Retryable,
			At: jsonTime(f.At), From: f.From}
		if f.Code != "" {
			v.Failure.Code = &f.Code
		}
	}
	if cn := s.Cancellation; cn.Requested {
		v.Cancellation = &jsonCancellation{RequestedAt: jsonTime(cn.RequestedAt), Reason: cn.Reason,
			Mode: cn.Mode.String(), Forced: cn.Forced, CompletedAt: timePtr(cn.Completed, cn.CompletedAt),
			EscalatedAt: timePtr(cn.EscalatedAt != 0, cn.EscalatedAt)}
		if cn.Timeout != fsm.TimeoutNone {
			v.Cancellation.Timeout = cn.Timeout.String()
		}
	}
	if r := s.Recovery; r.Started {
		v.Recovery = &jsonRecovery{Active: r.Active, ResumeTo: r.ResumeTo, StartedAt: jsonTime(r.StartedAt),
			CompletedAt: timePtr(!r.Active, r.CompletedAt)}
	}
	if internal {
		in := &jsonInternal{EventIDs: make([]fsm.EventID, s.NumSeenIDs()), DurationsNs: map[string]int64{},
			WaitedNs: s.Approval.Waited}
		for i := range s.NumDecisions() {
			in.DecisionsWaitedNs = append(in.DecisionsWaitedNs, s.DecisionAt(i).Waited)
		}
		for i := range in.EventIDs {
			in.EventIDs[i] = s.SeenIDAt(i)
		}
		for st := 1; st < fsm.NumStates; st++ {
			if ns := s.Durations[st]; ns > 0 {
				in.DurationsNs[fsm.State(st).String()] = ns
			}
		}
		v.Internal = in
	}
	return v
}

// MarshalJSON returns the snapshot as the query API serves it
// (docs/lifecycle.md), without the internal fold state. Text is not
// HTML-escaped: "<" stays one byte rather than six (\u003c), so a goal's size
// in the API is its size.
func (s *Snapshot) MarshalJSON() ([]byte, error) { return marshalView(s.view(false)) }

func marshalView(v *jsonSnapshot) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// EncodeJSON returns the complete JSON form, internal fold state included,
// which Decode and UnmarshalJSON read back exactly. Like MarshalJSON it does
// not HTML-escape, so metadata and annotation payloads come back verbatim.
func EncodeJSON(s *Snapshot) ([]byte, error) { return marshalView(s.view(true)) }

// UnmarshalJSON reads the JSON form. Without the "internal" member (the API
// form) the duplicate window is empty and durations are whole milliseconds.
func (s *Snapshot) UnmarshalJSON(b []byte) error {
	var v jsonSnapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return corrupt("json: %v", err)
	}
	if !v.State.Valid() {
		return corrupt("json: missing state")
	}
	*s = Snapshot{Position: v.Position, FirstOffset: v.FirstOffset}
	s.ID, s.State, s.CorrelationID, s.Goal = v.SessionID, v.State, v.CorrelationID, v.Goal
	if v.PredecessorSessionID != nil {
		s.PredecessorSessionID = *v.PredecessorSessionID
	}
	s.CreatedAt, s.UpdatedAt, s.StateEnteredAt = int64(v.CreatedAt), int64(v.UpdatedAt), int64(v.StateEnteredAt)
	s.Version, s.LastEventID = v.Version, v.LastEventID
	c := v.Counters
	s.Counters = fsm.Counters{Events: c.Events, ModelTurns: c.ModelTurns, ToolCalls: c.ToolCalls,
		ToolFailures: c.ToolFailures, RepairCycles: c.RepairCycles, Pauses: c.Pauses,
		ApprovalsRequested: c.ApprovalsRequested, ApprovalsGranted: c.ApprovalsGranted,
		ApprovalsDenied: c.ApprovalsDenied, Recoveries: c.Recoveries, Rejected: c.Rejected, Duplicates: c.Duplicates,
		SupersededTimeouts: c.SupersededTimeouts}
	var h fsm.Histories
	if err := v.restoreV2(s, &h); err != nil {
		return err
	}
	durations := v.DurationsMs
	scale := int64(time.Millisecond)
	if v.Internal != nil {
		durations, scale = v.Internal.DurationsNs, 1
	}
	for name, d := range durations {
		st, ok := fsm.ParseState(name)
		if !ok || d < 0 {
			return corrupt("json: bad duration %q", name)
		}
		s.Durations[st] = d * scale
	}
	if p := v.Approval.PendingSince; p != nil {
		s.Approval.Pending, s.Approval.PendingSince = true, int64(*p)
	}
	if p := v.Approval.Pending; p != nil {
		s.Approval.Pending, s.Approval.PendingSince = true, int64(p.Since)
		s.Approval.RequestID, s.Approval.PendingReason = p.RequestID, p.Reason
	}
	if err := v.restoreDecisions(&h); err != nil {
		return err
	}
	s.Approval.Waited = v.Approval.WaitedMs * int64(time.Millisecond)
	if v.Internal != nil {
		s.Approval.Waited = v.Internal.WaitedNs
	}
	if f := v.Failure; f != nil {
		s.Failure = fsm.Failure{Failed: true, Reason: f.Reason, At: int64(f.At), From: f.From, Retryable: f.Retryable}
		if f.Category != "" {
			c, ok := fsm.ParseFailureCategory(f.Category)
			if !ok {
				return corrupt("json: bad failure category %q", f.Category)
			}
			s.Failure.Category = c
		}
		if f.Code != nil {
			s.Failure.Code = *f.Code
		}
	}
	if cn := v.Cancellation; cn != nil {
		s.Cancellation = fsm.Cancellation{Requested: true, RequestedAt: int64(cn.RequestedAt), Reason: cn.Reason,
			Forced: cn.Forced}
		if cn.Mode == "forced" {
			s.Cancellation.Mode = fsm.CancelForced
		}
		if cn.Timeout != "" {
			k, ok := fsm.ParseTimeoutKind([]byte(cn.Timeout))
			if !ok {
				return corrupt("json: bad timeout %q", cn.Timeout)
			}
			s.Cancellation.Timeout = k
		}
		if cn.CompletedAt != nil {
			s.Cancellation.Completed, s.Cancellation.CompletedAt = true, int64(*cn.CompletedAt)
		}
		if cn.EscalatedAt != nil {
			s.Cancellation.EscalatedAt = int64(*cn.EscalatedAt)
		}
	}
	if r := v.Recovery; r != nil {
		s.Recovery = fsm.Recovery{Started: true, Active: r.Active, ResumeTo: r.ResumeTo, StartedAt: int64(r.StartedAt)}
		if r.CompletedAt != nil {
			s.Recovery.CompletedAt = int64(*r.CompletedAt)
		}
	}
	if n, err := hex.Decode(s.Digest[:], []byte(v.Digest)); err != nil || n != len(s.Digest) {
		return corrupt("json: bad digest")
	}
	if len(v.Transitions) > fsm.TransitionsKept || len(v.Rejections) > fsm.RejectionsKept {
		return corrupt("json: too many transitions or rejections")
	}
	h.Transitions = make([]fsm.Transition, len(v.Transitions))
	for i, t := range v.Transitions {
		h.Transitions[i] = fsm.Transition{From: t.From, To: t.To, Type: t.Type, EventID: t.EventID, At: int64(t.At)}
	}
	h.Rejections = make([]fsm.Rejection, 0, len(v.Rejections))
	for _, r := range v.Rejections {
		reason, ok := fsm.ParseReason(r.Reason)
		if !ok || !reason.Rejection() {
			return corrupt("json: bad rejection reason %q", r.Reason)
		}
		rj := fsm.Rejection{EventID: r.EventID, State: r.State, Reason: reason, At: int64(r.At)}
		if t, ok := fsm.ParseEventType([]byte(r.Type)); ok {
			rj.Type = t
		} else if fsm.ValidCustomType([]byte(r.Type)) {
			rj.Type, rj.Custom = fsm.EventCustom, r.Type
		} else {
			return corrupt("json: bad rejection type %q", r.Type)
		}
		h.Rejections = append(h.Rejections, rj)
	}
	if v.Internal != nil {
		if len(v.Internal.EventIDs) > fsm.IDWindow {
			return corrupt("json: too many event ids")
		}
		h.SeenIDs = v.Internal.EventIDs
	}
	if err := s.RestoreHistories(h); err != nil {
		return corrupt("json: %v", err)
	}
	return nil
}

// restoreV2 reads the fields added to the snapshot since its first form into
// s, the histories among them into h; a snapshot stored before they existed
// has none of them and decodes as a session without.
func (v *jsonSnapshot) restoreV2(s *Snapshot, h *fsm.Histories) error {
	if len(v.Labels) > fsm.MaxLabels {
		return corrupt("json: %d labels", len(v.Labels))
	}
	for k, val := range v.Labels {
		s.Labels = append(s.Labels, fsm.Label{Key: k, Value: val})
	}
	slices.SortFunc(s.Labels, func(a, b fsm.Label) int { return strings.Compare(a.Key, b.Key) })
	if len(v.Metadata) > 0 && string(v.Metadata) != "null" {
		s.Metadata = string(v.Metadata)
	}
	if v.ParentSessionID != nil {
		s.ParentSessionID = *v.ParentSessionID
	}
	switch v.ParentClosePolicy {
	case "", "cancel":
	case "abandon":
		s.ParentClosePolicy = fsm.ParentCloseAbandon
	default:
		return corrupt("json: bad parentClosePolicy %q", v.ParentClosePolicy)
	}
	for name, d := range v.Timeouts {
		k, ok := fsm.ParseTimeoutKind([]byte(name))
		dur, err := time.ParseDuration(d)
		if !ok || err != nil || dur <= 0 {
			return corrupt("json: bad timeout %q", name)
		}
		s.Timeouts[k] = dur
	}
	if v.SuccessorSessionID != nil {
		s.SuccessorSessionID = *v.SuccessorSessionID
	}
	if rp := v.Replacement; rp != nil {
		st, ok := fsm.ParseReplacementStatus(rp.Status)
		if !ok {
			return corrupt("json: bad replacement status %q", rp.Status)
		}
		s.Replacement.Status, s.Replacement.Reason = st, rp.Reason
		if st == fsm.ReplacementStatusLinked {
			if n, err := hex.Decode(s.Replacement.PredecessorDigest[:], []byte(rp.PredecessorDigest)); err != nil || n != 32 {
				return corrupt("json: bad predecessorDigest")
			}
		}
	}
	if len(v.Counters.Custom) > fsm.MaxCustomTypes || len(v.Annotations) > fsm.AnnotationsKept {
		return corrupt("json: too many custom types or annotations")
	}
	types := make([]string, 0, len(v.Counters.Custom))
	for t := range v.Counters.Custom {
		types = append(types, t)
	}
	slices.Sort(types)
	h.CustomCounts = make([]fsm.CustomCount, len(types))
	for i, t := range types {
		h.CustomCounts[i] = fsm.CustomCount{Type: t, Count: v.Counters.Custom[t]}
	}
	for _, a := range v.Annotations {
		i, ok := slices.BinarySearch(types, a.Type)
		if !ok {
			return corrupt("json: annotation of uncounted type %q", a.Type)
		}
		an := fsm.Annotation{EventID: a.EventID, Type: types[i], At: int64(a.At)}
		if len(a.Payload) > 0 {
			an.Payload = string(a.Payload)
		}
		h.Annotations = append(h.Annotations, an)
	}
	return nil
}

// restoreDecisions reads approval.decisions into h, with the exact waits
// of the internal form when it has them.
func (v *jsonSnapshot) restoreDecisions(h *fsm.Histories) error {
	ds := v.Approval.Decisions
	if len(ds) > fsm.DecisionsKept {
		return corrupt("json: %d approval decisions", len(ds))
	}
	var exact []int64
	if v.Internal != nil {
		exact = v.Internal.DecisionsWaitedNs
	}
	if exact != nil && len(exact) != len(ds) {
		return corrupt("json: %d decision waits for %d decisions", len(exact), len(ds))
	}
	for i, d := range ds {
		kind, ok := fsm.ParseDecisionKind(d.Decision)
		if !ok || d.WaitedMs < 0 {
			return corrupt("json: bad approval decision %q", d.Decision)
		}
		out := fsm.Decision{RequestID: d.RequestID, Kind: kind, At: int64(d.At), Waited: d.WaitedMs * int64(time.Millisecond)}
		if exact != nil {
			out.Waited = exact[i]
		}
		if d.By != nil {
			out.By = *d.By
		}
		if d.Reason != nil {
			out.Reason = *d.Reason
		}
		h.Decisions = append(h.Decisions, out)
	}
	return nil
}

// String renders a short description, for logs and test failures.
func (s *Snapshot) String() string {
	return fmt.Sprintf("%s %s v%d @%s", s.ID, s.State, s.Version, s.Position)
}
