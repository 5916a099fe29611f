package projector

import (
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// familyEvents returns a parent with a child and a grandchild, then the
// parent's cancellation, which reaches both.
func familyEvents() []fsm.Event {
	at := time.Date(2026, 11, 29, 6, 30, 0, 0, time.UTC)
	n := byte(0)
	ev := func(id string, typ fsm.EventType, f fsm.Fields) fsm.Event {
		n++
		at = at.Add(time.Second)
		return fsm.NewEvent(fsm.EventID{0xfa, n, 1}, id, typ, at, f)
	}
	return []fsm.Event{
		ev("f-root", fsm.SessionCreated, fsm.Fields{}), ev("f-root", fsm.SessionStarted, fsm.Fields{}),
		ev("f-kid", fsm.SessionCreated, fsm.Fields{ParentSessionID: "f-root"}), ev("f-kid", fsm.SessionStarted, fsm.Fields{}),
		ev("f-grandkid", fsm.SessionCreated, fsm.Fields{ParentSessionID: "f-kid"}),
		ev("f-root", fsm.CancellationRequested, fsm.Fields{Reason: "stop"}),
	}
}

// TestCascadingCancellation: a parent entering CANCELLING cancels its
// non-terminal children with its mode, and their children in turn; a
// child created with parentClosePolicy abandon and a terminal child are
// left alone; a child created after its parent ended (CANCELLING, or
// FAILED) is cancelled by its own creation. Sessions spread over four
// partitions.
func TestCascadingCancellation(t *testing.T) {
	e := newEnv(t, 4)
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	n := 0
	ev := func(id string, typ fsm.EventType, f fsm.Fields) fsm.Event {
		n++
		at = at.Add(time.Second)
		return fsm.NewEvent(fsm.EventID{0xca, byte(n >> 8), byte(n), 1}, id, typ, at, f)
	}
	child := func(id, parent string) []fsm.Event {
		return []fsm.Event{ev(id, fsm.SessionCreated, fsm.Fields{ParentSessionID: parent}), ev(id, fsm.SessionStarted, fsm.Fields{})}
	}
	var events []fsm.Event
	events = append(events, ev("root", fsm.SessionCreated, fsm.Fields{}), ev("root", fsm.SessionStarted, fsm.Fields{}))
	events = append(events, child("c1", "root")...)
	events = append(events, child("c3", "root")...)
	events = append(events, ev("c3", fsm.SessionCompleted, fsm.Fields{}))
	events = append(events, ev("c2", fsm.SessionCreated, fsm.Fields{ParentSessionID: "root", ParentClosePolicy: fsm.ParentCloseAbandon}),
		ev("c2", fsm.SessionStarted, fsm.Fields{}))
	events = append(events, child("g1", "c1")...)
	events = append(events, ev("fp", fsm.SessionCreated, fsm.Fields{}), ev("fp", fsm.SessionStarted, fsm.Fields{}),
		ev("fp", fsm.SessionFailed, fsm.Fields{Reason: "boom"}))
	e.produce(events)
	st := e.store("cascade")
	r := e.start(e.config("a"), "cascade", nil)
	e.waitSettled("cascade")
	e.produce([]fsm.Event{ev("root", fsm.CancellationRequested, fsm.Fields{Reason: "stop", Mode: fsm.CancelForced})})
	e.waitSettled("cascade")
	// Created after their parents ended.
	e.produce(append(child("late", "root"), child("fc", "fp")...))
	e.waitSettled("cascade")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	get := func(id string) *snapshot.Snapshot {
		s, err := st.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return s
	}
	for _, tt := range []struct {
		id     string
		state  fsm.State
		mode   fsm.CancelMode
		parent string
	}{
		{"c1", fsm.StateCancelling, fsm.CancelForced, "root"},
		{"g1", fsm.StateCancelling, fsm.CancelForced, "c1"},
		{"late", fsm.StateCancelling, fsm.CancelForced, "root"},
		{"fc", fsm.StateCancelling, fsm.CancelGraceful, "fp"},
		{"c2", fsm.StateActive, 0, ""},
		{"c3", fsm.StateCompleted, 0, ""},
	} {
		s := get(tt.id)
		if s.State != tt.state {
			t.Errorf("%s: %v, want %v", tt.id, s.State, tt.state)
			continue
		}
		if tt.parent == "" {
			if s.Cancellation.Requested || s.Counters.Rejected != 0 {
				t.Errorf("%s: cancellation %+v, %d rejected", tt.id, s.Cancellation, s.Counters.Rejected)
			}
			continue
		}
		if s.Cancellation.Reason != ReasonParentCancelled || s.Cancellation.Mode != tt.mode {
			t.Errorf("%s: cancellation %+v, want %s %v", tt.id, s.Cancellation, ReasonParentCancelled, tt.mode)
		}
	}
	// Each cancellation names its parent, and every record stays on its
	// key's partition (nothing was set aside).
	for _, rec := range e.readAll(topic) {
		var ev fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &ev); err != nil {
			t.Fatalf("%d:%d: %v", rec.Partition, rec.Offset, err)
		}
		if ev.Type == fsm.CancellationRequested && ev.Fields.Reason == ReasonParentCancelled {
			if want := map[string]string{"c1": "root", "g1": "c1", "late": "root", "fc": "fp"}[ev.SessionID]; want == "" ||
				!strings.Contains(string(ev.Payload), `"parentSessionId":"`+want+`"`) {
				t.Errorf("cancellation of %s: payload %s", ev.SessionID, ev.Payload)
			}
		}
	}
	for _, rec := range e.readAll(kafka.DLQTopic(topic)) {
		t.Errorf("dead letter %s: %s", rec.Key, rec.Headers)
	}
}
