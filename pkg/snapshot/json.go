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
	"github.com/correx/sessions/pkg/wire"
)

// The JSON form of a snapshot is the read model (docs/lifecycle.md, "The
// snapshot"). MarshalJSON gives what the query API serves; EncodeJSON adds an
// "internal" member with the fold state the API hides (the duplicate window
// and exact nanosecond durations), so that JSON is a complete stored format
// too (measured against the binary form by BenchmarkCodec, and readable by
// Decode).

// storedJSON is the complete JSON form: the API's members (wire.Snapshot,
// embedded so that they stay members of the one object) and, last, the
// internal fold state.
type storedJSON struct {
	wire.Snapshot
	Internal *jsonInternal `json:"internal,omitempty"`
}

type jsonInternal struct {
	EventIDs    []fsm.EventID    `json:"eventIds"`
	DurationsNs map[string]int64 `json:"durationsNs"`
	WaitedNs    int64            `json:"waitedNs"`
	// DecisionsWaitedNs are the approval decisions' exact waits, in the
	// order of approval.decisions.
	DecisionsWaitedNs []int64 `json:"decisionsWaitedNs,omitempty"`
}

// at is a time in nanoseconds since the Unix epoch as the JSON form writes
// it: RFC 3339 with nanoseconds in UTC.
func at(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func atPtr(set bool, ns int64) *time.Time {
	if !set {
		return nil
	}
	t := at(ns)
	return &t
}

// namer spells states and event types as the JSON form does, keeping the
// first one that has no spelling (a snapshot that cannot be encoded).
type namer struct{ err error }

func (n *namer) state(s fsm.State) string {
	if !s.Valid() && n.err == nil {
		n.err = fmt.Errorf("snapshot: invalid state %d", uint8(s))
	}
	return s.String()
}

func (n *namer) eventType(t fsm.EventType) string {
	if !t.Valid() && n.err == nil {
		n.err = fmt.Errorf("snapshot: invalid event type %d", uint8(t))
	}
	return t.String()
}

// Wire returns the snapshot as the query API serves it: the wire.Snapshot
// that MarshalJSON encodes. It fails only for a snapshot whose state or
// history holds a value with no JSON spelling (the zero Snapshot).
func (s *Snapshot) Wire() (*wire.Snapshot, error) {
	v, err := s.view(false)
	if err != nil {
		return nil, err
	}
	return &v.Snapshot, nil
}

func (s *Snapshot) view(internal bool) (*storedJSON, error) {
	var n namer
	c := s.Counters
	out := &storedJSON{}
	v := &out.Snapshot
	*v = wire.Snapshot{
		SessionID: s.ID, State: n.state(s.State), Terminal: s.Terminal(), CorrelationID: s.CorrelationID,
		Goal: s.Goal, CreatedAt: at(s.CreatedAt), UpdatedAt: at(s.UpdatedAt),
		StateEnteredAt: at(s.StateEnteredAt), Version: s.Version, LastEventID: s.LastEventID.String(),
		Position: s.Position, FirstOffset: s.FirstOffset,
		Counters: wire.Counters{Events: c.Events, ModelTurns: c.ModelTurns, ToolCalls: c.ToolCalls,
			ToolFailures: c.ToolFailures, RepairCycles: c.RepairCycles, Pauses: c.Pauses,
			ApprovalsRequested: c.ApprovalsRequested, ApprovalsGranted: c.ApprovalsGranted,
			ApprovalsDenied: c.ApprovalsDenied, Recoveries: c.Recoveries, Rejected: c.Rejected,
			Duplicates: c.Duplicates, SupersededTimeouts: c.SupersededTimeouts, Custom: map[string]uint64{}},
		DurationsMs: map[string]int64{},
		Transitions: make([]wire.Transition, s.NumTransitions()),
		Rejections:  make([]wire.Rejection, s.NumRejections()),
		Approval: wire.Approval{
			PendingSince: atPtr(s.Approval.Pending, s.Approval.PendingSince),
			WaitedMs:     s.Approval.Waited / int64(time.Millisecond),
			Decisions:    make([]wire.ApprovalDecision, s.NumDecisions()),
		},
		ExecutionMs:       s.ExecutionUsed() / int64(time.Millisecond),
		Digest:            hex.EncodeToString(s.Digest[:]),
		Labels:            map[string]string{},
		ParentClosePolicy: s.ParentClosePolicy.String(),
		Timeouts:          map[string]string{},
		Annotations:       make([]wire.Annotation, s.NumAnnotations()),
	}
	if s.PredecessorSessionID != "" {
		p := s.PredecessorSessionID
		v.PredecessorSessionID = &p
	}
	if a := s.Approval; a.Pending {
		v.Approval.Pending = &wire.PendingApproval{RequestID: a.RequestID, Since: at(a.PendingSince), Reason: a.PendingReason}
	}
	for i := range v.Approval.Decisions {
		d := s.DecisionAt(i)
		v.Approval.Decisions[i] = wire.ApprovalDecision{RequestID: d.RequestID, Decision: d.Kind.String(), At: at(d.At),
			WaitedMs: d.Waited / int64(time.Millisecond)}
		if d.Kind == fsm.DecisionGranted || d.Kind == fsm.DecisionDenied {
			v.Approval.Decisions[i].By, v.Approval.Decisions[i].Reason = d.By, d.Reason
			v.Approval.Decisions[i].SentBy = d.SentBy
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
		v.Deadline = &wire.Deadline{Kind: d.Kind.String(), At: at(d.At)}
	}
	if s.SuccessorSessionID != "" {
		p := s.SuccessorSessionID
		v.SuccessorSessionID = &p
	}
	if rp := s.Replacement; rp.Status != fsm.ReplacementStatusNone {
		v.Replacement = &wire.Replacement{PredecessorSessionID: s.PredecessorSessionID, Status: rp.Status.String(),
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
		v.Annotations[i] = wire.Annotation{EventID: a.EventID.String(), Type: a.Type, At: at(a.At)}
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
		v.Transitions[i] = wire.Transition{From: n.state(t.From), To: n.state(t.To), Type: n.eventType(t.Type),
			EventID: t.EventID.String(), At: at(t.At)}
	}
	for i := range v.Rejections {
		r := s.RejectionAt(i)
		name := r.Type.String()
		if r.Type == fsm.EventCustom {
			name = r.Custom
		}
		v.Rejections[i] = wire.Rejection{EventID: r.EventID.String(), Type: name, State: n.state(r.State),
			Reason: r.Reason.String(), At: at(r.At)}
	}
	if f := s.Failure; f.Failed {
		v.Failure = &wire.Failure{Reason: f.Reason, Category: f.Category.String(), Retryable: f.Retryable,
			At: at(f.At), From: n.state(f.From)}
		if f.Code != "" {
			v.Failure.Code = &f.Code
		}
	}
	if cn := s.Cancellation; cn.Requested {
		v.Cancellation = &wire.Cancellation{RequestedAt: at(cn.RequestedAt), Reason: cn.Reason,
			Mode: cn.Mode.String(), Forced: cn.Forced, CompletedAt: atPtr(cn.Completed, cn.CompletedAt),
			EscalatedAt: atPtr(cn.EscalatedAt != 0, cn.EscalatedAt)}
		if cn.Timeout != fsm.TimeoutNone {
			v.Cancellation.Timeout = cn.Timeout.String()
		}
	}
	if r := s.Recovery; r.Started {
		v.Recovery = &wire.Recovery{Active: r.Active, ResumeTo: n.state(r.ResumeTo), StartedAt: at(r.StartedAt),
			CompletedAt: atPtr(!r.Active, r.CompletedAt)}
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
		out.Internal = in
	}
	if n.err != nil {
		return nil, n.err
	}
	return out, nil
}

// MarshalJSON returns the snapshot as the query API serves it
// (docs/lifecycle.md), without the internal fold state. Text is not
// HTML-escaped: "<" stays one byte rather than six (\u003c), so a goal's size
// in the API is its size.
func (s *Snapshot) MarshalJSON() ([]byte, error) { return marshalView(s.view(false)) }

func marshalView(v *storedJSON, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
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
	var v storedJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return corrupt("json: %v", err)
	}
	if v.State == "" {
		return corrupt("json: missing state")
	}
	var p parser
	*s = Snapshot{Position: v.Position, FirstOffset: v.FirstOffset}
	s.ID, s.State, s.CorrelationID, s.Goal = v.SessionID, p.state(v.State), v.CorrelationID, v.Goal
	if v.PredecessorSessionID != nil {
		s.PredecessorSessionID = *v.PredecessorSessionID
	}
	s.CreatedAt, s.UpdatedAt, s.StateEnteredAt = v.CreatedAt.UnixNano(), v.UpdatedAt.UnixNano(), v.StateEnteredAt.UnixNano()
	s.Version, s.LastEventID = v.Version, p.eventID(v.LastEventID)
	c := v.Counters
	s.Counters = fsm.Counters{Events: c.Events, ModelTurns: c.ModelTurns, ToolCalls: c.ToolCalls,
		ToolFailures: c.ToolFailures, RepairCycles: c.RepairCycles, Pauses: c.Pauses,
		ApprovalsRequested: c.ApprovalsRequested, ApprovalsGranted: c.ApprovalsGranted,
		ApprovalsDenied: c.ApprovalsDenied, Recoveries: c.Recoveries, Rejected: c.Rejected, Duplicates: c.Duplicates,
		SupersededTimeouts: c.SupersededTimeouts}
	var h fsm.Histories
	if err := v.restoreV2(s, &h, &p); err != nil {
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
		s.Approval.Pending, s.Approval.PendingSince = true, p.UnixNano()
	}
	if p := v.Approval.Pending; p != nil {
		s.Approval.Pending, s.Approval.PendingSince = true, p.Since.UnixNano()
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
		s.Failure = fsm.Failure{Failed: true, Reason: f.Reason, At: f.At.UnixNano(), From: p.state(f.From), Retryable: f.Retryable}
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
		s.Cancellation = fsm.Cancellation{Requested: true, RequestedAt: cn.RequestedAt.UnixNano(), Reason: cn.Reason,
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
			s.Cancellation.Completed, s.Cancellation.CompletedAt = true, cn.CompletedAt.UnixNano()
		}
		if cn.EscalatedAt != nil {
			s.Cancellation.EscalatedAt = cn.EscalatedAt.UnixNano()
		}
	}
	if r := v.Recovery; r != nil {
		s.Recovery = fsm.Recovery{Started: true, Active: r.Active, ResumeTo: p.state(r.ResumeTo),
			StartedAt: r.StartedAt.UnixNano()}
		if r.CompletedAt != nil {
			s.Recovery.CompletedAt = r.CompletedAt.UnixNano()
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
		h.Transitions[i] = fsm.Transition{From: p.state(t.From), To: p.state(t.To), Type: p.eventType(t.Type),
			EventID: p.eventID(t.EventID), At: t.At.UnixNano()}
	}
	h.Rejections = make([]fsm.Rejection, 0, len(v.Rejections))
	for _, r := range v.Rejections {
		reason, ok := fsm.ParseReason(r.Reason)
		if !ok || !reason.Rejection() {
			return corrupt("json: bad rejection reason %q", r.Reason)
		}
		rj := fsm.Rejection{EventID: p.eventID(r.EventID), State: p.state(r.State), Reason: reason, At: r.At.UnixNano()}
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
	if p.err != nil {
		return p.err
	}
	if err := s.RestoreHistories(h); err != nil {
		return corrupt("json: %v", err)
	}
	return nil
}

// parser reads the JSON spellings of states, event types and event ids,
// keeping the first that is none as a corrupt error.
type parser struct{ err error }

func (p *parser) fail(what, s string) {
	if p.err == nil {
		p.err = corrupt("json: bad %s %q", what, s)
	}
}

func (p *parser) state(s string) fsm.State {
	st, ok := fsm.ParseState(s)
	if !ok {
		p.fail("state", s)
	}
	return st
}

func (p *parser) eventType(s string) fsm.EventType {
	t, ok := fsm.ParseEventType([]byte(s))
	if !ok {
		p.fail("event type", s)
	}
	return t
}

func (p *parser) eventID(s string) fsm.EventID {
	id, ok := fsm.ParseEventID([]byte(s))
	if !ok {
		p.fail("event id", s)
	}
	return id
}

// restoreV2 reads the fields added to the snapshot since its first form into
// s, the histories among them into h; a snapshot stored before they existed
// has none of them and decodes as a session without.
func (v *storedJSON) restoreV2(s *Snapshot, h *fsm.Histories, p *parser) error {
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
		an := fsm.Annotation{EventID: p.eventID(a.EventID), Type: types[i], At: a.At.UnixNano()}
		if len(a.Payload) > 0 {
			an.Payload = string(a.Payload)
		}
		h.Annotations = append(h.Annotations, an)
	}
	return nil
}

// restoreDecisions reads approval.decisions into h, with the exact waits
// of the internal form when it has them.
func (v *storedJSON) restoreDecisions(h *fsm.Histories) error {
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
		out := fsm.Decision{RequestID: d.RequestID, Kind: kind, At: d.At.UnixNano(), Waited: d.WaitedMs * int64(time.Millisecond),
			By: d.By, SentBy: d.SentBy, Reason: d.Reason}
		if exact != nil {
			out.Waited = exact[i]
		}
		h.Decisions = append(h.Decisions, out)
	}
	return nil
}

// String renders a short description, for logs and test failures.
func (s *Snapshot) String() string {
	return fmt.Sprintf("%s %s v%d @%s", s.ID, s.State, s.Version, s.Position)
}
