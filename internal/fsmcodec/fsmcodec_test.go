package fsmcodec_test

import (
	"testing"

	"github.com/correx/sessions/internal/fsmcodec"
	"github.com/correx/sessions/pkg/fsm"
)

// TestPushKeepsTheBound: each history keeps its newest entries, up to its
// bound, oldest first, as the Session's getters read them.
func TestPushKeepsTheBound(t *testing.T) {
	var s fsm.Session
	for i := range fsm.TransitionsKept + 3 {
		fsmcodec.PushTransition(&s, fsm.Transition{At: int64(i)})
	}
	for i := range fsm.RejectionsKept + 3 {
		fsmcodec.PushRejection(&s, fsm.Rejection{At: int64(i)})
	}
	for i := range fsm.IDWindow + 3 {
		fsmcodec.PushSeenID(&s, fsm.EventID{byte(i), byte(i >> 8)})
	}
	for i := range fsm.AnnotationsKept + 3 {
		fsmcodec.PushAnnotation(&s, fsm.Annotation{At: int64(i)})
	}
	fsmcodec.PushCustomCount(&s, fsm.CustomCount{Type: "x.a.A", Count: 2})
	fsmcodec.PushCustomCount(&s, fsm.CustomCount{Type: "x.a.B", Count: 1})

	if n, first, last := s.NumTransitions(), s.TransitionAt(0).At, s.TransitionAt(fsm.TransitionsKept-1).At; n != fsm.TransitionsKept || first != 3 || last != fsm.TransitionsKept+2 {
		t.Errorf("transitions: %d kept, %d..%d", n, first, last)
	}
	if n, first := s.NumRejections(), s.RejectionAt(0).At; n != fsm.RejectionsKept || first != 3 {
		t.Errorf("rejections: %d kept, first %d", n, first)
	}
	if n, first := s.NumSeenIDs(), s.SeenIDAt(0); n != fsm.IDWindow || first != (fsm.EventID{3}) || s.Seen(fsm.EventID{2}) {
		t.Errorf("window: %d kept, first %v", n, first)
	}
	if n, first := s.NumAnnotations(), s.AnnotationAt(0).At; n != fsm.AnnotationsKept || first != 3 {
		t.Errorf("annotations: %d kept, first %d", n, first)
	}
	if n := s.NumCustomTypes(); n != 2 || s.CustomCountAt(1) != (fsm.CustomCount{Type: "x.a.B", Count: 1}) {
		t.Errorf("custom counters: %d", n)
	}
}
