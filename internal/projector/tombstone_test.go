package projector

import (
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestArchivedIDStaysArchived (docs/retention.md, "An archived id stays
// archived"; docs/lifecycle.md for parent_closed): a session archived
// leaves a tombstone; SessionCreated and SessionStarted for its id again
// are rejected duplicate_create and after_terminal (change feed), no
// snapshot reappears, the archive object is not rewritten, a child created
// under it is cancelled at creation (parent_closed); and all of it holds after Redis is
// emptied and the partition restored from the changelog.
func TestArchivedIDStaysArchived(t *testing.T) {
	e := newEnv(t, 1)
	ev := eventsOf(0xb7)
	e.produce([]fsm.Event{ev("tb-1", fsm.SessionCreated, fsm.Fields{Goal: "first"}), ev("tb-1", fsm.SessionStarted, fsm.Fields{}),
		ev("tb-1", fsm.SessionCompleted, fsm.Fields{})})
	url := "file://" + t.TempDir()
	clock := newManualClock(archiveClockStart)
	cfg := e.archiveConfig("a", url)
	cfg.ChangeFeed = true
	r := e.startArchiving(cfg, "tomb", clock, nil)
	e.waitSettled("tomb")
	before := e.storedSessions("tomb", []string{"tb-1"})[0]
	sweepUntil(t, clock, "tb-1 to leave Redis", func() bool { return allGone(e.storedSessions("tomb", []string{"tb-1"})) })
	st := e.store("tomb")
	checkTomb := func(when string) {
		t.Helper()
		ts, err := st.Tombstones(ctx, []string{"tb-1"})
		if err != nil || ts[0] == nil || ts[0].State != fsm.StateCompleted || ts[0].Version != before.Version || ts[0].Ended.IsZero() {
			t.Fatalf("%s: tombstone of tb-1 %+v %v, want COMPLETED at version %d with its end", when, ts[0], err, before.Version)
		}
	}
	checkTomb("after the sweep")

	again := func(tag byte) {
		t.Helper()
		ev := eventsOf(tag)
		e.produce([]fsm.Event{ev("tb-1", fsm.SessionCreated, fsm.Fields{Goal: "second"}), ev("tb-1", fsm.SessionStarted, fsm.Fields{}),
			ev("tb-kid", fsm.SessionCreated, fsm.Fields{ParentSessionID: "tb-1"}), ev("tb-kid", fsm.SessionStarted, fsm.Fields{})})
	}
	again(0xb8)
	e.waitSettled("tomb")
	testwait.Until(t, "the child of the archived parent to be cancelled", 20*time.Second, func() bool {
		s, err := st.Get(ctx, "tb-kid")
		return err == nil && (s.State == fsm.StateCancelling || s.State == fsm.StateCancelled)
	})
	if _, err := st.Get(ctx, "tb-1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("tb-1 after SessionCreated again: %v, want no snapshot", err)
	}
	if s, err := st.Get(ctx, "tb-kid"); err != nil || s.Cancellation.Reason != ReasonParentClosed {
		t.Fatalf("the child of the archived parent: %+v %v, want cancelled %s", s, err, ReasonParentClosed)
	}
	var reasons []string
	for _, rec := range e.readAll(feed.Topic(topic)) {
		var c feed.Change
		if err := feed.Decode(rec.Value, &c); err != nil {
			t.Fatal(err)
		}
		if c.SessionID == "tb-1" && c.Outcome == feed.Rejected {
			reasons = append(reasons, c.Reason+"/"+c.From)
		}
	}
	if len(reasons) < 2 || reasons[0] != "duplicate_create/COMPLETED" || reasons[1] != "after_terminal/COMPLETED" {
		t.Fatalf("the change feed's rejections of tb-1: %v, want duplicate_create then after_terminal from COMPLETED", reasons)
	}
	b, err := archive.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if o, err := b.Get(ctx, "tb-1"); err != nil || o.Snapshot.Position != before.Position || o.Snapshot.Goal != "first" {
		t.Fatalf("the archive object of tb-1: %v, want the first session at %v", err, before.Position)
	}
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}

	// Redis emptied: the restore brings the tombstone back from the changelog.
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r = e.startArchiving(cfg, "tomb", clock, nil)
	defer r.halt()
	e.waitSettled("tomb")
	checkTomb("after a restore")
	again(0xb9)
	e.waitSettled("tomb")
	if _, err := st.Get(ctx, "tb-1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("tb-1 after a restore and SessionCreated again: %v, want no snapshot", err)
	}
}

// TestArchivedUnderTheFoldStaysArchived: a session archived while the
// fold holds a copy of it (the sweep removed it between the fold's read
// and its write, or another owner's sweep did) gets an event folded on
// that copy; Redis refuses the snapshot (the tombstone), and so does the
// changelog: a snapshot record past the archived position would make a
// restore take it for the session's latest and bring the session back,
// without the events folded against the tombstone meanwhile. The next
// event is folded against the tombstone, and nothing of the session is
// written again.
func TestArchivedUnderTheFoldStaysArchived(t *testing.T) {
	e := newEnv(t, 1)
	ev := eventsOf(0xc3)
	e.produce([]fsm.Event{ev("tu-1", fsm.SessionCreated, fsm.Fields{}), ev("tu-1", fsm.SessionStarted, fsm.Fields{}),
		ev("tu-1", fsm.SessionCompleted, fsm.Fields{})})
	st := e.store("under")
	r := e.start(e.changelogConfig("a"), "under", nil)
	defer r.halt()
	e.waitSettled("under")
	s, err := st.Get(ctx, "tu-1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.Forget(ctx, topic, s.Position.Partition, []projstore.Archived{{SessionID: "tu-1", Position: s.Position,
		Tombstone: projstore.Tombstone{State: s.State, Version: s.Version, Ended: time.Unix(0, s.StateEnteredAt)}}})
	if err != nil || out[0] != projstore.ForgetRemoved {
		t.Fatalf("removing tu-1 as the sweep does: %v %v", out, err)
	}
	e.produce([]fsm.Event{ev("tu-1", fsm.SessionStarted, fsm.Fields{})}) // folded on the cached copy
	e.waitSettled("under")
	e.produce([]fsm.Event{ev("tu-1", fsm.ModelRequested, fsm.Fields{})}) // after the copy left
	e.waitSettled("under")
	if _, err := st.Get(ctx, "tu-1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("tu-1 after events folded on a copy of it: %v, want no snapshot", err)
	}
	snaps := 0
	for _, rec := range e.readAll(changelog.Topic(topic)) {
		c, err := changelog.DecodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if c.Kind != changelog.KindSnapshot || c.SessionID != "tu-1" {
			continue
		}
		snaps++
		if s.Position.Less(c.Position) {
			t.Fatalf("the changelog holds a snapshot of tu-1 at %v, past its archived position %v", c.Position, s.Position)
		}
	}
	if snaps == 0 {
		t.Fatal("the changelog holds no snapshot of tu-1 at all")
	}
}

// TestTombstoneRetention (docs/retention.md, CORREX_TOMBSTONE_RETENTION): the
// archive sweep removes the tombstones of sessions that ended longer ago
// than the retention, and keeps the younger ones; the id of a removed one
// may be used again by a new session, while a kept one still refuses its
// id.
func TestTombstoneRetention(t *testing.T) {
	e := newEnv(t, 1)
	ev := eventsOf(0xb9)
	late := time.Date(2026, 12, 2, 10, 30, 0, 0, time.UTC) // young-1 ends an hour and a half after old-1
	e.produce([]fsm.Event{ev("old-1", fsm.SessionCreated, fsm.Fields{Goal: "first"}), ev("old-1", fsm.SessionStarted, fsm.Fields{}),
		ev("old-1", fsm.SessionCompleted, fsm.Fields{}),
		fsm.NewEvent(fsm.EventID{0xb9, 0xf0, 1}, "young-1", fsm.SessionCreated, late, fsm.Fields{Goal: "first"}),
		fsm.NewEvent(fsm.EventID{0xb9, 0xf0, 2}, "young-1", fsm.SessionStarted, late.Add(time.Second), fsm.Fields{}),
		fsm.NewEvent(fsm.EventID{0xb9, 0xf0, 3}, "young-1", fsm.SessionCompleted, late.Add(2*time.Second), fsm.Fields{})})
	url := "file://" + t.TempDir()
	clock := newManualClock(archiveClockStart)
	cfg := e.archiveConfig("a", url)
	cfg.TombstoneRetention = 2 * time.Hour
	r := e.startArchiving(cfg, "tret", clock, nil)
	defer r.halt()
	e.waitSettled("tret")
	st := e.store("tret")
	ids := []string{"old-1", "young-1"}
	tombs := func() []*projstore.Tombstone {
		ts, err := st.Tombstones(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	sweepUntil(t, clock, "both archived, and old-1's tombstone past its retention removed", func() bool {
		ts := tombs()
		return allGone(e.storedSessions("tret", ids)) && ts[0] == nil && ts[1] != nil
	})
	// young-1 ended at 10:30:02: its tombstone stays until 12:30:02.
	if now := clock.Now(); !now.Before(late.Add(2 * time.Hour)) {
		t.Fatalf("the clock reached %v before old-1's tombstone was removed; young-1's would be due too", now)
	}
	// old-1 may be used again; young-1 may not.
	ev2 := eventsOf(0xba)
	e.produce([]fsm.Event{ev2("old-1", fsm.SessionCreated, fsm.Fields{Goal: "second"}), ev2("old-1", fsm.SessionStarted, fsm.Fields{}),
		ev2("young-1", fsm.SessionCreated, fsm.Fields{Goal: "second"})})
	e.waitSettled("tret")
	if s, err := st.Get(ctx, "old-1"); err != nil || s.State != fsm.StateActive || s.Goal != "second" {
		t.Fatalf("old-1 created again after its tombstone's retention: %+v %v, want a new ACTIVE session", s, err)
	}
	if _, err := st.Get(ctx, "young-1"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("young-1 created again under its tombstone: %v, want no snapshot", err)
	}
	if ts := tombs(); ts[1] == nil || ts[1].State != fsm.StateCompleted {
		t.Fatalf("young-1's tombstone: %+v, want it kept", ts[1])
	}
}
