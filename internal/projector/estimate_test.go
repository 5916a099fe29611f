package projector

import (
	"fmt"
	"strings"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// fullSnapshot returns a snapshot with every field the fold bounds at its
// bound: the longest ids and texts, every label, metadata, custom counter,
// annotation, rejection, transition and remembered id.
func fullSnapshot() snapshot.Snapshot {
	id := strings.Repeat("s", fsm.MaxSessionIDLen)
	var s snapshot.Snapshot
	s.ID, s.State = id, fsm.StateFailed
	s.CorrelationID = strings.Repeat("c", fsm.MaxCorrelationIDLen)
	s.Goal = strings.Repeat("g", fsm.MaxGoalBytes)
	s.PredecessorSessionID = strings.Repeat("p", fsm.MaxSessionIDLen)
	s.ParentSessionID = strings.Repeat("q", fsm.MaxSessionIDLen)
	s.SuccessorSessionID = strings.Repeat("r", fsm.MaxSessionIDLen)
	s.Metadata = `{"m":"` + strings.Repeat("m", fsm.MaxMetadataBytes-8) + `"}`
	for i := range fsm.MaxLabels {
		key := fmt.Sprintf("%02d", i) + strings.Repeat("k", fsm.MaxLabelKeyLen-2)
		s.Labels = append(s.Labels, fsm.Label{Key: key, Value: strings.Repeat("v", fsm.MaxLabelValueBytes)})
	}
	s.Failure = fsm.Failure{Failed: true, Reason: strings.Repeat("f", fsm.MaxReasonBytes)}
	s.Cancellation = fsm.Cancellation{Requested: true, Reason: strings.Repeat("x", fsm.MaxReasonBytes)}
	s.Replacement = fsm.Replacement{Status: fsm.ReplacementStatusRefused, Reason: strings.Repeat("y", fsm.MaxReasonBytes)}
	custom := func(i int) string {
		return "x." + strings.Repeat("v", fsm.MaxCustomVendorLen) + "." + fmt.Sprintf("N%02d", i) + strings.Repeat("n", fsm.MaxCustomNameLen-3)
	}
	var h fsm.Histories
	for i := range fsm.MaxCustomTypes {
		h.CustomCounts = append(h.CustomCounts, fsm.CustomCount{Type: custom(i), Count: 1 << 40})
	}
	payload := `{"a":"` + strings.Repeat("a", fsm.MaxAnnotationPayload-8) + `"}`
	for i := range fsm.AnnotationsKept {
		h.Annotations = append(h.Annotations, fsm.Annotation{EventID: fsm.EventID{byte(i), 1}, Type: custom(i), At: 1 << 60, Payload: payload})
	}
	for i := range fsm.RejectionsKept {
		h.Rejections = append(h.Rejections, fsm.Rejection{EventID: fsm.EventID{byte(i), 2}, Type: fsm.EventCustom, Custom: custom(100 + i),
			State: fsm.StateActive, Reason: fsm.ReasonTooManyCustomTypes, At: 1 << 60})
	}
	for i := range fsm.TransitionsKept {
		h.Transitions = append(h.Transitions, fsm.Transition{From: fsm.StateActive, To: fsm.StatePaused, Type: fsm.SessionPaused,
			EventID: fsm.EventID{byte(i), 3}, At: 1 << 60})
	}
	for i := range fsm.IDWindow {
		h.SeenIDs = append(h.SeenIDs, fsm.EventID{byte(i), 4})
	}
	if err := s.RestoreHistories(h); err != nil {
		panic(err)
	}
	s.Version, s.Counters.Events = 1<<40, 1<<40
	s.Position = snapshot.Position{Partition: 1 << 20, Offset: 1 << 50}
	return s
}

// TestEstimateCoversEncodedSize: a cached entry's estimate is at least the
// encoded size of its snapshot, with every field at its bound or none, read
// from the store or encoded by a flush.
func TestEstimateCoversEncodedSize(t *testing.T) {
	full := fullSnapshot()
	for _, tt := range []struct {
		name string
		snap snapshot.Snapshot
	}{{"every field at its bound", full}, {"none", snapshot.Snapshot{}}} {
		c := newCache(Config{CacheSize: 10, FlushSize: 1})
		c.addPartition(0)
		part := &partState{id: 0}
		enc := len(tt.snap.AppendBinary(nil))

		stored := c.add(part, "stored", &tt.snap)
		folded := c.add(part, "folded", nil)
		folded.snap = tt.snap
		c.markDirty(folded, 0)
		for _, en := range c.takeDirty(nil) {
			c.encode(en)
		}
		for _, en := range []*entry{stored, folded} {
			if got := en.estimate(); got < enc {
				t.Errorf("%s, %s: estimate %d, encoded size %d", tt.name, en.id, got, enc)
			}
		}
		t.Logf("%s: estimate %d, encoded size %d", tt.name, stored.estimate(), enc)
	}
}

// TestEstimateIsEncodedLength: a cached entry counts a fixed overhead plus
// the length of its snapshot's binary encoding, for a snapshot read from
// the store and for one a fold grew, once a flush has encoded it.
func TestEstimateIsEncodedLength(t *testing.T) {
	c := newCache(Config{CacheSize: 10, FlushSize: 1})
	c.addPartition(0)
	part := &partState{id: 0}
	full := fullSnapshot()
	en := c.add(part, full.ID, &full)
	if got, want := en.estimate(), entryOverhead+len(full.AppendBinary(nil)); got != want {
		t.Errorf("stored snapshot: estimate %d, want %d (overhead and encoded length)", got, want)
	}

	grown := c.add(part, "grown", nil)
	before := grown.estimate()
	grown.snap = full
	c.markDirty(grown, 0)
	if got := grown.estimate(); got != before {
		t.Errorf("dirty entry: estimate %d before its flush encodes it, want %d", got, before)
	}
	var data []byte
	for _, d := range c.takeDirty(nil) {
		data = c.encode(d).Data
	}
	if got, want := grown.estimate(), entryOverhead+len(data); got != want {
		t.Errorf("encoded entry: estimate %d, want %d (overhead and encoded length)", got, want)
	}
	if got, want := c.lru.bytes, en.estimate()+grown.estimate(); got != want {
		t.Errorf("cache counts %d bytes, its entries %d", got, want)
	}
}
