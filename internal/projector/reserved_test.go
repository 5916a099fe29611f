package projector

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAnotherProducerCannotSuppressATimeout writes, straight to the topic
// and before the deadline, an event that carries the id the firer will use
// for the session's timeout. It is set aside (forged_system_event: it is
// above the line, and a reserved id there needs the system's MAC) without
// touching the session, and the timeout fires once and applies.
func TestAnotherProducerCannotSuppressATimeout(t *testing.T) {
	e := newTimeoutEnv(t)
	const sessions = 8
	r, at := e.idleSessions("sup-%d", sessions)
	defer r.halt()
	e.forgeTimeouts("sup-%d", sessions, at, false)
	e.waitCaughtUp(e.prefix, 30*time.Second)
	e.clock.Advance(10 * time.Second) // past every deadline, long before the cancellation timeout
	cancelling := func() bool {
		for i := range sessions {
			if s := e.get(fmt.Sprintf("sup-%d", i)); s == nil || s.State != fsm.StateCancelling {
				return false
			}
		}
		return true
	}
	if !testwait.Eventually(15*time.Second, cancelling) {
		fired := e.firedRecords()
		for i := range sessions {
			sid := fmt.Sprintf("sup-%d", i)
			s := e.get(sid)
			t.Errorf("%s: %s, %d duplicates, %d TimeoutExpired produced; want CANCELLING by its inactivity timeout",
				sid, s.State, s.Counters.Duplicates, fired[sid])
		}
		t.FailNow()
	}
	e.waitCaughtUp(e.prefix, 30*time.Second)
	fired := e.firedRecords()
	for i := range sessions {
		sid := fmt.Sprintf("sup-%d", i)
		s := e.get(sid)
		if s.Cancellation.Timeout != fsm.TimeoutInactivity || s.Counters.Rejected != 0 || s.Counters.Duplicates != 0 || fired[sid] != 1 {
			t.Errorf("%s: cancelled by %q, %d rejected, %d duplicates, %d TimeoutExpired; want inactivity, 0, 0, 1",
				sid, s.Cancellation.Timeout, s.Counters.Rejected, s.Counters.Duplicates, fired[sid])
		}
	}
	dlq := e.dlqRecords(sessions)
	if len(dlq) != sessions {
		t.Fatalf("%d dead letters, want %d", len(dlq), sessions)
	}
	for _, rec := range dlq {
		if reason, _ := header(rec, kafka.HeaderDLQReason); reason != ReasonForgedSystemEvent {
			t.Errorf("dead letter %s: reason %q, want %q", rec.Key, reason, ReasonForgedSystemEvent)
		}
	}
}

// TestAForgedSystemTimeoutIsNotFolded writes straight to the topic, with
// franz-go and before the deadline, the TimeoutExpired the firer would
// write for each ACTIVE session (its reserved id, the deadline's version,
// the system's origin header) but without the system's MAC. It is set
// aside as forged_system_event and the session stays ACTIVE; the real
// timeout then fires, verifies and folds (CANCELLING, by inactivity).
func TestAForgedSystemTimeoutIsNotFolded(t *testing.T) {
	e := newTimeoutEnv(t)
	const sessions = 6
	at := clockStart.Add(-time.Second)
	var events []fsm.Event
	for i := range sessions {
		sid := fmt.Sprintf("forged-%d", i)
		events = append(events, e.event(sid, fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 5*time.Second)),
			e.event(sid, fsm.SessionStarted, at, fsm.Fields{}))
	}
	e.produce(events)
	r := e.start(nil)
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	cl := e.client()
	for i := range sessions {
		sid := fmt.Sprintf("forged-%d", i)
		s := e.get(sid)
		if s == nil || s.State != fsm.StateActive {
			t.Fatalf("%s: %v before the forgery, want ACTIVE", sid, s)
		}
		d := projstore.ArmedDeadline{SessionID: sid, Kind: fsm.TimeoutInactivity, At: at.Add(5 * time.Second).UnixNano(), Version: s.Version}
		forged := timeoutRecord(topic, d) // the firer's record, with the origin header, unsigned
		if !kafka.FromSystem(forged) {
			t.Fatal("the forged record lacks the system's origin header")
		}
		if err := cl.ProduceSync(ctx, forged).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	dlq := e.dlqRecords(sessions)
	for _, rec := range dlq {
		if reason, _ := header(rec, kafka.HeaderDLQReason); reason != ReasonForgedSystemEvent {
			t.Errorf("dead letter %s: reason %q, want %q", rec.Key, reason, ReasonForgedSystemEvent)
		}
	}
	e.waitCaughtUp(e.prefix, 30*time.Second)
	for i := range sessions {
		sid := fmt.Sprintf("forged-%d", i)
		if s := e.get(sid); s.State != fsm.StateActive || s.Counters.Duplicates != 0 {
			t.Errorf("%s: %s, %d duplicates after the forged timeout; want ACTIVE, 0", sid, s.State, s.Counters.Duplicates)
		}
	}
	e.clock.Advance(10 * time.Second) // past every deadline: the real timeouts fire, signed
	testwait.Until(t, "the real timeouts folded", 30*time.Second, func() bool {
		for i := range sessions {
			if s := e.get(fmt.Sprintf("forged-%d", i)); s == nil || s.State != fsm.StateCancelling {
				return false
			}
		}
		return true
	})
	for i := range sessions {
		sid := fmt.Sprintf("forged-%d", i)
		if s := e.get(sid); s.Cancellation.Timeout != fsm.TimeoutInactivity {
			t.Errorf("%s: cancelled by %q, want inactivity", sid, s.Cancellation.Timeout)
		}
	}
}

// TestTheSystemsRecordsCarryReservedIDs: the firer's TimeoutExpired, a
// replacement reaction and a cascaded cancellation each carry an id in the
// reserved space and the system's header, so they decode as the system's
// (kafka.DecodeEvent); the same record without the header does not.
func TestTheSystemsRecordsCarryReservedIDs(t *testing.T) {
	at := clockStart
	trigger := fsm.EventID{0x01, 0x90, 6: 0x70, 8: 0x80, 15: 1}
	react := reaction{kind: fsm.ReplacementLinked, target: "succ", fields: fsm.Fields{PredecessorDigest: [32]byte{1}}}
	reacted := react.record(topic, &change{id: trigger, at: at, session: "pred"})
	recs := map[string]*kgo.Record{
		"timeout":  timeoutRecord(topic, projstore.ArmedDeadline{SessionID: "s", Kind: fsm.TimeoutApproval, At: at.UnixNano(), Version: 4}),
		"reaction": &reacted,
		"cascade":  cancelRecord(topic, "child", "parent", trigger, at, fsm.CancelGraceful, ReasonParentCancelled, nil),
	}
	for name, r := range recs {
		var e fsm.Event
		if err := kafka.DecodeEvent(r, &e); err != nil || !e.ID.Reserved() {
			t.Errorf("%s: %v, id %s reserved %v; want a reserved id that decodes", name, err, e.ID, e.ID.Reserved())
		}
		bare := *r
		bare.Headers = nil
		if err := kafka.DecodeEvent(&bare, &e); !errors.Is(err, fsm.ErrReservedEventID) {
			t.Errorf("%s without its headers: %v, want %v", name, err, fsm.ErrReservedEventID)
		}
		if got, want := classify(kafka.DecodeEvent(&bare, &e)), ReasonReservedEventID; got != want {
			t.Errorf("%s without its headers: dead-letter reason %q, want %q", name, got, want)
		}
	}
	if TimeoutEventID("s", fsm.TimeoutApproval, 4) == TimeoutEventID("s", fsm.TimeoutApproval, 5) ||
		derivedID(fsm.CancellationRequested, "child", trigger) == derivedID(fsm.SessionReplaced, "child", trigger) {
		t.Error("derived ids of different inputs are equal")
	}
}
