package snapshot

import (
	"encoding/binary"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// The stored form of a snapshot is this compact binary encoding (chosen over
// JSON by BenchmarkCodec; the HTTP API still speaks JSON). Layout, version 4:
//
//	[0]     format version (4; Decode still reads 1 to 3)
//	[1:5]   position partition, big-endian uint32
//	[5:13]  position offset, big-endian uint64
//	[13]    state
//	[14:]   body: varints and length-prefixed strings, in the order of
//	        AppendBinary; times after createdAt are deltas from createdAt
//
// The fixed header lets the store's fencing script read the position and the
// state with one GETRANGE and no parsing of the body; it is the same in both
// versions. Version 2 adds, for a rejection of a custom type, the type name
// after the rejection's time, and after the duplicate window a tail with the
// fields added since (labels, metadata, timeouts, replacement, custom
// counters and annotations, ...; see appendV2Tail). Version 3 adds after
// that a second tail (appendV3Tail): the structured failure, the pending
// approval request, the cancellation's escalation and the approval
// decisions. Version 4 adds a third tail (appendV4Tail): the name of the
// token that sent each decision. A version 1 snapshot decodes as a session
// without the fields of versions 2 to 4, a version 2 one without those of 3
// and 4, a version 3 one without the decisions' senders.
const (
	FormatBinaryV1 = 1
	FormatBinaryV2 = 2
	FormatBinaryV3 = 3
	FormatBinaryV4 = 4
	// FormatBinary is the version AppendBinary writes.
	FormatBinary = FormatBinaryV4
	headerLen    = 14
)

// AppendBinary appends the binary encoding of s to dst. Equal snapshots give
// equal bytes.
func (s *Snapshot) AppendBinary(dst []byte) []byte {
	dst = append(dst, FormatBinary)
	dst = binary.BigEndian.AppendUint32(dst, uint32(s.Position.Partition))
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.Position.Offset))
	dst = append(dst, byte(s.State))

	base := s.CreatedAt
	t := func(v int64) { dst = binary.AppendVarint(dst, v-base) }
	u := func(v uint64) { dst = binary.AppendUvarint(dst, v) }
	str := func(v string) { u(uint64(len(v))); dst = append(dst, v...) }

	dst = binary.AppendVarint(dst, s.FirstOffset)
	str(s.ID)
	if s.CorrelationID == s.ID {
		str("")
	} else {
		str(s.CorrelationID)
	}
	str(s.Goal)
	str(s.PredecessorSessionID)
	dst = binary.AppendVarint(dst, s.CreatedAt)
	t(s.UpdatedAt)
	t(s.StateEnteredAt)
	u(s.Version)
	dst = append(dst, s.LastEventID[:]...)

	c := &s.Counters
	for _, v := range [...]uint64{c.Events, c.ModelTurns, c.ToolCalls, c.ToolFailures, c.RepairCycles,
		c.Pauses, c.ApprovalsRequested, c.ApprovalsGranted, c.ApprovalsDenied, c.Recoveries,
		c.Rejected, c.Duplicates} {
		u(v)
	}
	for st := 1; st < fsm.NumStates; st++ {
		u(uint64(s.Durations[st]))
	}

	a := &s.Approval
	dst = append(dst, flags(a.Pending))
	t(a.PendingSince)
	u(uint64(a.Waited))

	f := &s.Failure
	dst = append(dst, flags(f.Failed))
	if f.Failed {
		str(f.Reason)
		t(f.At)
		dst = append(dst, byte(f.From))
	}

	cn := &s.Cancellation
	dst = append(dst, flags(cn.Requested, cn.Completed, cn.Forced))
	if cn.Requested {
		t(cn.RequestedAt)
		str(cn.Reason)
		dst = append(dst, byte(cn.Mode), byte(cn.Timeout))
		t(cn.CompletedAt)
	}

	r := &s.Recovery
	dst = append(dst, flags(r.Started, r.Active))
	if r.Started {
		dst = append(dst, byte(r.ResumeTo))
		t(r.StartedAt)
		t(r.CompletedAt)
	}

	dst = append(dst, s.Digest[:]...)

	u(uint64(s.NumTransitions()))
	for i := range s.NumTransitions() {
		tr := s.TransitionAt(i)
		dst = append(dst, byte(tr.From), byte(tr.To), byte(tr.Type))
		dst = append(dst, tr.EventID[:]...)
		t(tr.At)
	}
	u(uint64(s.NumRejections()))
	for i := range s.NumRejections() {
		rj := s.RejectionAt(i)
		dst = append(dst, byte(rj.Type), byte(rj.State), byte(rj.Reason))
		dst = append(dst, rj.EventID[:]...)
		t(rj.At)
		if rj.Type == fsm.EventCustom {
			str(rj.Custom)
		}
	}
	u(uint64(s.NumSeenIDs()))
	for i := range s.NumSeenIDs() {
		id := s.SeenIDAt(i)
		dst = append(dst, id[:]...)
	}
	dst = s.appendV2Tail(dst)
	dst = s.appendV3Tail(dst)
	return s.appendV4Tail(dst)
}

// appendV4Tail appends the field version 4 added: each approval decision's
// sender (Decision.SentBy), in the order of the decisions.
func (s *Snapshot) appendV4Tail(dst []byte) []byte {
	for i := range s.NumDecisions() {
		v := s.DecisionAt(i).SentBy
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// decodeV4Tail reads what appendV4Tail wrote into the decisions of h.
func (d *decoder) decodeV4Tail(h *fsm.Histories) {
	for i := range h.Decisions {
		if d.err != nil {
			return
		}
		h.Decisions[i].SentBy = d.str()
	}
}

// appendV3Tail appends the fields version 3 added: the failure's category,
// code and retryable flag, the pending approval's requestId and reason,
// the cancellation's escalation time (a flag, then the time), and the
// approval decisions (count, then requestId, kind, time, wait, by and
// reason). Times are deltas from createdAt, as in the body.
func (s *Snapshot) appendV3Tail(dst []byte) []byte {
	u := func(v uint64) { dst = binary.AppendUvarint(dst, v) }
	str := func(v string) { u(uint64(len(v))); dst = append(dst, v...) }
	t := func(v int64) { dst = binary.AppendVarint(dst, v-s.CreatedAt) }
	f := &s.Failure
	dst = append(dst, byte(f.Category), flags(f.Retryable))
	str(f.Code)
	str(s.Approval.RequestID)
	str(s.Approval.PendingReason)
	dst = append(dst, flags(s.Cancellation.EscalatedAt != 0))
	if s.Cancellation.EscalatedAt != 0 {
		t(s.Cancellation.EscalatedAt)
	}
	u(uint64(s.NumDecisions()))
	for i := range s.NumDecisions() {
		d := s.DecisionAt(i)
		str(d.RequestID)
		dst = append(dst, byte(d.Kind))
		t(d.At)
		u(uint64(d.Waited))
		str(d.By)
		str(d.Reason)
	}
	return dst
}

// decodeV3Tail reads what appendV3Tail wrote, the decisions into h.
func (d *decoder) decodeV3Tail(s *Snapshot, h *fsm.Histories) {
	f := &s.Failure
	if f.Category = fsm.FailureCategory(d.byte()); int(f.Category) >= fsm.NumFailureCategories {
		d.fail("bad failure category %d", f.Category)
	}
	f.Retryable = d.flags(1) != 0
	f.Code = d.str()
	s.Approval.RequestID = d.str()
	s.Approval.PendingReason = d.str()
	if d.flags(1) != 0 {
		s.Cancellation.EscalatedAt = d.time()
	}
	n := d.count(fsm.DecisionsKept)
	h.Decisions = make([]fsm.Decision, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		var dc fsm.Decision
		dc.RequestID = d.str()
		dc.Kind = fsm.DecisionKind(d.byte())
		if dc.Kind < fsm.DecisionGranted || dc.Kind > fsm.DecisionCancelled {
			d.fail("bad decision kind %d", dc.Kind)
		}
		dc.At = d.time()
		dc.Waited = d.nonNegative()
		dc.By = d.str()
		dc.Reason = d.str()
		h.Decisions = append(h.Decisions, dc)
	}
}

// appendV2Tail appends the fields version 2 added: supersededTimeouts, the
// labels (count, then key and value), metadata, parentSessionId,
// parentClosePolicy, the timeouts (a bit set of kinds, then each set
// duration in nanoseconds), successorSessionId, the replacement (status,
// then the digest when linked or the reason when refused), the custom
// counters (count, then type and count) and the annotations (count, then
// id, the index of the type among the custom counters, time and payload).
func (s *Snapshot) appendV2Tail(dst []byte) []byte {
	u := func(v uint64) { dst = binary.AppendUvarint(dst, v) }
	str := func(v string) { u(uint64(len(v))); dst = append(dst, v...) }
	u(s.Counters.SupersededTimeouts)
	u(uint64(len(s.Labels)))
	for _, l := range s.Labels {
		str(l.Key)
		str(l.Value)
	}
	str(s.Metadata)
	str(s.ParentSessionID)
	dst = append(dst, byte(s.ParentClosePolicy))
	var set byte
	for k := 1; k < len(s.Timeouts); k++ {
		if s.Timeouts[k] > 0 {
			set |= 1 << k
		}
	}
	dst = append(dst, set)
	for k := 1; k < len(s.Timeouts); k++ {
		if s.Timeouts[k] > 0 {
			u(uint64(s.Timeouts[k]))
		}
	}
	str(s.SuccessorSessionID)
	rp := &s.Replacement
	dst = append(dst, byte(rp.Status))
	switch rp.Status {
	case fsm.ReplacementStatusLinked:
		dst = append(dst, rp.PredecessorDigest[:]...)
	case fsm.ReplacementStatusRefused:
		str(rp.Reason)
	}
	u(uint64(s.NumCustomTypes()))
	for i := range s.NumCustomTypes() {
		c := s.CustomCountAt(i)
		str(c.Type)
		u(c.Count)
	}
	u(uint64(s.NumAnnotations()))
	for i := range s.NumAnnotations() {
		a := s.AnnotationAt(i)
		dst = append(dst, a.EventID[:]...)
		ti := 0
		for j := range s.NumCustomTypes() {
			if s.CustomCountAt(j).Type == a.Type {
				ti = j
				break
			}
		}
		u(uint64(ti))
		dst = binary.AppendVarint(dst, a.At-s.CreatedAt)
		str(a.Payload)
	}
	return dst
}

// decodeV2Tail reads what appendV2Tail wrote, the histories into h.
func (d *decoder) decodeV2Tail(s *Snapshot, h *fsm.Histories) {
	s.Counters.SupersededTimeouts = d.uvarint()
	for n := d.count(fsm.MaxLabels); n > 0 && d.err == nil; n-- {
		s.Labels = append(s.Labels, fsm.Label{Key: d.str(), Value: d.str()})
	}
	s.Metadata = d.str()
	s.ParentSessionID = d.str()
	if s.ParentClosePolicy = fsm.ParentClosePolicy(d.byte()); s.ParentClosePolicy > fsm.ParentCloseAbandon {
		d.fail("bad parent close policy")
	}
	set := d.byte()
	if set&1 != 0 || int(set)>>len(s.Timeouts) != 0 {
		d.fail("bad timeouts set %#x", set)
	}
	for k := 1; k < len(s.Timeouts); k++ {
		if set&(1<<k) != 0 {
			s.Timeouts[k] = time.Duration(d.nonNegative())
		}
	}
	s.SuccessorSessionID = d.str()
	rp := &s.Replacement
	switch rp.Status = fsm.ReplacementStatus(d.byte()); rp.Status {
	case fsm.ReplacementStatusNone, fsm.ReplacementStatusPending:
	case fsm.ReplacementStatusLinked:
		d.bytes(rp.PredecessorDigest[:])
	case fsm.ReplacementStatusRefused:
		rp.Reason = d.str()
	default:
		d.fail("bad replacement status %d", rp.Status)
	}
	types := d.count(fsm.MaxCustomTypes)
	h.CustomCounts = make([]fsm.CustomCount, 0, types)
	for i := 0; i < types && d.err == nil; i++ {
		c := fsm.CustomCount{Type: d.str(), Count: d.uvarint()}
		if i > 0 && c.Type <= h.CustomCounts[i-1].Type {
			d.fail("custom counters out of order")
			return
		}
		h.CustomCounts = append(h.CustomCounts, c)
	}
	n := d.count(fsm.AnnotationsKept)
	h.Annotations = make([]fsm.Annotation, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		var a fsm.Annotation
		d.id(&a.EventID)
		ti := d.uvarint()
		if ti >= uint64(len(h.CustomCounts)) {
			d.fail("annotation type %d of %d", ti, types)
			return
		}
		a.Type = h.CustomCounts[ti].Type
		a.At = d.time()
		a.Payload = d.str()
		h.Annotations = append(h.Annotations, a)
	}
}

func flags(bits ...bool) byte {
	var b byte
	for i, v := range bits {
		if v {
			b |= 1 << i
		}
	}
	return b
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (s *Snapshot) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil), nil }

// UnmarshalBinary implements encoding.BinaryUnmarshaler; see Decode.
func (s *Snapshot) UnmarshalBinary(b []byte) error { return Decode(b, s) }

// DecodeHead reads a stored snapshot's session id and position without
// decoding the rest: what a reader that keeps the latest snapshot of each
// session needs (a restore from the changelog) before it decodes the kept
// ones. It does not check the rest; Decode does. A JSON snapshot is
// decoded whole.
func DecodeHead(b []byte) (id string, pos Position, err error) {
	if len(b) > 0 && b[0] == '{' {
		var s Snapshot
		if err := s.UnmarshalJSON(b); err != nil {
			return "", Position{}, err
		}
		return s.ID, s.Position, nil
	}
	if len(b) < headerLen {
		return "", Position{}, corrupt("%d bytes, shorter than the header", len(b))
	}
	if b[0] < FormatBinaryV1 || b[0] > FormatBinaryV4 {
		return "", Position{}, corrupt("unknown format version %d", b[0])
	}
	pos.Partition = int32(binary.BigEndian.Uint32(b[1:5]))
	pos.Offset = int64(binary.BigEndian.Uint64(b[5:13]))
	if !fsm.State(b[13]).Valid() || pos.Partition < 0 || pos.Offset < 0 {
		return "", Position{}, corrupt("bad header")
	}
	d := decoder{b: b, i: headerLen}
	d.varint() // FirstOffset
	id = d.str()
	if d.err != nil {
		return "", Position{}, d.err
	}
	return id, pos, nil
}

// Decode decodes a stored snapshot into s, replacing its contents. It reads
// the binary format and, for snapshots written as JSON (a '{' first byte),
// the JSON form. Any malformed input gives an error wrapping ErrCorrupt.
func Decode(b []byte, s *Snapshot) error {
	if len(b) > 0 && b[0] == '{' {
		return s.UnmarshalJSON(b)
	}
	if len(b) < headerLen {
		return corrupt("%d bytes, shorter than the header", len(b))
	}
	if b[0] < FormatBinaryV1 || b[0] > FormatBinaryV4 {
		return corrupt("unknown format version %d", b[0])
	}
	v2 := b[0] >= FormatBinaryV2
	*s = Snapshot{}
	s.Position.Partition = int32(binary.BigEndian.Uint32(b[1:5]))
	s.Position.Offset = int64(binary.BigEndian.Uint64(b[5:13]))
	s.State = fsm.State(b[13])
	if !s.State.Valid() || s.Position.Partition < 0 || s.Position.Offset < 0 {
		return corrupt("bad header")
	}
	d := decoder{b: b, i: headerLen}
	s.FirstOffset = d.varint()
	s.ID = d.str()
	s.CorrelationID = d.str()
	if s.CorrelationID == "" {
		s.CorrelationID = s.ID
	}
	s.Goal = d.str()
	s.PredecessorSessionID = d.str()
	s.CreatedAt = d.varint()
	d.base = s.CreatedAt
	s.UpdatedAt = d.time()
	s.StateEnteredAt = d.time()
	s.Version = d.uvarint()
	d.id(&s.LastEventID)

	c := &s.Counters
	for _, p := range [...]*uint64{&c.Events, &c.ModelTurns, &c.ToolCalls, &c.ToolFailures, &c.RepairCycles,
		&c.Pauses, &c.ApprovalsRequested, &c.ApprovalsGranted, &c.ApprovalsDenied, &c.Recoveries,
		&c.Rejected, &c.Duplicates} {
		*p = d.uvarint()
	}
	for st := 1; st < fsm.NumStates; st++ {
		s.Durations[st] = d.nonNegative()
	}

	a := &s.Approval
	a.Pending = d.flags(1)&1 != 0
	a.PendingSince = d.time()
	a.Waited = d.nonNegative()

	f := &s.Failure
	if d.flags(1)&1 != 0 {
		f.Failed = true
		f.Reason = d.str()
		f.At = d.time()
		f.From = d.state(true)
	}

	cn := &s.Cancellation
	if fl := d.flags(3); fl&1 != 0 {
		cn.Requested, cn.Completed, cn.Forced = true, fl&2 != 0, fl&4 != 0
		cn.RequestedAt = d.time()
		cn.Reason = d.str()
		cn.Mode = fsm.CancelMode(d.byte())
		cn.Timeout = fsm.TimeoutKind(d.byte())
		cn.CompletedAt = d.time()
		if cn.Mode > fsm.CancelForced || cn.Timeout > fsm.TimeoutCancellation {
			d.fail("bad cancellation")
		}
	} else if fl != 0 {
		d.fail("cancellation flags without a request")
	}

	r := &s.Recovery
	if fl := d.flags(2); fl&1 != 0 {
		r.Started, r.Active = true, fl&2 != 0
		r.ResumeTo = d.state(false)
		r.StartedAt = d.time()
		r.CompletedAt = d.time()
	} else if fl != 0 {
		d.fail("recovery flags without a recovery")
	}

	d.bytes(s.Digest[:])

	var h fsm.Histories
	n := d.count(fsm.TransitionsKept)
	h.Transitions = make([]fsm.Transition, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		var tr fsm.Transition
		tr.From, tr.To = d.state(true), d.state(false)
		tr.Type = d.eventType()
		d.id(&tr.EventID)
		tr.At = d.time()
		h.Transitions = append(h.Transitions, tr)
	}
	n = d.count(fsm.RejectionsKept)
	h.Rejections = make([]fsm.Rejection, 0, n)
	for ; n > 0 && d.err == nil; n-- {
		var rj fsm.Rejection
		rj.Type = d.eventType()
		rj.State = d.state(false)
		rj.Reason = fsm.Reason(d.byte())
		if !rj.Reason.Rejection() {
			d.fail("bad rejection reason")
		}
		d.id(&rj.EventID)
		rj.At = d.time()
		if rj.Type == fsm.EventCustom {
			if !v2 {
				d.fail("custom rejection in version 1")
			}
			rj.Custom = d.str()
		}
		h.Rejections = append(h.Rejections, rj)
	}
	n = d.count(fsm.IDWindow)
	h.SeenIDs = make([]fsm.EventID, n)
	for i := range h.SeenIDs {
		d.id(&h.SeenIDs[i])
	}
	if v2 && d.err == nil {
		d.decodeV2Tail(s, &h)
	}
	if b[0] >= FormatBinaryV3 && d.err == nil {
		d.decodeV3Tail(s, &h)
	}
	if b[0] >= FormatBinaryV4 && d.err == nil {
		d.decodeV4Tail(&h)
	}
	if d.err == nil && d.i != len(b) {
		d.fail("%d trailing bytes", len(b)-d.i)
	}
	if d.err == nil {
		if err := s.RestoreHistories(h); err != nil {
			d.fail("%v", err)
		}
	}
	return d.err
}

// decoder reads the body; the first problem sticks in err and later reads
// return zero values, so Decode checks once at the end.
type decoder struct {
	b    []byte
	i    int
	base int64
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = corrupt(format, args...)
	}
	d.i = len(d.b)
}

func (d *decoder) byte() byte {
	if d.err != nil || d.i >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	c := d.b[d.i]
	d.i++
	return c
}

func (d *decoder) flags(n uint) byte {
	f := d.byte()
	if f>>n != 0 {
		d.fail("unknown flags %#x", f)
	}
	return f
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) nonNegative() int64 {
	v := d.uvarint()
	if v > 1<<62 {
		d.fail("value out of range")
		return 0
	}
	return int64(v)
}

func (d *decoder) time() int64 { return d.base + d.varint() }

func (d *decoder) count(limit int) int {
	n := d.uvarint()
	if n > uint64(limit) {
		d.fail("count %d over limit %d", n, limit)
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)-d.i) {
		d.fail("truncated string")
		return ""
	}
	v := string(d.b[d.i : d.i+int(n)])
	d.i += int(n)
	return v
}

func (d *decoder) bytes(dst []byte) {
	if d.err != nil || len(d.b)-d.i < len(dst) {
		d.fail("truncated")
		return
	}
	d.i += copy(dst, d.b[d.i:])
}

func (d *decoder) id(dst *fsm.EventID) { d.bytes(dst[:]) }

func (d *decoder) state(allowNone bool) fsm.State {
	st := fsm.State(d.byte())
	if !st.Valid() && !(allowNone && st == fsm.StateNone) {
		d.fail("bad state %d", st)
	}
	return st
}

func (d *decoder) eventType() fsm.EventType {
	t := fsm.EventType(d.byte())
	if !t.Valid() {
		d.fail("bad event type %d", t)
	}
	return t
}
