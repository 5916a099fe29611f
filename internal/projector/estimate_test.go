package projector

import (
	"fmt"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/fsmcodec"
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
	for i := range fsm.MaxCustomTypes {
		fsmcodec.PushCustomCount(&s.Session, fsm.CustomCount{Type: custom(i), Count: 1 << 40})
	}
	payload := `{"a":"` + strings.Repeat("a", fsm.MaxAnnotationPayload-8) + `"}`
	for i := range fsm.AnnotationsKept {
		fsmcodec.PushAnnotation(&s.Session, fsm.Annotation{EventID: fsm.EventID{byte(i), 1}, Type: custom(i), At: 1 << 60, Payload: payload})
	}
	for i := range fsm.RejectionsKept {
		fsmcodec.PushRejection(&s.Session, fsm.Rejection{EventID: fsm.EventID{byte(i), 2}, Type: fsm.EventCustom, Custom: custom(100 + i),
			State: fsm.StateActive, Reason: fsm.ReasonTooManyCustomTypes, At: 1 << 60})
	}
	for i := range fsm.TransitionsKept {
		fsmcodec.PushTransition(&s.Session, fsm.Transition{From: fsm.StateActive, To: fsm.StatePaused, Type: fsm.SessionPaused,
			EventID: fsm.EventID{byte(i), 3}, At: 1 << 60})
	}
	for i := range fsm.IDWindow {
		fsmcodec.PushSeenID(&s.Session, fsm.EventID{byte(i), 4})
	}
	s.Version, s.Counters.Events = 1<<40, 1<<40
	s.Position = snapshot.Position{Partition: 1 << 20, Offset: 1 << 50}
	return s
}

// TestEstimateCoversEncodedSize: a cached entry's estimate is at least the
// encoded size of its snapshot, with every field at its bound.
func TestEstimateCoversEncodedSize(t *testing.T) {
	full := fullSnapshot()
	for _, tt := range []struct {
		name string
		snap snapshot.Snapshot
	}{{"every field at its bound", full}, {"none", snapshot.Snapshot{}}} {
		en := &entry{id: tt.snap.ID, snap: tt.snap}
		enc := len(tt.snap.AppendBinary(nil))
		got := en.estimate()
		if got < enc {
			t.Errorf("%s: estimate %d, encoded size %d", tt.name, got, enc)
		}
		t.Logf("%s: estimate %d, encoded size %d", tt.name, got, enc)
	}
}
