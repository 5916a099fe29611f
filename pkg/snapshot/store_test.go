package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// storeTarget is one Redis deployment the contract suite runs against.
type storeTarget struct {
	name string
	// open returns a client on a fresh, empty deployment and a function
	// that drops every client connection the server holds.
	open func(t *testing.T) (redis.UniversalClient, func())
}

func targets() []storeTarget {
	return []storeTarget{
		{"redis-server", func(t *testing.T) (redis.UniversalClient, func()) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			return srv.Client(t), func() { killClients(t, admin) }
		}},
		{"redis-cluster", func(t *testing.T) (redis.UniversalClient, func()) {
			c := redistest.StartCluster(t, 3)
			return c.Client(t), func() {
				for _, n := range c.Nodes {
					killClients(t, n.Client(t))
				}
			}
		}},
		{"miniredis", func(t *testing.T) (redis.UniversalClient, func()) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c, func() {
				m.Close() // drops every connection; Restart keeps the data
				if err := m.Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}

func killClients(t *testing.T, admin *redis.Client) {
	id, err := admin.ClientID(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatalf("client kill (admin %d): %v", id, err)
	}
}

// TestStoreContract runs the store's contract against every deployment.
func TestStoreContract(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, drop := tg.open(t)
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					prefix := fmt.Sprintf("t%d", time.Now().UnixNano())
					st, err := snapshot.NewStore(rdb, prefix)
					if err != nil {
						t.Fatal(err)
					}
					c.run(t, st, drop)
				})
			}
		})
	}
}

var ctx = context.Background()

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

func put(t *testing.T, st *snapshot.Store, snaps ...*snapshot.Snapshot) snapshot.PutResult {
	t.Helper()
	entries := make([]snapshot.Entry, len(snaps))
	for i, s := range snaps {
		entries[i] = snapshot.NewEntry(s)
	}
	res, err := st.PutBatch(ctx, entries)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func get(t *testing.T, st *snapshot.Store, id string) *snapshot.Snapshot {
	t.Helper()
	s, err := st.Get(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return s
}

var contract = []struct {
	name string
	run  func(t *testing.T, st *snapshot.Store, drop func())
}{
	{"missing is ErrNotFound", func(t *testing.T, st *snapshot.Store, _ func()) {
		if _, err := st.Get(ctx, "nobody"); !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
		got, err := st.GetMany(ctx, []string{"nobody", "none"})
		if err != nil || len(got) != 2 || got[0] != nil || got[1] != nil {
			t.Fatalf("GetMany: %v %v", got, err)
		}
	}},
	{"round trip", func(t *testing.T, st *snapshot.Store, _ func()) {
		want := snap(t, "s-1", fsm.StatePaused, 3, 42)
		if res := put(t, st, want); res.Written != 1 || res.Fenced != 0 {
			t.Fatalf("put: %+v", res)
		}
		got := get(t, st, "s-1")
		if string(got.AppendBinary(nil)) != string(want.AppendBinary(nil)) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}},
	{"fencing", func(t *testing.T, st *snapshot.Store, _ func()) {
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
		page, err := st.List(ctx, fsm.StatePaused, "", 10)
		if err != nil || len(page.Snapshots) != 0 {
			t.Fatalf("PAUSED listing after fenced writes: %v %v", page.Snapshots, err)
		}
		counts, err := st.Count(ctx)
		if err != nil || counts.ByState[fsm.StateCompleted] != 1 || counts.Total != 1 || counts.ByState[fsm.StatePaused] != 0 {
			t.Fatalf("counts %+v %v", counts, err)
		}
	}},
	{"batch across buckets, later position wins", func(t *testing.T, st *snapshot.Store, _ func()) {
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
		got, err := st.GetMany(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if got[0].State != fsm.StateCompleted || got[1] != nil || got[2].ID != "b-599" {
			t.Fatalf("GetMany: %v", got)
		}
	}},
	{"checkpoints are monotonic", func(t *testing.T, st *snapshot.Store, _ func()) {
		now := time.UnixMilli(1_800_000_000_000)
		prev, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{
			{Partition: 0, Offset: 100, HighWatermark: 150}, {Partition: 1, Offset: 7, HighWatermark: -1}}, now)
		if err != nil || len(prev) != 2 || prev[0] != -1 || prev[1] != -1 {
			t.Fatalf("first save: %v %v", prev, err)
		}
		prev, err = st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{
			{Partition: 0, Offset: 50, HighWatermark: 50}, {Partition: 1, Offset: 8, HighWatermark: 9}}, now.Add(time.Second))
		if err != nil || prev[0] != 100 || prev[1] != 7 {
			t.Fatalf("second save: %v %v", prev, err)
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
		if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 100, HighWatermark: 170}}, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		cps, _ = st.Checkpoints(ctx, "events")
		if c := cps[0]; c.Offset != 100 || c.HighWatermark != 170 || !c.Time.Equal(now.Add(time.Minute)) {
			t.Fatalf("refresh: %+v", c)
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
		prev, err = st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{
			{Partition: 0, Offset: 120, Expected: true}, {Partition: 1, Offset: 9}}, now)
		if err != nil || prev[0] != -1 || prev[1] != -1 {
			t.Fatalf("after loss: %v %v", prev, err)
		}
		cps, _ = st.Checkpoints(ctx, "events")
		if _, ok := cps[0]; ok || cps[1].Offset != 9 {
			t.Fatalf("after loss: %+v", cps)
		}
		// A writer that knows a higher checkpoint than the stored one (Redis
		// went back in time) learns the lower one and writes nothing; a
		// writer whose known checkpoint is stored advances it.
		prev, err = st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 1, Offset: 30, Expected: true, Known: 20}}, now)
		if err != nil || prev[0] != 9 {
			t.Fatalf("gone back: %v %v", prev, err)
		}
		if cps, _ = st.Checkpoints(ctx, "events"); cps[1].Offset != 9 {
			t.Fatalf("a checkpoint was written over a store that went back: %+v", cps[1])
		}
		prev, err = st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 1, Offset: 30, Expected: true, Known: 9}}, now)
		if cps, _ = st.Checkpoints(ctx, "events"); err != nil || prev[0] != 9 || cps[1].Offset != 30 {
			t.Fatalf("known and stored: %v %v %+v", prev, err, cps[1])
		}
	}},
	{"listing and counts", func(t *testing.T, st *snapshot.Store, _ func()) {
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
	{"listing filtered by labels and parent", func(t *testing.T, st *snapshot.Store, _ func()) {
		ctx := context.Background()
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
	{"listing and counts by session-id prefix", func(t *testing.T, st *snapshot.Store, _ func()) {
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
		for _, s := range batch {
			for _, p := range []string{"acme:", "acme:team:", "acm", "zeta:", "nobody:"} {
				if want[p] == nil {
					want[p] = map[fsm.State]int{}
				}
				if strings.HasPrefix(s.ID, p) {
					want[p][s.State]++
					want[p][fsm.StateNone]++
				}
			}
		}
		for _, prefix := range []string{"acme:", "acme:team:", "acm", "zeta:", "nobody:"} {
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
	{"retry after dropped connections leaves the same state", func(t *testing.T, st *snapshot.Store, drop func()) {
		var batch []*snapshot.Snapshot
		for i := range 300 {
			batch = append(batch, snap(t, fmt.Sprintf("r-%d", i), fsm.StateActive, 1, int64(10+i)))
		}
		put(t, st, batch...)
		ids := make([]string, len(batch))
		for i, s := range batch {
			ids[i] = s.ID
		}
		before, _ := st.GetMany(ctx, ids)
		countsBefore, _ := st.Count(ctx)
		drop()
		// The same batch again, as a retried pipeline would send it: every
		// entry loses to the equal stored position.
		res := put(t, st, batch...)
		if res.Written != 0 || res.Fenced != 300 {
			t.Fatalf("retry: %+v", res)
		}
		after, err := st.GetMany(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i := range before {
			if string(before[i].AppendBinary(nil)) != string(after[i].AppendBinary(nil)) {
				t.Fatalf("%s changed across the retry", ids[i])
			}
		}
		if countsAfter, _ := st.Count(ctx); fmt.Sprint(countsAfter) != fmt.Sprint(countsBefore) {
			t.Fatalf("counts changed: %v -> %v", countsBefore, countsAfter)
		}
	}},
	{"reset deletes the prefix and nothing else", func(t *testing.T, st *snapshot.Store, _ func()) {
		var batch []*snapshot.Snapshot
		for i := range 50 {
			batch = append(batch, snap(t, fmt.Sprintf("x-%d", i), fsm.StateActive, 0, int64(i)))
		}
		put(t, st, batch...)
		if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 50}}, time.Now()); err != nil {
			t.Fatal(err)
		}
		other, _ := snapshot.NewStore(st.Client(), "otherprefix")
		if _, err := other.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "keep", fsm.StateActive, 0, 1))}); err != nil {
			t.Fatal(err)
		}
		n, err := st.Reset(ctx)
		if err != nil || n < 51 {
			t.Fatalf("reset deleted %d keys: %v", n, err)
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
			t.Fatalf("another prefix was touched: %v", err)
		}
	}},
	{"delete a partition's snapshots", func(t *testing.T, st *snapshot.Store, _ func()) {
		var batch []*snapshot.Snapshot
		for i := range 300 {
			batch = append(batch, snap(t, fmt.Sprintf("d-%d", i), []fsm.State{fsm.StateActive, fsm.StatePaused}[i%2], int32(i%3), int64(i)))
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
	{"scripts reload after a flush", func(t *testing.T, st *snapshot.Store, _ func()) {
		put(t, st, snap(t, "f-1", fsm.StateActive, 0, 1))
		if cc, ok := st.Client().(*redis.ClusterClient); ok {
			if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.ScriptFlush(ctx).Err()
			}); err != nil {
				t.Fatal(err)
			}
		} else if err := st.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if res := put(t, st, snap(t, "f-1", fsm.StateCompleted, 0, 2)); res.Written != 1 {
			t.Fatalf("after flush: %+v", res)
		}
	}},
}

func TestNewStoreRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"", "a{b}", "has space"} {
		if _, err := snapshot.NewStore(nil, p); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

func TestStoreErrorsWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	st, _ := snapshot.NewStore(c, "down")
	srv.Stop()
	var se *snapshot.StoreError
	if _, err := st.Get(ctx, "s"); !errors.As(err, &se) || se.Op != "get" {
		t.Errorf("get: %v", err)
	}
	if _, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "s", fsm.StateActive, 0, 1))}); !errors.As(err, &se) || se.Op != "put" {
		t.Errorf("put: %v", err)
	}
	if _, err := st.SaveCheckpoints(ctx, "t", []snapshot.Checkpoint{{Offset: 1}}, time.Now()); !errors.As(err, &se) {
		t.Errorf("checkpoint: %v", err)
	}
	if err := st.Ping(ctx); err == nil {
		t.Error("ping succeeded against a stopped server")
	}
	if _, err := st.DeletePartition(ctx, 0); !errors.As(err, &se) || se.Op != "delete" {
		t.Errorf("delete partition: %v", err)
	}
	if _, err := st.PutBatch(ctx, []snapshot.Entry{{SessionID: "s", Data: []byte("junk")}}); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Errorf("junk entry: %v", err)
	}
}

// TestWaitReplicas: with WaitReplicas(1, ...), a batch returns only once
// the replica acknowledged it; with the replica hung (SIGSTOP) the batch
// fails with ErrNotReplicated after the timeout, and succeeds again once
// the replica is back.
func TestWaitReplicas(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	st, _ := snapshot.NewStore(master.Client(t), "wait")
	if err := st.WaitReplicas(1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	put := func(offset int64) error {
		_, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "s", fsm.StateActive, 0, offset))})
		return err
	}
	if err := put(1); err != nil {
		t.Fatalf("with the replica up: %v", err)
	}
	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := put(2)
	_ = replica.Signal(syscall.SIGCONT)
	if !errors.Is(err, snapshot.ErrNotReplicated) {
		t.Fatalf("with the replica hung: %v, want ErrNotReplicated", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := put(3); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the replica is back, and still: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := st.WaitReplicas(1, 0); err == nil {
		t.Error("a wait without a timeout was accepted")
	}
	if m, err := st.WaitReplicated(ctx, nil); m != nil || err != nil {
		t.Errorf("WaitReplicated on a single server: %v %v, want nothing done", m, err)
	}
}

// TestWaitReplicatedCluster: on a Redis Cluster of three masters with one
// replica each, with WaitReplicas(1, ...), WaitReplicated after a batch
// succeeds while every replica is up, fails with ErrNotReplicated while one
// replica hangs (SIGSTOP) and succeeds once it is back (SIGCONT); after a
// master died and its replica took over, it fails with ErrMastersChanged
// for writes made before, and with ErrNotReplicated for writes made after
// a new mark as long as the promoted master has no replica.
func TestWaitReplicatedCluster(t *testing.T) {
	c := redistest.StartClusterWithReplicas(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	st, _ := snapshot.NewStore(cc, "wait")
	if err := st.WaitReplicas(1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A batch with a session in every bucket, so on every master.
	put := func(offset int64) {
		t.Helper()
		var entries []snapshot.Entry
		for i := range 2 * snapshot.Buckets {
			entries = append(entries, snapshot.NewEntry(snap(t, fmt.Sprintf("s-%d", i), fsm.StateActive, 0, offset)))
		}
		if _, err := st.PutBatch(ctx, entries); err != nil {
			t.Fatalf("put at %d: %v", offset, err)
		}
	}
	mark, err := st.MarkReplication(ctx)
	if err != nil || mark == nil {
		t.Fatalf("mark: %v %v", mark, err)
	}
	put(1)
	if mark, err = st.WaitReplicated(ctx, mark); err != nil {
		t.Fatalf("with every replica up: %v", err)
	}

	if err := c.Replicas[1].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	put(2)
	_, err = st.WaitReplicated(ctx, mark)
	_ = c.Replicas[1].Signal(syscall.SIGCONT)
	if !errors.Is(err, snapshot.ErrNotReplicated) || !strings.Contains(err.Error(), c.Nodes[1].Addr) {
		t.Fatalf("with the replica of %s hung: %v, want ErrNotReplicated naming it", c.Nodes[1].Addr, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		next, err := st.WaitReplicated(ctx, mark)
		if err == nil {
			mark = next
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the replica is back, and still: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	put(3)
	c.Nodes[2].Stop()
	c.Takeover(t, c.Replicas[2])
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, err := st.WaitReplicated(ctx, mark)
		if errors.Is(err, snapshot.ErrMastersChanged) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after a takeover: %v, want ErrMastersChanged", err)
		}
		time.Sleep(50 * time.Millisecond) // the client may still try the dead master
	}
	if mark, err = st.MarkReplication(ctx); err != nil {
		t.Fatal(err)
	}
	put(4)
	if _, err := st.WaitReplicated(ctx, mark); !errors.Is(err, snapshot.ErrNotReplicated) ||
		!strings.Contains(err.Error(), c.Replicas[2].Addr) {
		t.Fatalf("with a promoted master and no replica: %v, want ErrNotReplicated naming %s", err, c.Replicas[2].Addr)
	}
}
