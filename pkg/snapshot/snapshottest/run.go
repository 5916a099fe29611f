package snapshottest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// Run runs the contract (see the package documentation) against the stores
// newStore returns, one subtest per rule. newStore is called at least once
// per subtest, with that subtest's t; every store it returns must be empty
// and must not see what another store returned by newStore holds (stores on
// one server under different key prefixes qualify). Subtests run one after
// the other.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore) })
	}
}

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

// snap returns a snapshot of session id in state st at position (p, o).
func snap(t testing.TB, id string, st fsm.State, p int32, o int64) *snapshot.Snapshot {
	t.Helper()
	paths := map[fsm.State][]fsm.EventType{
		fsm.StateCreated:   {fsm.SessionCreated},
		fsm.StateActive:    {fsm.SessionCreated, fsm.SessionStarted},
		fsm.StatePaused:    {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused},
		fsm.StateCompleted: {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionCompleted},
		fsm.StateFailed:    {fsm.SessionCreated, fsm.SessionFailed},
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

func put(t *testing.T, st Store, snaps ...*snapshot.Snapshot) snapshot.PutResult {
	t.Helper()
	entries := make([]snapshot.Entry, len(snaps))
	for i, s := range snaps {
		entries[i] = snapshot.NewEntry(s)
	}
	res, err := st.PutBatch(t.Context(), entries)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func get(t *testing.T, st Store, id string) *snapshot.Snapshot {
	t.Helper()
	s, err := st.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return s
}

// prior is the PriorCheckpoint of a stored offset, or of none (off < 0).
func prior(off int64) snapshot.PriorCheckpoint {
	if off < 0 {
		return snapshot.PriorCheckpoint{}
	}
	return snapshot.PriorCheckpoint{Stored: true, Offset: off}
}

var contract = []struct {
	name string
	run  func(t *testing.T, newStore func(*testing.T) Store)
}{
	{"missing is ErrNotFound", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		if _, err := st.Get(t.Context(), "nobody"); !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		got, err := st.GetMany(t.Context(), []string{"nobody", "none"})
		if err != nil || len(got) != 2 || got[0] != nil || got[1] != nil {
			t.Fatalf("GetMany: %v %v", got, err)
		}
	}},
	{"round trip", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		want := snap(t, "s-1", fsm.StatePaused, 3, 42)
		if res := put(t, st, want); res.Written != 1 || res.Fenced != 0 {
			t.Fatalf("put: %+v", res)
		}
		got := get(t, st, "s-1")
		if string(got.AppendBinary(nil)) != string(want.AppendBinary(nil)) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}},
	{"fencing", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		put(t, st, snap(t, "s-1", fsm.StatePaused, 2, 10))
		cases := []struct {
			name    string
			s       *snapshot.Snapshot
			written bool
		}{
			{"stale offset", snap(t, "s-1", fsm.StateActive, 2, 9), false},
			{"equal offset", snap(t, "s-1", fsm.StateCompleted, 2, 10), false},
			{"lower partition", snap(t, "s-1", fsm.StateCompleted, 1, 99), false},
			{"higher offset", snap(t, "s-1", fsm.StateActive, 2, 11), true},
			{"stale after the newer write", snap(t, "s-1", fsm.StatePaused, 2, 10), false},
			{"higher partition", snap(t, "s-1", fsm.StateCompleted, 3, 0), true},
		}
		for _, c := range cases {
			res := put(t, st, c.s)
			if (res.Written == 1) != c.written {
				t.Fatalf("%s: %+v, want written=%v", c.name, res, c.written)
			}
		}
		if got := get(t, st, "s-1"); got.Position != (snapshot.Position{Partition: 3, Offset: 0}) || got.State != fsm.StateCompleted {
			t.Fatalf("stored %v", got)
		}
		// The index follows only the writes that won.
		page, err := st.List(t.Context(), fsm.StatePaused, "", 10)
		if err != nil || len(page.Snapshots) != 0 {
			t.Fatalf("PAUSED listing after fenced writes: %v %v", page.Snapshots, err)
		}
		counts, err := st.Count(t.Context())
		if err != nil || counts.ByState[fsm.StateCompleted] != 1 || counts.Total != 1 || counts.ByState[fsm.StatePaused] != 0 {
			t.Fatalf("counts %+v %v", counts, err)
		}
	}},
	{"batch across buckets, later position wins", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		var batch []*snapshot.Snapshot
		for i := range 600 {
			batch = append(batch, snap(t, fmt.Sprintf("b-%d", i), fsm.StateActive, int32(i%4), int64(i)))
		}
		batch = append(batch, snap(t, "b-7", fsm.StateCompleted, 3, 1000), snap(t, "b-7", fsm.StatePaused, 3, 999))
		res := put(t, st, batch...)
		if res.Written != 601 || res.Fenced != 1 {
			t.Fatalf("put: %+v", res)
		}
		ids := []string{"b-7", "missing", "b-599"}
		got, err := st.GetMany(t.Context(), ids)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].State != fsm.StateCompleted || got[1] != nil || got[2].ID != "b-599" {
			t.Fatalf("GetMany: %v", got)
		}
	}},
	{"a batch written again leaves the same state", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		var batch []*snapshot.Snapshot
		for i := range 300 {
			batch = append(batch, snap(t, fmt.Sprintf("r-%d", i), []fsm.State{fsm.StateActive, fsm.StatePaused}[i%2], 1, int64(10+i)))
		}
		put(t, st, batch...)
		ids := make([]string, len(batch))
		for i, s := range batch {
			ids[i] = s.ID
		}
		before, _ := st.GetMany(t.Context(), ids)
		countsBefore, _ := st.Count(t.Context())
		// Every entry loses to the equal stored position.
		if res := put(t, st, batch...); res.Written != 0 || res.Fenced != 300 {
			t.Fatalf("again: %+v", res)
		}
		after, err := st.GetMany(t.Context(), ids)
		if err != nil {
			t.Fatal(err)
		}
		for i := range before {
			if string(before[i].AppendBinary(nil)) != string(after[i].AppendBinary(nil)) {
				t.Fatalf("%s changed", ids[i])
			}
		}
		if countsAfter, _ := st.Count(t.Context()); fmt.Sprint(countsAfter) != fmt.Sprint(countsBefore) {
			t.Fatalf("counts changed: %v -> %v", countsBefore, countsAfter)
		}
	}},
	{"replace wins over an equal position", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		at := func(offset int64, goal string) snapshot.Entry {
			var s snapshot.Snapshot
			s.ID, s.State, s.Goal = "s-1", fsm.StateActive, goal
			s.Position = snapshot.Position{Partition: 1, Offset: offset}
			return snapshot.NewEntry(&s)
		}
		goal := func() string { return get(t, st, "s-1").Goal }
		if _, err := st.PutBatch(t.Context(), []snapshot.Entry{at(5, "first")}); err != nil {
			t.Fatal(err)
		}
		if res, _ := st.PutBatch(t.Context(), []snapshot.Entry{at(5, "put")}); res.Written != 0 || goal() != "first" {
			t.Fatalf("PutBatch at an equal position: %+v, goal %q", res, goal())
		}
		for _, tt := range []struct {
			offset int64
			goal   string
			stored bool
			want   string
		}{{5, "equal", true, "equal"}, {4, "older", false, "equal"}, {9, "later", true, "later"}, {9, "again", true, "again"}} {
			ok, err := st.Replace(t.Context(), at(tt.offset, tt.goal))
			if err != nil || ok != tt.stored || goal() != tt.want {
				t.Fatalf("Replace at %d: stored %v (%v), goal %q; want %v, %q", tt.offset, ok, err, goal(), tt.stored, tt.want)
			}
		}
	}},
	{"checkpoints are monotonic", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		now := time.UnixMilli(1_800_000_000_000)
		save := func(when time.Time, cps ...snapshot.Checkpoint) []snapshot.PriorCheckpoint {
			t.Helper()
			prev, err := st.SaveCheckpoints(ctx, "events", cps, when)
			if err != nil || len(prev) != len(cps) {
				t.Fatalf("save %+v: %v %v", cps, prev, err)
			}
			return prev
		}
		if prev := save(now, snapshot.Checkpoint{Partition: 0, Offset: 100, HighWatermark: 150},
			snapshot.Checkpoint{Partition: 1, Offset: 7, HighWatermark: -1}); prev[0] != prior(-1) || prev[1] != prior(-1) {
			t.Fatalf("first save: %+v", prev)
		}
		if prev := save(now.Add(time.Second), snapshot.Checkpoint{Partition: 0, Offset: 50, HighWatermark: 50},
			snapshot.Checkpoint{Partition: 1, Offset: 8, HighWatermark: 9}); prev[0] != prior(100) || prev[1] != prior(7) {
			t.Fatalf("second save: %+v", prev)
		}
		cps, err := st.Checkpoints(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		if c := cps[0]; c.Offset != 100 || c.HighWatermark != 150 || !c.Time.Equal(now) {
			t.Fatalf("partition 0 moved back: %+v", c)
		}
		if c := cps[1]; c.Offset != 8 || c.HighWatermark != 9 || !c.Time.Equal(now.Add(time.Second)) {
			t.Fatalf("partition 1: %+v", c)
		}
		// An equal offset refreshes the time and high watermark.
		save(now.Add(time.Minute), snapshot.Checkpoint{Partition: 0, Offset: 100, HighWatermark: 170})
		cps, _ = st.Checkpoints(ctx, "events")
		if c := cps[0]; c.Offset != 100 || c.HighWatermark != 170 || !c.Time.Equal(now.Add(time.Minute)) {
			t.Fatalf("refresh: %+v", c)
		}
		if lag, ok := cps[0].Lag(); !ok || lag != 70 {
			t.Fatalf("lag %d %v, want 70", lag, ok)
		}
		if other, _ := st.Checkpoints(ctx, "other-topic"); len(other) != 0 {
			t.Fatalf("topics share checkpoints: %v", other)
		}
		if err := st.DeleteCheckpoints(ctx, "events"); err != nil {
			t.Fatal(err)
		}
		if cps, _ := st.Checkpoints(ctx, "events"); len(cps) != 0 {
			t.Fatalf("after delete: %v", cps)
		}
		// A writer that expects its checkpoint learns it is gone, and
		// writes nothing over the hole; one that does not expect it writes.
		lostOne := snapshot.Checkpoint{Partition: 0, Offset: 120, Expected: true}
		prev := save(now, lostOne, snapshot.Checkpoint{Partition: 1, Offset: 9})
		if prev[0] != prior(-1) || prev[1] != prior(-1) || !prev[0].Lost(lostOne) {
			t.Fatalf("after loss: %+v", prev)
		}
		cps, _ = st.Checkpoints(ctx, "events")
		if _, ok := cps[0]; ok || cps[1].Offset != 9 {
			t.Fatalf("after loss: %+v", cps)
		}
		// A writer that knows a higher checkpoint than the stored one (the
		// store went back in time) learns the lower one and writes nothing;
		// a writer whose known checkpoint is stored advances it.
		goneBack := snapshot.Checkpoint{Partition: 1, Offset: 30, Expected: true, Known: 20}
		if prev := save(now, goneBack); prev[0] != prior(9) || !prev[0].Lost(goneBack) {
			t.Fatalf("gone back: %+v", prev)
		}
		if cps, _ = st.Checkpoints(ctx, "events"); cps[1].Offset != 9 {
			t.Fatalf("a checkpoint was written over a store that went back: %+v", cps[1])
		}
		known := snapshot.Checkpoint{Partition: 1, Offset: 30, Expected: true, Known: 9}
		prev = save(now, known)
		if cps, _ = st.Checkpoints(ctx, "events"); prev[0] != prior(9) || prev[0].Lost(known) || cps[1].Offset != 30 {
			t.Fatalf("known and stored: %+v %+v", prev, cps[1])
		}
	}},
	{"listing and counts", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		want := map[fsm.State][]string{}
		var batch []*snapshot.Snapshot
		states := []fsm.State{fsm.StateCreated, fsm.StateActive, fsm.StatePaused, fsm.StateCompleted, fsm.StateFailed}
		for i := range 500 {
			st := states[i%len(states)]
			id := fmt.Sprintf("l-%03d", i)
			want[st] = append(want[st], id)
			batch = append(batch, snap(t, id, st, 0, int64(i)))
		}
		put(t, st, batch...)
		for _, state := range append(states, fsm.StateNone) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				page, err := st.List(ctx, state, cursor, 37)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Snapshots) > 37 || pages > 50 {
					t.Fatalf("page of %d, or too many pages", len(page.Snapshots))
				}
				for _, s := range page.Snapshots {
					if state != fsm.StateNone && s.State != state {
						t.Fatalf("listing %s returned %v", state, s)
					}
					got = append(got, s.ID)
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			expect := want[state]
			if state == fsm.StateNone {
				expect = nil
				for _, ids := range want {
					expect = append(expect, ids...)
				}
			}
			sort.Strings(got)
			sort.Strings(expect)
			if fmt.Sprint(got) != fmt.Sprint(expect) {
				t.Fatalf("listing %s: got %d sessions, want %d", state, len(got), len(expect))
			}
		}
		counts, err := st.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, state := range states {
			if counts.ByState[state] != 100 {
				t.Errorf("count %s = %d, want 100", state, counts.ByState[state])
			}
		}
		if counts.Total != 500 {
			t.Errorf("total %d", counts.Total)
		}
		// A state change moves the session in the index.
		put(t, st, snap(t, "l-001", fsm.StateCompleted, 0, 1000))
		counts, _ = st.Count(ctx)
		if counts.ByState[fsm.StateActive] != 99 || counts.ByState[fsm.StateCompleted] != 101 || counts.Total != 500 {
			t.Fatalf("after a state change: %+v", counts)
		}
		if _, err := st.List(ctx, fsm.StateActive, "not a cursor!", 10); !errors.Is(err, snapshot.ErrBadCursor) {
			t.Fatalf("bad cursor: %v", err)
		}
	}},
	{"listing filtered by labels and parent", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		var batch []*snapshot.Snapshot
		want := map[string]bool{}
		for i := range 120 {
			id := fmt.Sprintf("f-%03d", i)
			f := fsm.Fields{Goal: "g", Labels: []fsm.Label{{Key: "team", Value: []string{"core", "edge"}[i%2]}}}
			if i%3 == 0 {
				f.Labels = append(f.Labels, fsm.Label{Key: "env", Value: "prod"})
			}
			if i%5 == 0 {
				f.ParentSessionID = "f-parent"
			}
			var s snapshot.Snapshot
			var r fsm.Reducer
			e := fsm.NewEvent(fsm.EventID{byte(i), 1}, id, fsm.SessionCreated, t0, f)
			r.Apply(&s.Session, &e)
			s.Position = snapshot.Position{Offset: int64(i)}
			batch = append(batch, &s)
			if i%2 == 0 && i%3 == 0 && i%5 == 0 {
				want[id] = true
			}
		}
		put(t, st, batch...)
		filter := snapshot.Filter{Labels: []fsm.Label{{Key: "team", Value: "core"}, {Key: "env", Value: "prod"}}, Parent: "f-parent"}
		got := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			page, err := st.ListFiltered(ctx, fsm.StateNone, "f-", filter, cursor, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Snapshots) != len(page.After) || len(page.Snapshots) > 7 || pages > 40 {
				t.Fatalf("page %d: %d snapshots, %d cursors", pages, len(page.Snapshots), len(page.After))
			}
			for _, s := range page.Snapshots {
				if got[s.ID] || !want[s.ID] {
					t.Fatalf("listed %s (seen before: %v, wanted: %v)", s.ID, got[s.ID], want[s.ID])
				}
				got[s.ID] = true
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if len(got) != len(want) || len(want) != 4 {
			t.Fatalf("listed %d sessions, want %d", len(got), len(want))
		}
		for _, f := range []snapshot.Filter{{Parent: "nobody"}, {Labels: []fsm.Label{{Key: "team", Value: "none"}}}, {Labels: []fsm.Label{{Key: "absent", Value: ""}}}} {
			page, err := st.ListFiltered(ctx, fsm.StateNone, "f-", f, "", 200)
			if err != nil || len(page.Snapshots) != 0 || page.Next != "" {
				t.Fatalf("%+v: got %d snapshots next %q err %v", f, len(page.Snapshots), page.Next, err)
			}
		}
	}},
	{"listing and counts by session-id prefix", func(t *testing.T, newStore func(*testing.T) Store) {
		st := newStore(t)
		ctx := t.Context()
		// Tenants whose prefixes are close in the index's order: acme:,
		// acme:team: (inside acme:), acm: and acme-x: (outside it), zeta:.
		want := map[string]map[fsm.State]int{}
		states := []fsm.State{fsm.StateCreated, fsm.StateActive, fsm.StatePaused, fsm.StateCompleted}
		var batch []*snapshot.Snapshot
		add := func(id string, i int) {
			s := states[i%len(states)]
			batch = append(batch, snap(t, id, s, 0, int64(len(batch))))
		}
		for i := range 230 {
			add(fmt.Sprintf("acme:%03d", i), i)
		}
		for i := range 20 {
			add(fmt.Sprintf("acme:team:%02d", i), i)
		}
		for i := range 60 {
			add(fmt.Sprintf("acm:%02d", i), i)
			add(fmt.Sprintf("acme-x:%02d", i), i)
			add(fmt.Sprintf("zeta:%02d", i), i)
		}
		put(t, st, batch...)
		prefixes := []string{"acme:", "acme:team:", "acm", "zeta:", "nobody:"}
		for _, s := range batch {
			for _, p := range prefixes {
				if want[p] == nil {
					want[p] = map[fsm.State]int{}
				}
				if strings.HasPrefix(s.ID, p) {
					want[p][s.State]++
					want[p][fsm.StateNone]++
				}
			}
		}
		for _, prefix := range prefixes {
			for _, state := range []fsm.State{fsm.StateNone, fsm.StateActive} {
				const limit = 17
				got, cursor := 0, ""
				for pages := 0; ; pages++ {
					page, err := st.ListPrefix(ctx, state, prefix, cursor, limit)
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range page.Snapshots {
						if !strings.HasPrefix(s.ID, prefix) || state != fsm.StateNone && s.State != state {
							t.Fatalf("listing %s %s returned %s in %s", prefix, state, s.ID, s.State)
						}
					}
					got += len(page.Snapshots)
					if page.Next == "" {
						break
					}
					// Pages before the last are full: the prefix is part of
					// the scan, not a filter after it.
					if len(page.Snapshots) != limit || pages > 40 {
						t.Fatalf("listing %s %s: a page of %d before the last (page %d)", prefix, state, len(page.Snapshots), pages)
					}
					cursor = page.Next
				}
				if got != want[prefix][state] {
					t.Fatalf("listing %s %s: %d sessions, want %d", prefix, state, got, want[prefix][state])
				}
			}
			counts, err := st.CountPrefix(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if counts.Total != int64(want[prefix][fsm.StateNone]) {
				t.Fatalf("count %s: total %d, want %d", prefix, counts.Total, want[prefix][fsm.StateNone])
			}
			for _, state := range states {
				if counts.ByState[state] != int64(want[prefix][state]) {
					t.Fatalf("count %s %s: %d, want %d", prefix, state, counts.ByState[state], want[prefix][state])
				}
			}
		}
		// A cursor issued for one prefix does not continue under another.
		page, err := st.ListPrefix(ctx, fsm.StateNone, "acme:", "", 5)
		if err != nil || page.Next == "" {
			t.Fatalf("first page: %v", err)
		}
		if _, err := st.ListPrefix(ctx, fsm.StateNone, "zeta:", page.Next, 5); !errors.Is(err, snapshot.ErrBadCursor) {
			t.Fatalf("a cursor of acme: under zeta:: %v", err)
		}
		if all, err := st.Count(ctx); err != nil || all.Total != int64(len(batch)) {
			t.Fatalf("unrestricted count %d %v, want %d", all.Total, err, len(batch))
		}
	}},
	{"reset deletes the store's data and nothing of another", func(t *testing.T, newStore func(*testing.T) Store) {
		st, other := newStore(t), newStore(t)
		ctx := t.Context()
		var batch []*snapshot.Snapshot
		for i := range 50 {
			batch = append(batch, snap(t, fmt.Sprintf("x-%d", i), fsm.StateActive, 0, int64(i)))
		}
		put(t, st, batch...)
		if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 50}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		put(t, other, snap(t, "keep", fsm.StateActive, 0, 1))
		// At least one deleted item per snapshot, and the checkpoints.
		n, err := st.Reset(ctx)
		if err != nil || n < 51 {
			t.Fatalf("reset deleted %d: %v", n, err)
		}
		if _, err := st.Get(ctx, "x-1"); !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("after reset: %v", err)
		}
		if cps, _ := st.Checkpoints(ctx, "events"); len(cps) != 0 {
			t.Fatalf("checkpoints survived: %v", cps)
		}
		if c, _ := st.Count(ctx); c.Total != 0 {
			t.Fatalf("index survived: %+v", c)
		}
		if _, err := other.Get(ctx, "keep"); err != nil {
			t.Fatalf("another store was touched: %v", err)
		}
	}},
}
