package projector

import (
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// replacementEvents returns the events of sessions whose successors are
// linked or refused:
//
//	p-failed   FAILED                 s-ok names it (linked), then s-second (refused: already replaced)
//	p-active   ACTIVE                 s-notfailed names it (refused: not FAILED)
//	(none)                            s-orphan names p-unknown (refused: unknown_predecessor)
func replacementEvents() []fsm.Event {
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	n := byte(0)
	ev := func(id string, t fsm.EventType, f fsm.Fields) fsm.Event {
		n++
		at = at.Add(time.Second)
		return fsm.NewEvent(fsm.EventID{0x5e, n, 1}, id, t, at, f)
	}
	return []fsm.Event{
		ev("p-failed", fsm.SessionCreated, fsm.Fields{Goal: "first try"}),
		ev("p-failed", fsm.SessionStarted, fsm.Fields{}),
		ev("p-failed", fsm.SessionFailed, fsm.Fields{Reason: "boom", Category: "infrastructure"}),
		ev("p-active", fsm.SessionCreated, fsm.Fields{}),
		ev("p-active", fsm.SessionStarted, fsm.Fields{}),
		ev("s-ok", fsm.SessionCreated, fsm.Fields{PredecessorSessionID: "p-failed"}),
		ev("s-notfailed", fsm.SessionCreated, fsm.Fields{PredecessorSessionID: "p-active"}),
		ev("s-orphan", fsm.SessionCreated, fsm.Fields{PredecessorSessionID: "p-unknown"}),
	}
}

// TestReplacementLinking: a successor of a FAILED session is linked and
// shows the predecessor's digest, which shows the successor; successors of
// a session that is not FAILED, that is already replaced, or that does not
// exist are refused with the reason; none of it is a dead letter.
func TestReplacementLinking(t *testing.T) {
	e := newEnv(t, 4)
	e.produce(replacementEvents())
	st := e.store("repl")
	r := e.start(e.config("a"), "repl", nil)
	get := func(id string) *snapshot.Snapshot {
		s, err := st.Get(ctx, id)
		if err != nil {
			return nil
		}
		return s
	}
	testwait.Until(t, "s-ok linked", 30*time.Second, func() bool { s := get("s-ok"); return s != nil && s.Replacement.Status == fsm.ReplacementStatusLinked })
	// s-second names p-failed once s-ok is its successor.
	at := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	e.produce([]fsm.Event{fsm.NewEvent(fsm.EventID{0x5e, 0xff, 1}, "s-second", fsm.SessionCreated, at, fsm.Fields{PredecessorSessionID: "p-failed"})})
	want := map[string]string{"s-notfailed": fsm.RefusalNotFailed, "s-second": fsm.RefusalAlreadyReplaced, "s-orphan": ReasonUnknownPredecessor}
	for id, reason := range want {
		testwait.Until(t, id+" refused", 30*time.Second, func() bool { s := get(id); return s != nil && s.Replacement.Status == fsm.ReplacementStatusRefused })
		if s := get(id); s.Replacement.Reason != reason {
			t.Errorf("%s refused for %q, want %q", id, s.Replacement.Reason, reason)
		}
	}
	e.waitSettled("repl")
	if err := r.halt(); err != nil && !errors.Is(err, errCrashed) {
		t.Fatal(err)
	}
	pred, succ := get("p-failed"), get("s-ok")
	if pred.SuccessorSessionID != "s-ok" || pred.State != fsm.StateFailed {
		t.Errorf("p-failed: successor %q, state %v", pred.SuccessorSessionID, pred.State)
	}
	if succ.Replacement.PredecessorDigest != pred.Digest || pred.Digest == ([32]byte{}) {
		t.Errorf("s-ok shows digest %x, p-failed has %x", succ.Replacement.PredecessorDigest, pred.Digest)
	}
	if s := get("p-active"); s.SuccessorSessionID != "" || s.Counters.Rejected != 1 {
		t.Errorf("p-active: successor %q, %d rejected", s.SuccessorSessionID, s.Counters.Rejected)
	}
	if s := get("p-unknown"); s != nil {
		t.Errorf("p-unknown exists: %+v", s.Session)
	}
	for _, rec := range e.readAll(kafka.DLQTopic(topic)) {
		t.Errorf("dead letter %s: %s", rec.Key, rec.Headers)
	}
	// Every derived event is on its session's partition and decodes.
	n := 0
	for _, rec := range e.readAll(topic) {
		var ev fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &ev); err != nil {
			t.Fatalf("%d:%d: %v", rec.Partition, rec.Offset, err)
		}
		if ev.Type.System() {
			n++
			if ev.OccurredAt.IsZero() || ev.ID[6]>>4 != 8 {
				t.Errorf("derived %s for %s: occurredAt %v, id %s", ev.TypeName(), ev.SessionID, ev.OccurredAt, ev.ID)
			}
		}
	}
	if n != 2*4 { // 4 SessionReplaced (one an orphan), and a Linked or Refused for each
		t.Errorf("%d derived events in the log, want 8", n)
	}
}
