package fsm_test

import (
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// TestFoldAllocations pins what the hot path allocates: an event id as
// text is one string (a request id made from an event id is stored as
// one), and a timeout's expiry allocates nothing for its reason, which is
// one of a few fixed strings.
func TestFoldAllocations(t *testing.T) {
	id := fsm.EventID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if n := testing.AllocsPerRun(100, func() { _ = id.String() }); n != 1 {
		t.Errorf("EventID.String: %v allocations, want 1 (the string)", n)
	}
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var r fsm.Reducer
	var base fsm.Session
	for i, typ := range []fsm.EventType{fsm.SessionCreated, fsm.SessionInitializing, fsm.SessionStarted} {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1)}, "t-1", typ, at, fsm.Fields{Goal: "g"})
		if o := r.Apply(&base, &e); o.Result != fsm.Applied {
			t.Fatalf("%v: %v", typ, o)
		}
	}
	expiry := fsm.NewEvent(fsm.EventID{9}, "t-1", fsm.TimeoutExpired, at.Add(time.Hour),
		fsm.Fields{Timeout: fsm.TimeoutInactivity, ArmedVersion: base.Version, HasArmedVersion: true})
	var s fsm.Session
	n := testing.AllocsPerRun(100, func() {
		s = base
		if o := r.Apply(&s, &expiry); o.Result != fsm.Applied {
			t.Fatalf("TimeoutExpired: %v", o)
		}
	})
	if s.Cancellation.Reason != "timeout:inactivity" {
		t.Fatalf("the cancellation's reason: %q", s.Cancellation.Reason)
	}
	if n != 0 {
		t.Errorf("a TimeoutExpired folded: %v allocations, want 0", n)
	}
}
