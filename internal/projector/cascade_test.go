package projector

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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
// FAILED) is cancelled by its own creation, parent_closed. Sessions spread over four
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
		// Forced, with the default grace of 0s: the firer ends them at once.
		{"c1", fsm.StateCancelled, fsm.CancelForced, "root"},
		{"g1", fsm.StateCancelled, fsm.CancelForced, "c1"},
		// Created after their parents closed: parent_closed (docs/lifecycle.md).
		{"late", fsm.StateCancelled, fsm.CancelForced, "root"},
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
		reason := ReasonParentCancelled
		if tt.id == "late" || tt.id == "fc" {
			reason = ReasonParentClosed
		}
		if s.Cancellation.Reason != reason || s.Cancellation.Mode != tt.mode {
			t.Errorf("%s: cancellation %+v, want %s %v", tt.id, s.Cancellation, reason, tt.mode)
		}
	}
	// Each cancellation names its parent, and every record stays on its
	// key's partition (nothing was set aside).
	for _, rec := range e.readAll(topic) {
		var ev fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &ev); err != nil {
			t.Fatalf("%d:%d: %v", rec.Partition, rec.Offset, err)
		}
		if ev.Type == fsm.CancellationRequested && (ev.Fields.Reason == ReasonParentCancelled || ev.Fields.Reason == ReasonParentClosed) {
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

// eventsOf returns a maker of events with ids unique under tag (up to
// 2^24 of them), a second apart.
func eventsOf(tag byte) func(id string, typ fsm.EventType, f fsm.Fields) fsm.Event {
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	n := 0
	return func(id string, typ fsm.EventType, f fsm.Fields) fsm.Event {
		n++
		at = at.Add(time.Second)
		return fsm.NewEvent(fsm.EventID{tag, byte(n >> 16), byte(n >> 8), byte(n), 1}, id, typ, at, f)
	}
}

// cascadeConfig is the test configuration with polls and batches large
// enough for thousands of children.
func (e *env) cascadeConfig(instance string) Config {
	cfg := e.config(instance)
	cfg.MaxPollRecords, cfg.FlushSize, cfg.CacheSize = 2000, 5000, 40000
	return cfg
}

// indexed returns the children in parent's index under prefix.
func (e *env) indexed(prefix, parent string) map[string]bool {
	e.t.Helper()
	out := map[string]bool{}
	cursor := ""
	for {
		kids, next, err := e.store(prefix).ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: parent, Cursor: cursor}}, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range kids[0] {
			out[k] = true
		}
		if next[0] == "" {
			return out
		}
		cursor = next[0]
	}
}

// cancelledByParent fails the test unless every session of ids is
// CANCELLING by its parent's cancellation, once: no rejection, and every
// parent_cancelled CancellationRequested of it in the log has one id.
func (e *env) cancelledByParent(prefix string, ids []string) {
	e.t.Helper()
	e.closedByParent(prefix, ids, ReasonParentCancelled)
}

// closedByParent fails the test unless every session of ids is CANCELLING
// by its parent's close, with reason, once: no rejection, and every
// CancellationRequested of it with that reason in the log has one id.
// It returns how many such records the log holds per session.
func (e *env) closedByParent(prefix string, ids []string, reason string) map[string]int {
	e.t.Helper()
	snaps, err := e.store(prefix).GetMany(ctx, ids)
	if err != nil {
		e.t.Fatal(err)
	}
	missed := 0
	for i, s := range snaps {
		switch {
		case s == nil:
			e.t.Errorf("%s: no snapshot", ids[i])
		case s.State != fsm.StateCancelling || s.Cancellation.Reason != reason:
			if missed++; missed <= 5 {
				e.t.Errorf("%s: %v, cancellation %+v; want CANCELLING for %s", ids[i], s.State, s.Cancellation, reason)
			}
		case s.Counters.Rejected != 0:
			e.t.Errorf("%s: %d rejected", ids[i], s.Counters.Rejected)
		}
	}
	if missed > 0 {
		e.t.Errorf("%d of %d children not cancelled by their parent", missed, len(ids))
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	first := map[string]fsm.EventID{}
	records := map[string]int{}
	for _, rec := range e.readAll(topic) {
		var ev fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &ev); err != nil {
			e.t.Fatalf("%d:%d: %v", rec.Partition, rec.Offset, err)
		}
		if !want[ev.SessionID] || ev.Type != fsm.CancellationRequested || ev.Fields.Reason != reason {
			continue
		}
		if id, ok := first[ev.SessionID]; ok && id != ev.ID {
			e.t.Errorf("%s: two cancellations by its parent, %v and %v", ev.SessionID, id, ev.ID)
		}
		first[ev.SessionID] = ev.ID
		records[ev.SessionID]++
	}
	return records
}

// TestCompletedParentCancelsChildren (no orphans): a parent that
// completes cancels its live cancel-policy children with reason
// parent_completed, their children follow with parent_cancelled (from
// their parent's CANCELLING), an abandoned child and an ended one are left
// alone, and a child created after its parent completed is cancelled by
// its creation, parent_closed, with the id its parent's close would have
// given it.
func TestCompletedParentCancelsChildren(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xd0)
	started := func(id, parent string, policy fsm.ParentClosePolicy) []fsm.Event {
		return []fsm.Event{ev(id, fsm.SessionCreated, fsm.Fields{ParentSessionID: parent, ParentClosePolicy: policy}),
			ev(id, fsm.SessionStarted, fsm.Fields{})}
	}
	var events []fsm.Event
	events = append(events, started("cp", "", 0)...)
	events = append(events, started("ca", "cp", 0)...)
	events = append(events, ev("cb", fsm.SessionCreated, fsm.Fields{ParentSessionID: "cp"}))
	events = append(events, started("cg", "ca", 0)...)
	events = append(events, started("cx", "cp", fsm.ParentCloseAbandon)...)
	events = append(events, started("cd", "cp", 0)...)
	events = append(events, ev("cd", fsm.SessionCompleted, fsm.Fields{}))
	e.produce(events)
	r := e.start(e.config("a"), "completed", nil)
	e.waitSettled("completed")
	done := ev("cp", fsm.SessionCompleted, fsm.Fields{})
	e.produce([]fsm.Event{done})
	e.waitSettled("completed")
	e.produce([]fsm.Event{ev("cl", fsm.SessionCreated, fsm.Fields{ParentSessionID: "cp"})})
	e.waitSettled("completed")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.closedByParent("completed", []string{"ca", "cb"}, ReasonParentCompleted)
	e.closedByParent("completed", []string{"cl"}, ReasonParentClosed) // created after cp completed (docs/lifecycle.md)
	e.closedByParent("completed", []string{"cg"}, ReasonParentCancelled)
	st := e.store("completed")
	for id, want := range map[string]fsm.State{"cp": fsm.StateCompleted, "cx": fsm.StateActive, "cd": fsm.StateCompleted} {
		s, err := st.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if s.State != want || s.Counters.Rejected != 0 || s.Cancellation.Requested {
			t.Errorf("%s: %v, %d rejected, cancellation %+v; want %v, none rejected, not cancelled", id, s.State, s.Counters.Rejected,
				s.Cancellation, want)
		}
	}
	for _, rec := range e.readAll(topic) {
		var got fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &got); err != nil {
			t.Fatal(err)
		}
		if got.Type != fsm.CancellationRequested {
			continue
		}
		if want := derivedID(fsm.CancellationRequested, got.SessionID, done.ID); (got.SessionID == "cl" || got.SessionID == "ca") && got.ID != want {
			t.Errorf("%s's cancellation has id %v, want %v (from its parent's SessionCompleted)", got.SessionID, got.ID, want)
		}
		if got.Fields.Mode != fsm.CancelGraceful || (got.SessionID != "cg" && !strings.Contains(string(got.Payload), `"parentSessionId":"cp"`)) {
			t.Errorf("cancellation of %s: payload %s, want graceful, naming its parent", got.SessionID, got.Payload)
		}
	}
}

// TestCascadeReachesLiveChildrenPastEndedOnes: a parent with 15,000 ended
// children and 100 live ones cancels every live one, and the ended ones
// have left its children index.
func TestCascadeReachesLiveChildrenPastEndedOnes(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xcb)
	events := []fsm.Event{ev("big", fsm.SessionCreated, fsm.Fields{}), ev("big", fsm.SessionStarted, fsm.Fields{})}
	for i := range 15000 {
		id := fmt.Sprintf("dead-%05d", i)
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{ParentSessionID: "big"}),
			ev(id, fsm.SessionFailed, fsm.Fields{Reason: "boom"}))
	}
	var live []string
	for i := range 100 {
		live = append(live, fmt.Sprintf("live-%03d", i))
		events = append(events, ev(live[i], fsm.SessionCreated, fsm.Fields{ParentSessionID: "big"}))
	}
	e.produce(events)
	r := e.start(e.cascadeConfig("a"), "many", nil)
	e.waitSettled("many")
	e.produce([]fsm.Event{ev("big", fsm.CancellationRequested, fsm.Fields{Reason: "stop"})})
	e.waitSettled("many")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.cancelledByParent("many", live)
	idx := e.indexed("many", "big")
	for _, id := range live {
		if !idx[id] {
			t.Errorf("%s (CANCELLING) left the index", id)
		}
	}
	if len(idx) != len(live) {
		t.Errorf("the index holds %d children, want the %d live ones", len(idx), len(live))
	}
}

// TestCascadePages: ten parents with 600 children each, cancelled in one
// batch, have their children's snapshots read at most cascadePage at a
// time, and every child is reached.
func TestCascadePages(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xcc)
	var events, cancels []fsm.Event
	var kids []string
	for p := range 10 {
		parent := fmt.Sprintf("pp-%d", p)
		events = append(events, ev(parent, fsm.SessionCreated, fsm.Fields{}), ev(parent, fsm.SessionStarted, fsm.Fields{}))
		for i := range 600 {
			kid := fmt.Sprintf("pk-%d-%03d", p, i)
			kids = append(kids, kid)
			events = append(events, ev(kid, fsm.SessionCreated, fsm.Fields{ParentSessionID: parent}))
		}
		cancels = append(cancels, ev(parent, fsm.CancellationRequested, fsm.Fields{Reason: "stop"}))
	}
	e.produce(events)
	var mu sync.Mutex
	reads, most, total := 0, 0, 0
	r := e.startWith(e.cascadeConfig("a"), "pages", func(p *Projector) {
		p.st.derived.pageRead = func(n int) {
			mu.Lock()
			defer mu.Unlock()
			reads, most, total = reads+1, max(most, n), total+n
		}
	})
	e.waitSettled("pages")
	e.produce(cancels)
	e.waitSettled("pages")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > cascadePage || total < len(kids) {
		t.Fatalf("%d reads of children's snapshots, the largest %d, %d in all; want at most %d at a time, %d in all",
			reads, most, total, cascadePage, len(kids))
	}
	t.Logf("%d reads of children's snapshots, the largest %d, %d in all", reads, most, total)
	e.cancelledByParent("pages", kids)
}

// TestCascadeRejectsNothing: a parent's end sends nothing to a child that
// is already CANCELLING (its own cancellation) or ended, and its close
// after CANCELLING (CANCELLED, or FAILED) sends nothing again: no child
// records a rejection. A child created after its parent closed is
// cancelled with the id its parent's CANCELLING would have given it, so
// that the two ways of reaching it agree. Ended children leave the index.
func TestCascadeRejectsNothing(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xcd)
	started := func(id, parent string) []fsm.Event {
		return []fsm.Event{ev(id, fsm.SessionCreated, fsm.Fields{ParentSessionID: parent}), ev(id, fsm.SessionStarted, fsm.Fields{})}
	}
	var events []fsm.Event
	for _, p := range []string{"rp", "rq"} {
		events = append(events, started(p, "")...)
	}
	events = append(events, started("ra", "rp")...)
	events = append(events, started("rb", "rp")...)
	events = append(events, ev("rb", fsm.CancellationRequested, fsm.Fields{Reason: "own"}))
	events = append(events, started("rc", "rp")...)
	events = append(events, ev("rc", fsm.SessionCompleted, fsm.Fields{}))
	events = append(events, ev("rd", fsm.SessionCreated, fsm.Fields{ParentSessionID: "rp"}))
	events = append(events, started("qa", "rq")...)
	events = append(events, started("qb", "rq")...)
	events = append(events, ev("qb", fsm.CancellationRequested, fsm.Fields{Reason: "own"}))
	e.produce(events)
	r := e.start(e.config("a"), "reject", nil)
	e.waitSettled("reject")
	rpCancel := ev("rp", fsm.CancellationRequested, fsm.Fields{Reason: "stop"})
	e.produce([]fsm.Event{rpCancel, ev("rq", fsm.CancellationRequested, fsm.Fields{Reason: "stop"})})
	e.waitSettled("reject")
	e.produce([]fsm.Event{ev("rp", fsm.SessionCancelled, fsm.Fields{}), ev("rq", fsm.SessionFailed, fsm.Fields{Reason: "boom"})})
	e.waitSettled("reject")
	e.produce([]fsm.Event{ev("rl", fsm.SessionCreated, fsm.Fields{ParentSessionID: "rp"})})
	e.waitSettled("reject")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.cancelledByParent("reject", []string{"ra", "rd", "qa"})
	e.closedByParent("reject", []string{"rl"}, ReasonParentClosed) // created after rp ended
	st := e.store("reject")
	for id, want := range map[string]fsm.State{"rb": fsm.StateCancelling, "qb": fsm.StateCancelling, "rc": fsm.StateCompleted,
		"rp": fsm.StateCancelled, "rq": fsm.StateFailed} {
		s, err := st.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if s.State != want || s.Counters.Rejected != 0 || s.Cancellation.Reason == ReasonParentCancelled {
			t.Errorf("%s: %v, %d rejected, cancellation %+v; want %v, none rejected, not cancelled by its parent",
				id, s.State, s.Counters.Rejected, s.Cancellation, want)
		}
	}
	for _, rec := range e.readAll(topic) {
		var got fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &got); err != nil {
			t.Fatal(err)
		}
		if got.SessionID == "rl" && got.Type == fsm.CancellationRequested {
			if want := derivedID(fsm.CancellationRequested, "rl", rpCancel.ID); got.ID != want {
				t.Errorf("rl's cancellation has id %v, want %v (from its parent's CancellationRequested)", got.ID, want)
			}
		}
	}
	if got, want := fmt.Sprint(e.indexed("reject", "rp")), fmt.Sprint(map[string]bool{"ra": true, "rb": true, "rd": true, "rl": true}); got != want {
		t.Errorf("rp's children index: %s, want %s (rc ended)", got, want)
	}
}

// TestCascadeAcrossCrashes: projectors killed in the middle of a cascade
// (after its first, then its second page of children) and restarted
// still reach every child, each in effect once.
func TestCascadeAcrossCrashes(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xce)
	events := []fsm.Event{ev("cp", fsm.SessionCreated, fsm.Fields{}), ev("cp", fsm.SessionStarted, fsm.Fields{})}
	var kids []string
	for i := range 1000 {
		kids = append(kids, fmt.Sprintf("ck-%04d", i))
		events = append(events, ev(kids[i], fsm.SessionCreated, fsm.Fields{ParentSessionID: "cp"}), ev(kids[i], fsm.SessionStarted, fsm.Fields{}))
	}
	e.produce(events)
	r := e.start(e.cascadeConfig("a"), "crashes", nil)
	e.waitSettled("crashes")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.produce([]fsm.Event{ev("cp", fsm.CancellationRequested, fsm.Fields{Reason: "stop"})})
	for _, n := range []int64{1, 2} {
		r := e.start(e.cascadeConfig("a"), "crashes", crashAt(crashCascadePage, n))
		select {
		case err := <-r.done:
			if !errors.Is(err, errCrashed) {
				t.Fatalf("crash at page %d: Run returned %v", n, err)
			}
		case <-time.After(30 * time.Second):
			_ = r.halt()
			t.Fatalf("crash point cascade-page #%d not reached", n)
		}
	}
	r = e.start(e.cascadeConfig("a"), "crashes", nil)
	e.waitSettled("crashes")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.cancelledByParent("crashes", kids)
}

// The cascade's CancellationRequested record keeps its bytes: the
// payload's members in this order, so the event's canonical bytes, and the
// digest of every child it reaches, stay what they were.
func TestCancelRecordBytes(t *testing.T) {
	trigger, _ := fsm.ParseEventID([]byte("0190f2a4-5b6c-7d8e-9f00-000000000001"))
	at := time.Date(2026, 11, 29, 6, 0, 0, 250000000, time.FixedZone("CET", 3600))
	for _, mode := range []fsm.CancelMode{fsm.CancelGraceful, fsm.CancelForced} {
		rec := cancelRecord("events", "acme:child-1", "acme:parent.2", trigger, at, mode, ReasonParentCancelled, nil)
		id := derivedID(fsm.CancellationRequested, "acme:child-1", trigger)
		want := `{"v":1,"eventId":"` + id.String() + `","sessionId":"acme:child-1","type":"CancellationRequested",` +
			`"occurredAt":"2026-11-29T05:00:00.25Z","correlationId":"acme:child-1",` +
			`"payload":{"mode":"` + mode.String() + `","reason":"parent_cancelled","parentSessionId":"acme:parent.2"}}`
		if string(rec.Value) != want {
			t.Errorf("cancel record\n got %s\nwant %s", rec.Value, want)
		}
	}
}

// bigFamily is the number of children of the parent of the large cascade
// tests.
const bigFamily = 25000

// bigFamilyEvents returns a started parent and bigFamily children, created
// and left in CREATED, with the ids of the children.
func bigFamilyEvents(ev func(string, fsm.EventType, fsm.Fields) fsm.Event, parent string) ([]fsm.Event, []string) {
	events := make([]fsm.Event, 0, bigFamily+2)
	events = append(events, ev(parent, fsm.SessionCreated, fsm.Fields{}), ev(parent, fsm.SessionStarted, fsm.Fields{}))
	kids := make([]string, bigFamily)
	for i := range kids {
		kids[i] = fmt.Sprintf("%s-%05d", parent, i)
		events = append(events, ev(kids[i], fsm.SessionCreated, fsm.Fields{ParentSessionID: parent}))
	}
	return events, kids
}

// appliedOnce fails the test unless each of ids applied two events (its
// creation and one cancellation), and returns how many duplicates they
// folded in all.
func (e *env) appliedOnce(prefix string, ids []string) uint64 {
	e.t.Helper()
	snaps, err := e.store(prefix).GetMany(ctx, ids)
	if err != nil {
		e.t.Fatal(err)
	}
	var dups uint64
	bad := 0
	for i, s := range snaps {
		if s == nil {
			continue // closedByParent reports it
		}
		if s.Version != 2 {
			if bad++; bad <= 5 {
				e.t.Errorf("%s: version %d, want 2 (created, cancelled once)", ids[i], s.Version)
			}
		}
		dups += s.Counters.Duplicates
	}
	return dups
}

// TestCompletedParentReachesEveryChild: a parent that completes with
// 25,000 live children cancels every one of them, parent_completed, each
// once, in pages, and correx.session.cancellations.propagated counts them
// all.
func TestCompletedParentReachesEveryChild(t *testing.T) {
	t.Parallel() // its own broker and redis-server
	e := newEnv(t, 4)
	ev := eventsOf(0xd1)
	events, kids := bigFamilyEvents(ev, "bp")
	start := time.Now()
	e.produce(events)
	tel, _, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	r := e.startWith(e.cascadeConfig("a"), "big", func(p *Projector) { p.obs = obs })
	e.waitSettled("big")
	created := time.Now()
	e.produce([]fsm.Event{ev("bp", fsm.SessionCompleted, fsm.Fields{})})
	e.waitSettled("big")
	cascaded := time.Now()
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	records := e.closedByParent("big", kids, ReasonParentCompleted)
	for _, k := range kids {
		if records[k] != 1 {
			t.Errorf("%s: %d cancellations in the log, want 1", k, records[k])
			break
		}
	}
	if dups := e.appliedOnce("big", kids); dups != 0 {
		t.Errorf("the children folded %d duplicates, want none without a crash", dups)
	}
	obs.Drain()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if got := counters(&rm, "correx.session.cancellations.propagated", "correx.reason"); got[ReasonParentCompleted] != bigFamily ||
		got[ReasonParentCancelled] != 0 {
		t.Errorf("correx.session.cancellations.propagated: %v, want %d %s", got, bigFamily, ReasonParentCompleted)
	}
	if got := histograms(&rm, "correx.session.cancellation.propagation", "correx.reason"); got[ReasonParentCompleted][0] != bigFamily {
		t.Errorf("correx.session.cancellation.propagation: %v, want %d measurements", got, bigFamily)
	}
	t.Logf("%d children: created and folded in %v, the cascade folded in %v, checked in %v",
		bigFamily, created.Sub(start).Round(time.Millisecond), cascaded.Sub(created).Round(time.Millisecond),
		time.Since(cascaded).Round(time.Millisecond))
}

// TestCompletedParentCascadeAcrossACrash: a projector killed in the
// middle of the cascade of a parent with 25,000 children (after 40 of
// its pages of 256) and restarted still reaches every child, with one
// event each: a child whose cancellation was sent before the crash gets
// the same event again at most, which its fold counts as a duplicate.
func TestCompletedParentCascadeAcrossACrash(t *testing.T) {
	t.Parallel() // its own broker and redis-server
	e := newEnv(t, 4)
	ev := eventsOf(0xd2)
	events, kids := bigFamilyEvents(ev, "kp")
	start := time.Now()
	e.produce(events)
	r := e.start(e.cascadeConfig("a"), "bigcrash", nil)
	e.waitSettled("bigcrash")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	e.produce([]fsm.Event{ev("kp", fsm.SessionCompleted, fsm.Fields{})})
	const crashPage = 40
	r = e.start(e.cascadeConfig("a"), "bigcrash", crashAt(crashCascadePage, crashPage))
	select {
	case err := <-r.done:
		if !errors.Is(err, errCrashed) {
			t.Fatalf("crash at page %d: Run returned %v", crashPage, err)
		}
	case <-time.After(60 * time.Second):
		_ = r.halt()
		t.Fatalf("crash point cascade-page #%d not reached", crashPage)
	}
	crashed := time.Now()
	r = e.start(e.cascadeConfig("a"), "bigcrash", nil)
	e.waitSettled("bigcrash")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	records := e.closedByParent("bigcrash", kids, ReasonParentCompleted)
	total, twice := 0, 0
	for _, k := range kids {
		total += records[k]
		if records[k] > 1 {
			twice++
		}
		if records[k] > 2 {
			t.Errorf("%s: %d cancellations in the log, want at most 2 (one resent after the crash)", k, records[k])
		}
	}
	// Only the children reached before the crash can have theirs twice.
	if twice > crashPage*cascadePage {
		t.Errorf("%d children have their cancellation twice in the log, more than the %d reached before the crash", twice, crashPage*cascadePage)
	}
	dups := e.appliedOnce("bigcrash", kids)
	if dups != uint64(total-len(kids)) {
		t.Errorf("the children folded %d duplicates, want %d (the records sent again)", dups, total-len(kids))
	}
	t.Logf("%d children: created in %v, crashed after %v, resumed and finished in %v, checked in %v; %d records resent, %d duplicates folded",
		bigFamily, created.Sub(start).Round(time.Millisecond), crashed.Sub(created).Round(time.Millisecond),
		resumed.Sub(crashed).Round(time.Millisecond), time.Since(resumed).Round(time.Millisecond), total-len(kids), dups)
}
