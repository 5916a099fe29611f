package fsm_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/correx/sessions/pkg/fsm"
)

// histories reads what s's getters give, oldest first.
func histories(s *fsm.Session) fsm.Histories {
	var h fsm.Histories
	for i := range s.NumTransitions() {
		h.Transitions = append(h.Transitions, s.TransitionAt(i))
	}
	for i := range s.NumRejections() {
		h.Rejections = append(h.Rejections, s.RejectionAt(i))
	}
	for i := range s.NumSeenIDs() {
		h.SeenIDs = append(h.SeenIDs, s.SeenIDAt(i))
	}
	for i := range s.NumCustomTypes() {
		h.CustomCounts = append(h.CustomCounts, s.CustomCountAt(i))
	}
	for i := range s.NumAnnotations() {
		h.Annotations = append(h.Annotations, s.AnnotationAt(i))
	}
	return h
}

// TestRestoreHistories: restoring the histories a folded session's getters
// read gives a session whose getters read the same, and whose fold goes on
// alike (the window recognises the same duplicates, the rings keep their
// bounds).
func TestRestoreHistories(t *testing.T) {
	var r fsm.Reducer
	var s fsm.Session
	at := t0
	for _, e := range []fsm.Event{
		fsm.NewEvent(fsm.EventID{1}, "s", fsm.SessionCreated, at, fsm.Fields{Goal: "g"}),
		fsm.NewEvent(fsm.EventID{2}, "s", fsm.SessionStarted, at, fsm.Fields{}),
	} {
		r.Apply(&s, &e)
	}
	for i := range fsm.IDWindow + 10 { // wraps every ring
		at = at.Add(1)
		e := fsm.NewEvent(fsm.EventID{3, byte(i)}, "s", fsm.SessionPaused, at, fsm.Fields{})
		switch i % 3 {
		case 1:
			e = fsm.NewEvent(fsm.EventID{3, byte(i)}, "s", fsm.SessionResumed, at, fsm.Fields{})
		case 2:
			e = fsm.NewCustomEvent(fsm.EventID{3, byte(i)}, "s", "x.acme.T"+string(rune('a'+i%5)), at, []byte(`{}`))
		}
		r.Apply(&s, &e)
	}
	want := histories(&s)
	if len(want.Transitions) != fsm.TransitionsKept || len(want.SeenIDs) != fsm.IDWindow || len(want.Annotations) != fsm.AnnotationsKept {
		t.Fatalf("the fold did not fill the histories: %d transitions, %d ids, %d annotations",
			len(want.Transitions), len(want.SeenIDs), len(want.Annotations))
	}
	restored := s
	if err := restored.RestoreHistories(histories(&s)); err != nil {
		t.Fatal(err)
	}
	if got := histories(&restored); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored histories differ:\n got %+v\nwant %+v", got, want)
	}
	for _, e := range []fsm.Event{
		fsm.NewEvent(fsm.EventID{4}, "s", fsm.SessionResumed, at.Add(1), fsm.Fields{}),
		fsm.NewEvent(fsm.EventID{3, byte(fsm.IDWindow + 9)}, "s", fsm.SessionPaused, at.Add(2), fsm.Fields{}), // duplicate
		fsm.NewCustomEvent(fsm.EventID{5}, "s", "x.acme.Tz", at.Add(3), nil),
	} {
		o1, o2 := r.Apply(&s, &e), r.Apply(&restored, &e)
		if o1 != o2 {
			t.Errorf("%s: outcome %+v on the folded session, %+v on the restored one", e.Type, o1, o2)
		}
	}
	if got, want := histories(&restored), histories(&s); !reflect.DeepEqual(got, want) {
		t.Errorf("after folding on, histories differ:\n got %+v\nwant %+v", got, want)
	}
}

// TestRestoreHistoriesRefuses: a history over its bound, custom counters
// out of order, or an annotation of an uncounted type is refused, and the
// session is left as it was.
func TestRestoreHistoriesRefuses(t *testing.T) {
	counted := []fsm.CustomCount{{Type: "x.a.A", Count: 1}, {Type: "x.a.B", Count: 1}}
	for _, tt := range []struct {
		name, err string
		h         fsm.Histories
	}{
		{"transitions", "transitions", fsm.Histories{Transitions: make([]fsm.Transition, fsm.TransitionsKept+1)}},
		{"rejections", "rejections", fsm.Histories{Rejections: make([]fsm.Rejection, fsm.RejectionsKept+1)}},
		{"window", "event ids", fsm.Histories{SeenIDs: make([]fsm.EventID, fsm.IDWindow+1)}},
		{"custom types", "custom types", fsm.Histories{CustomCounts: make([]fsm.CustomCount, fsm.MaxCustomTypes+1)}},
		{"annotations", "annotations", fsm.Histories{Annotations: make([]fsm.Annotation, fsm.AnnotationsKept+1)}},
		{"order", "out of order", fsm.Histories{CustomCounts: []fsm.CustomCount{counted[1], counted[0]}}},
		{"repeated type", "out of order", fsm.Histories{CustomCounts: []fsm.CustomCount{counted[0], counted[0]}}},
		{"uncounted", "uncounted type", fsm.Histories{CustomCounts: counted, Annotations: []fsm.Annotation{{Type: "x.a.C"}}}},
	} {
		s := fsm.Session{ID: "s"}
		if err := s.RestoreHistories(fsm.Histories{CustomCounts: counted[:1], SeenIDs: []fsm.EventID{{9}}}); err != nil {
			t.Fatal(err)
		}
		before := histories(&s)
		err := s.RestoreHistories(tt.h)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: error %v, want one naming %q", tt.name, err, tt.err)
		}
		if got := histories(&s); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: refused restore changed the session: %+v", tt.name, got)
		}
	}
}
