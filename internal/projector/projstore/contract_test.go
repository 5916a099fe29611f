package projstore_test

import (
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestContract runs the rules of the projector's own storage against every
// deployment, each store under a prefix of its own, as
// pkg/snapshot/snapshottest runs the snapshot store's contract: a
// partition's deletion, the children index, the outbox, the armed
// deadlines and the closed sessions' index and removal.
func TestContract(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.Name, func(t *testing.T) {
			rdb, _ := tg.Open(t)
			var n atomic.Int64
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					c.run(t, func(t *testing.T) Store {
						st, err := projstore.New(rdb, fmt.Sprintf("c%d", n.Add(1)))
						if err != nil {
							t.Fatal(err)
						}
						return st
					})
				})
			}
		})
	}
}

// Store is the store the rules exercise.
type Store = *projstore.Store

// snapIn returns a snapshot of session id in state st at position (p, o).
func snapIn(t testing.TB, id string, st fsm.State, p int32, o int64) *snapshot.Snapshot {
	t.Helper()
	paths := map[fsm.State][]fsm.EventType{
		fsm.StateActive:    {fsm.SessionCreated, fsm.SessionStarted},
		fsm.StatePaused:    {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused},
		fsm.StateCompleted: {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionCompleted},
	}
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, et := range paths[st] {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1), byte(o)}, id, et, t0.Add(time.Duration(i)*time.Second), fsm.Fields{})
		r.Apply(&s.Session, &e)
	}
	if s.State != st {
		t.Fatalf("no path to %s", st)
	}
	s.Position = snapshot.Position{Partition: p, Offset: o}
	return &s
}

var contract = []struct {
	name string
	run  func(t *testing.T, newStore func(*testing.T) Store)
}{
	{"delete a partition's snapshots", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		var batch []*snapshot.Snapshot
		for i := range 300 {
			batch = append(batch, snapIn(t, fmt.Sprintf("d-%d", i), []fsm.State{fsm.StateActive, fsm.StatePaused}[i%2], int32(i%3), int64(i)))
		}
		put(t, st, batch...)
		n, err := st.DeletePartition(ctx, 1)
		if err != nil || n != 100 {
			t.Fatalf("deleted %d: %v", n, err)
		}
		for i := range 300 {
			_, err := st.Get(ctx, fmt.Sprintf("d-%d", i))
			if gone := errors.Is(err, snapshot.ErrNotFound); gone != (i%3 == 1) {
				t.Fatalf("d-%d: %v", i, err)
			}
		}
		counts, _ := st.Count(ctx)
		if counts.Total != 200 || counts.ByState[fsm.StateActive]+counts.ByState[fsm.StatePaused] != 200 {
			t.Fatalf("index after delete: %+v", counts)
		}
		page, _ := st.List(ctx, fsm.StateNone, "", 1000)
		if len(page.Snapshots) != 200 {
			t.Fatalf("listing after delete: %d", len(page.Snapshots))
		}
		if n, err := st.DeletePartition(ctx, 1); err != nil || n != 0 {
			t.Fatalf("second delete: %d %v", n, err)
		}
	}},
	{"delete several partitions' snapshots in one call", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		var batch []*snapshot.Snapshot
		for i := range 400 {
			batch = append(batch, snapIn(t, fmt.Sprintf("m-%d", i), []fsm.State{fsm.StateActive, fsm.StateCompleted}[i%2], int32(i%4), int64(i)))
		}
		put(t, st, batch...)
		if n, err := st.DeletePartition(ctx); err != nil || n != 0 {
			t.Fatalf("a delete of no partition: %d %v", n, err)
		}
		n, err := st.DeletePartition(ctx, 3, 1)
		if err != nil || n != 200 {
			t.Fatalf("deleted %d of partitions 1 and 3: %v, want 200", n, err)
		}
		for i := range 400 {
			_, err := st.Get(ctx, fmt.Sprintf("m-%d", i))
			if gone := errors.Is(err, snapshot.ErrNotFound); gone != (i%4 == 1 || i%4 == 3) {
				t.Fatalf("m-%d (partition %d): %v", i, i%4, err)
			}
		}
		if counts, _ := st.Count(ctx); counts.Total != 200 || counts.ByState[fsm.StateActive]+counts.ByState[fsm.StateCompleted] != 200 {
			t.Fatalf("index after the delete: %+v", counts)
		}
	}},
	{"children", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		var links []projstore.ChildLink
		for i := range 30 {
			links = append(links, projstore.ChildLink{Parent: fmt.Sprintf("p%d", i%2), Child: fmt.Sprintf("c%02d", i)})
		}
		for range 2 { // idempotent
			if err := st.AddChildren(ctx, links); err != nil {
				t.Fatal(err)
			}
		}
		// all reads parent's children page by page, count at a time.
		all := func(parent string, count int) []string {
			t.Helper()
			seen := map[string]bool{}
			var out []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 1000 {
					t.Fatalf("children of %s: no end after %d pages", parent, pages)
				}
				kids, next, err := st.ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: parent, Cursor: cursor}}, count)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range kids[0] {
					if !seen[k] {
						seen[k] = true
						out = append(out, k)
					}
				}
				if next[0] == "" {
					sort.Strings(out)
					return out
				}
				cursor = next[0]
			}
		}
		if got := all("p0", 4); len(got) != 15 || got[0] != "c00" || got[14] != "c28" {
			t.Fatalf("children of p0: %v", got)
		}
		if got := all("none", 4); len(got) != 0 {
			t.Fatalf("children of none: %v", got)
		}
		ended := []projstore.ChildLink{{Parent: "p1", Child: "c01"}, {Parent: "p1", Child: "c29"}, {Parent: "p1", Child: "never"}}
		for range 2 { // idempotent
			if err := st.RemoveChildren(ctx, ended); err != nil {
				t.Fatal(err)
			}
		}
		if got := all("p1", 1000); len(got) != 13 || got[0] != "c03" || got[12] != "c27" {
			t.Fatalf("children of p1 after removing c01 and c29: %v", got)
		}
		if got := all("p0", 1000); len(got) != 15 {
			t.Fatalf("children of p0 after removals under p1: %v", got)
		}
		// A large parent comes in several pages, and whole.
		var many []projstore.ChildLink
		for i := range 300 {
			many = append(many, projstore.ChildLink{Parent: "p2", Child: fmt.Sprintf("m%03d", i)})
		}
		if err := st.AddChildren(ctx, many); err != nil {
			t.Fatal(err)
		}
		if got := all("p2", 10); len(got) != 300 || got[0] != "m000" || got[299] != "m299" {
			t.Fatalf("children of p2: %d, want 300", len(got))
		}
		// Several parents in one call, each from its own cursor.
		kids, next, err := st.ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: "p2"}, {Parent: "none"}, {Parent: "p0"}}, 10)
		if err != nil || len(kids) != 3 || len(next) != 3 {
			t.Fatalf("three parents at once: %d pages, %d cursors, %v", len(kids), len(next), err)
		}
		if next[0] == "" || len(kids[0]) == 0 || len(kids[0]) >= 300 {
			t.Fatalf("the first page of 300 children, 10 asked: %d children, next %q; want part of them and a next page", len(kids[0]), next[0])
		}
		if len(kids[1]) != 0 || next[1] != "" {
			t.Fatalf("the page of a parent without children: %v, next %q", kids[1], next[1])
		}
		if n := len(kids[2]); n == 0 || n > 15 {
			t.Fatalf("the first page of p0: %v", kids[2])
		}
		rest := map[string]bool{}
		for _, k := range kids[0] {
			rest[k] = true
		}
		for cursor := next[0]; cursor != ""; {
			kids, next, err := st.ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: "p2", Cursor: cursor}}, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range kids[0] {
				rest[k] = true
			}
			cursor = next[0]
		}
		if len(rest) != 300 {
			t.Fatalf("p2 read on from the cursor of a call over three parents: %d children, want 300", len(rest))
		}
		if _, _, err := st.ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: "p0", Cursor: "not-a-cursor"}}, 10); !errors.Is(err, snapshot.ErrBadCursor) {
			t.Fatalf("a cursor the store did not issue: %v, want ErrBadCursor", err)
		}
	}},
	{"outbox", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		put := func(bs ...projstore.OutboxBatch) {
			t.Helper()
			if err := st.PutOutbox(t.Context(), "ev", bs); err != nil {
				t.Fatal(err)
			}
		}
		put(projstore.OutboxBatch{Partition: 0, Last: 10, Data: []byte("a")}, projstore.OutboxBatch{Partition: 1, Last: 5, Data: []byte("b")})
		put(projstore.OutboxBatch{Partition: 0, Last: 10, Data: []byte("a")}) // again: idempotent
		put(projstore.OutboxBatch{Partition: 0, Last: 20, Data: []byte("c")})
		put(projstore.OutboxBatch{Partition: 0, Last: 30, Data: []byte("d"), Below: 11})
		got, err := st.Outbox(t.Context(), "ev")
		if err != nil {
			t.Fatal(err)
		}
		if g, w := fmt.Sprint(got), "[{0 20 [99] 0} {0 30 [100] 0} {1 5 [98] 0}]"; g != w {
			t.Fatalf("outbox:\n got %s\nwant %s", g, w)
		}
	}},
	{"armed deadlines", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixNano()
		ms := int64(time.Millisecond)
		arm := func(p int32, ds ...projstore.ArmedDeadline) time.Time {
			t.Helper()
			next, err := st.ArmDeadlines(ctx, "ev", map[int32][]projstore.ArmedDeadline{p: ds})
			if err != nil {
				t.Fatal(err)
			}
			return next[p]
		}
		a := projstore.ArmedDeadline{SessionID: "a", Kind: fsm.TimeoutInactivity, At: base + 5*ms + 1, Version: 3}
		b := projstore.ArmedDeadline{SessionID: "b", Kind: fsm.TimeoutExecution, At: base + 2*ms, Version: 1}
		if next := arm(1, a, b); !next.Equal(time.Unix(0, base+2*ms)) {
			t.Fatalf("next: got %v, want b's deadline", next)
		}
		// An older version never replaces a newer one; the same or a newer does.
		stale := a
		stale.Version, stale.At = 2, base
		arm(1, stale)
		if next := arm(1); !next.Equal(time.Unix(0, base+2*ms)) {
			t.Fatalf("stale version re-armed: next %v", next)
		}
		disarmStale := projstore.ArmedDeadline{SessionID: "a", Version: 2}
		arm(1, disarmStale)
		// Due: nothing before b's time; at a's time (rounded up to the ms) both, earliest first.
		due, next, err := st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+ms), 10)
		if err != nil || len(due) != 0 || !next.Equal(time.Unix(0, base+2*ms)) {
			t.Fatalf("due early: got %v %v %v", due, next, err)
		}
		due, next, err = st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+6*ms), 10)
		if err != nil || len(due) != 2 || due[0] != b || due[1] != a || !next.IsZero() {
			t.Fatalf("due: got %+v %v %v, want b then a", due, next, err)
		}
		// a is re-armed by a newer version after it was read: removing the fired one keeps it.
		a2 := a
		a2.Version, a2.Kind, a2.At = 4, fsm.TimeoutCancellation, base+9*ms
		arm(1, a2)
		if n, err := st.RemoveFired(ctx, "ev", 1, due); err != nil || n != 1 {
			t.Fatalf("remove fired: got %d %v, want 1 (b only)", n, err)
		}
		due, _, err = st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+time.Hour.Nanoseconds()), 10)
		if err != nil || len(due) != 1 || due[0] != a2 {
			t.Fatalf("after remove: got %+v %v, want a re-armed", due, err)
		}
		// What was fired, armed again at the same version, is not due again;
		// another deadline at that version is, and so is a newer version.
		arm(1, b)
		if due, _, err := st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+time.Hour.Nanoseconds()), 10); err != nil || len(due) != 1 || due[0] != a2 {
			t.Fatalf("a fired deadline armed again at its version: due %+v %v, want a only", due, err)
		}
		bLater := b
		bLater.At += ms
		arm(1, bLater)
		bNewer := b
		bNewer.Version++
		if due, _, err := st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+time.Hour.Nanoseconds()), 10); err != nil || len(due) != 2 || due[0] != bLater {
			t.Fatalf("another deadline at the fired one's version: due %+v %v, want it and a", due, err)
		}
		if n, err := st.RemoveFired(ctx, "ev", 1, []projstore.ArmedDeadline{bLater}); err != nil || n != 1 {
			t.Fatalf("remove fired: got %d %v, want 1", n, err)
		}
		arm(1, bNewer)
		if due, _, err := st.DueDeadlines(ctx, "ev", 1, time.Unix(0, base+time.Hour.Nanoseconds()), 10); err != nil || len(due) != 2 || due[0] != bNewer {
			t.Fatalf("a newer version after a firing: due %+v %v, want it and a", due, err)
		}
		arm(1, projstore.ArmedDeadline{SessionID: "b", Version: bNewer.Version})
		// Disarm by the same version; other partitions are apart.
		arm(2, b)
		if next := arm(1, projstore.ArmedDeadline{SessionID: "a", Version: 4}); !next.IsZero() {
			t.Fatalf("disarmed: next %v", next)
		}
		if next, err := st.NextDeadline(ctx, "ev", 2); err != nil || !next.Equal(time.Unix(0, base+2*ms)) {
			t.Fatalf("partition 2: %v %v", next, err)
		}
		if err := st.DeleteDeadlines(ctx, "ev", 2); err != nil {
			t.Fatal(err)
		}
		if next, err := st.NextDeadline(ctx, "ev", 2); err != nil || !next.IsZero() {
			t.Fatalf("deleted: %v %v", next, err)
		}
	}},
	{"closed sessions", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
		x, y, z := snapIn(t, "x", fsm.StateCompleted, 1, 10), snapIn(t, "y", fsm.StateCompleted, 1, 11), snapIn(t, "z", fsm.StateActive, 1, 12)
		put(t, st, x, y, z)
		if err := st.AddChildren(ctx, []projstore.ChildLink{{Parent: "x", Child: "kid"}}); err != nil {
			t.Fatal(err)
		}
		arm := func(ds ...projstore.ArmedDeadline) {
			t.Helper()
			if _, err := st.ArmDeadlines(ctx, "ev", map[int32][]projstore.ArmedDeadline{1: ds}); err != nil {
				t.Fatal(err)
			}
		}
		arm(projstore.ArmedDeadline{SessionID: "x", Version: x.Version, Ended: base.UnixNano()},
			projstore.ArmedDeadline{SessionID: "y", Version: y.Version, Ended: base.Add(10 * time.Millisecond).UnixNano()},
			projstore.ArmedDeadline{SessionID: "z", Version: z.Version, Kind: fsm.TimeoutInactivity, At: base.UnixNano()})
		arm(projstore.ArmedDeadline{SessionID: "x", Version: x.Version, Ended: base.UnixNano()}) // again: idempotent
		ids := func(cs []projstore.ClosedSession) string {
			var out []string
			for _, c := range cs {
				out = append(out, c.SessionID)
			}
			return fmt.Sprint(out)
		}
		due, n, err := st.DueClosed(ctx, "ev", 1, base.Add(5*time.Millisecond), 10)
		if err != nil || ids(due) != "[x]" || n != 1 || !due[0].Ended.Equal(base) {
			t.Fatalf("due 5ms after x ended: %+v (%d in all) %v, want x", due, n, err)
		}
		due, n, err = st.DueClosed(ctx, "ev", 1, base.Add(time.Hour), 1)
		if err != nil || ids(due) != "[x]" || n != 2 {
			t.Fatalf("due an hour later, one at a time: %+v (%d in all) %v, want x of 2", due, n, err)
		}
		if due, n, err := st.DueClosed(ctx, "ev", 2, base.Add(time.Hour), 10); err != nil || len(due) != 0 || n != 0 {
			t.Fatalf("another partition: %+v %d %v", due, n, err)
		}
		// x is removed at its archived position; y moved since it was archived: kept.
		got, err := st.Forget(ctx, "ev", 1, []projstore.Archived{{SessionID: "x", Position: x.Position},
			{SessionID: "y", Position: snapshot.Position{Partition: 1, Offset: 9}}})
		if err != nil || fmt.Sprint(got) != "[1 0]" {
			t.Fatalf("forget: %v %v, want [1 0]", got, err)
		}
		if _, err := st.Get(ctx, "x"); !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("x after forget: %v", err)
		}
		if _, err := st.Get(ctx, "y"); err != nil {
			t.Fatalf("y after a fenced forget: %v", err)
		}
		counts, _ := st.Count(ctx)
		if counts.Total != 2 || counts.ByState[fsm.StateCompleted] != 1 || counts.ByState[fsm.StateActive] != 1 {
			t.Fatalf("counts after forget: %+v", counts)
		}
		page, _ := st.ListPrefix(ctx, fsm.StateNone, "x", "", 10)
		if len(page.Snapshots) != 0 {
			t.Fatalf("listing x after forget: %d", len(page.Snapshots))
		}
		if kids, _, err := st.ChildrenPages(ctx, []projstore.ChildrenCursor{{Parent: "x"}}, 10); err != nil || len(kids[0]) != 0 {
			t.Fatalf("x's children after forget: %v %v", kids, err)
		}
		if due, n, err := st.DueClosed(ctx, "ev", 1, base.Add(time.Hour), 10); err != nil || ids(due) != "[y]" || n != 1 {
			t.Fatalf("due after forget: %+v %d %v, want y", due, n, err)
		}
		if next, err := st.NextDeadline(ctx, "ev", 1); err != nil || !next.Equal(base) {
			t.Fatalf("z's deadline after forget: %v %v", next, err)
		}
		// Again (a sweep retried), and a closed entry a stale writer wrote back: gone.
		arm(projstore.ArmedDeadline{SessionID: "x", Version: x.Version, Ended: base.UnixNano()})
		if got, err := st.Forget(ctx, "ev", 1, []projstore.Archived{{SessionID: "x", Position: x.Position}}); err != nil || fmt.Sprint(got) != "[-1]" {
			t.Fatalf("forget again: %v %v, want [-1]", got, err)
		}
		if due, _, err := st.DueClosed(ctx, "ev", 1, base.Add(time.Hour), 10); err != nil || ids(due) != "[y]" {
			t.Fatalf("due after forget again: %+v %v, want y", due, err)
		}
		// A rebuild's delete takes the closed sessions with the deadlines.
		if err := st.DeleteDeadlines(ctx, "ev", 1); err != nil {
			t.Fatal(err)
		}
		if due, n, err := st.DueClosed(ctx, "ev", 1, base.Add(time.Hour), 10); err != nil || len(due) != 0 || n != 0 {
			t.Fatalf("due after DeleteDeadlines: %+v %d %v", due, n, err)
		}
	}},
}
