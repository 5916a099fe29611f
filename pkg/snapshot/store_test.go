package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/snapshot/snapshottest"
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

// TestStoreContract runs the store's contract (pkg/snapshot/snapshottest)
// against every deployment, each store under a prefix of its own.
func TestStoreContract(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			var n atomic.Int64
			snapshottest.Run(t, func(t *testing.T) snapshottest.Store {
				st, err := snapshot.NewStore(rdb, fmt.Sprintf("c%d", n.Add(1)))
				if err != nil {
					t.Fatal(err)
				}
				return st
			})
		})
	}
}

var ctx = context.Background()

// snap returns a snapshot of session id in ACTIVE at position (p, o).
func snap(t testing.TB, id string, p int32, o int64) *snapshot.Snapshot {
	t.Helper()
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted} {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1), byte(o)}, id, et, t0.Add(time.Duration(i)*time.Second), fsm.Fields{})
		r.Apply(&s.Session, &e)
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

// TestStoreRetryAfterDroppedConnections: a batch sent again after every
// connection to Redis dropped, as go-redis retries a pipeline, leaves the
// same state on every deployment.
func TestStoreRetryAfterDroppedConnections(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, drop := tg.open(t)
			st, err := snapshot.NewStore(rdb, "retry")
			if err != nil {
				t.Fatal(err)
			}
			var batch []*snapshot.Snapshot
			for i := range 300 {
				batch = append(batch, snap(t, fmt.Sprintf("r-%d", i), 1, int64(10+i)))
			}
			put(t, st, batch...)
			ids := make([]string, len(batch))
			for i, s := range batch {
				ids[i] = s.ID
			}
			before, _ := st.GetMany(ctx, ids)
			countsBefore, _ := st.Count(ctx)
			drop()
			// Every entry loses to the equal stored position.
			if res := put(t, st, batch...); res.Written != 0 || res.Fenced != 300 {
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
		})
	}
}

// TestStoreReloadsScripts: after Redis lost its script cache (a restart,
// SCRIPT FLUSH), the next write loads the scripts again and succeeds.
func TestStoreReloadsScripts(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "flush")
			if err != nil {
				t.Fatal(err)
			}
			put(t, st, snap(t, "f-1", 0, 1))
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
					return c.ScriptFlush(ctx).Err()
				}); err != nil {
					t.Fatal(err)
				}
			} else if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if res := put(t, st, snap(t, "f-1", 0, 2)); res.Written != 1 {
				t.Fatalf("after flush: %+v", res)
			}
		})
	}
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
	if _, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "s", 0, 1))}); !errors.As(err, &se) || se.Op != "put" {
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
		_, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "s", 0, offset))})
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
	if !testwait.Eventually(10*time.Second, func() bool { err = put(3); return err == nil }) {
		t.Fatalf("the replica is back, and still: %v", err)
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
			entries = append(entries, snapshot.NewEntry(snap(t, fmt.Sprintf("s-%d", i), 0, offset)))
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
	testwait.UntilSeen(t, "replication with the replica back", 10*time.Second, func() (bool, string) {
		next, err := st.WaitReplicated(ctx, mark)
		if err != nil {
			return false, err.Error()
		}
		mark = next
		return true, ""
	})

	put(3)
	c.Nodes[2].Stop()
	c.Takeover(t, c.Replicas[2])
	// The client may still try the dead master for a while.
	testwait.UntilSeen(t, "ErrMastersChanged after a takeover", 10*time.Second, func() (bool, string) {
		_, err := st.WaitReplicated(ctx, mark)
		return errors.Is(err, snapshot.ErrMastersChanged), fmt.Sprint(err)
	})
	if mark, err = st.MarkReplication(ctx); err != nil {
		t.Fatal(err)
	}
	put(4)
	if _, err := st.WaitReplicated(ctx, mark); !errors.Is(err, snapshot.ErrNotReplicated) ||
		!strings.Contains(err.Error(), c.Replicas[2].Addr) {
		t.Fatalf("with a promoted master and no replica: %v, want ErrNotReplicated naming %s", err, c.Replicas[2].Addr)
	}
}

// TestResetDeletesOnlyTheStoresKeys fills every kind of key the store
// writes (snapshots, state indexes, children, checkpoints, outbox,
// deadlines, a replication marker) next to a pkg/feed consumer's
// checkpoint and another program's key under the same prefix: Reset
// deletes the store's keys, all of them, and nothing else, also under a
// prefix with glob characters.
func TestResetDeletesOnlyTheStoresKeys(t *testing.T) {
	for _, tg := range targets()[:2] { // redis-server and redis-cluster
		for _, prefix := range []string{"correx", `c[1]*?\`} {
			t.Run(tg.name+"/"+prefix, func(t *testing.T) {
				rdb, _ := tg.open(t)
				st, err := snapshot.NewStore(rdb, prefix)
				if err != nil {
					t.Fatal(err)
				}
				var snaps []*snapshot.Snapshot
				var links []snapshot.ChildLink
				for i := range 40 {
					snaps = append(snaps, snap(t, fmt.Sprintf("x-%d", i), 0, int64(i)))
					links = append(links, snapshot.ChildLink{Parent: fmt.Sprintf("x-%d", i%4), Child: fmt.Sprintf("x-%d", i)})
				}
				put(t, st, snaps...)
				if err := st.AddChildren(ctx, links); err != nil {
					t.Fatal(err)
				}
				if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 40}}, time.Now()); err != nil {
					t.Fatal(err)
				}
				if err := st.PutOutbox(ctx, "events", []snapshot.OutboxBatch{{Partition: 0, Last: 39, Data: []byte("x")}}); err != nil {
					t.Fatal(err)
				}
				armed := map[int32][]snapshot.ArmedDeadline{0: {{SessionID: "x-1", Kind: fsm.TimeoutInactivity, At: t0.UnixNano(), Version: 2}}}
				if _, err := st.ArmDeadlines(ctx, "events", armed); err != nil {
					t.Fatal(err)
				}
				// The key WaitReplicated writes on each master (not written
				// here: it needs replicas).
				if err := rdb.Set(ctx, prefix+":{r0}:replicated", "1", 0).Err(); err != nil {
					t.Fatal(err)
				}
				stored := scanKeys(t, rdb, prefix)

				fc, err := feed.NewConsumer(feed.Redis(rdb), feed.Group("billing"), feed.KeyPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				others := []string{fc.CheckpointKey(0), fc.CheckpointKey(3), prefix + ":billing:state"}
				for _, k := range others {
					if err := rdb.HSet(ctx, k, "next", "17").Err(); err != nil {
						t.Fatal(err)
					}
				}

				n, err := st.Reset(ctx)
				if err != nil {
					t.Fatal(err)
				}
				left := scanKeys(t, rdb, prefix)
				slices.Sort(others)
				if !slices.Equal(left, others) {
					t.Errorf("after reset, keys under %s: %q; want exactly the other programs' %q", prefix, left, others)
				}
				if n != len(stored) {
					t.Errorf("reset reports %d keys deleted, want the store's %d", n, len(stored))
				}
				for _, k := range others {
					if v, err := rdb.HGet(ctx, k, "next").Result(); err != nil || v != "17" {
						t.Errorf("%s after reset: %q %v", k, v, err)
					}
				}
			})
		}
	}
}

// scanKeys returns the keys under prefix on every master, sorted.
func scanKeys(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, "*").Result()
		mu.Lock()
		for _, k := range ks {
			if strings.HasPrefix(k, prefix+":") {
				out = append(out, k)
			}
		}
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestResetCheckpoint puts a partition's checkpoint back to 0 with a rebuild
// mark, over a higher one and over none; checkpoints below the mark keep
// it, and the first at or past it clears it.
func TestResetCheckpoint(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "rc")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			now := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
			read := func() map[int32]snapshot.Checkpoint {
				t.Helper()
				cps, err := st.Checkpoints(ctx, "events")
				if err != nil {
					t.Fatal(err)
				}
				return cps
			}
			if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 900, HighWatermark: 950}}, now); err != nil {
				t.Fatal(err)
			}
			if err := st.ResetCheckpoint(ctx, "events", 0, 950, now); err != nil {
				t.Fatal(err)
			}
			if err := st.ResetCheckpoint(ctx, "events", 1, 40, now); err != nil { // none stored
				t.Fatal(err)
			}
			cps := read()
			if cp := cps[0]; cp.Offset != 0 || cp.RebuildUntil != 950 || cp.HighWatermark != -1 {
				t.Fatalf("partition 0 after the reset: %+v, want offset 0 rebuilt until 950", cp)
			}
			if cp := cps[1]; cp.Offset != 0 || cp.RebuildUntil != 40 {
				t.Fatalf("partition 1 after the reset: %+v, want offset 0 rebuilt until 40", cp)
			}
			// An expected checkpoint from the rebuild moves on; the mark stays
			// below its offset and goes at it.
			prev, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{
				{Partition: 0, Offset: 500, HighWatermark: 960, Expected: true},
				{Partition: 1, Offset: 40, HighWatermark: 40, Expected: true},
			}, now)
			if err != nil {
				t.Fatal(err)
			}
			if prev[0] != (snapshot.PriorCheckpoint{Stored: true, Offset: 0}) {
				t.Fatalf("prior of partition 0: %+v, want the reset's 0", prev[0])
			}
			cps = read()
			if cp := cps[0]; cp.Offset != 500 || cp.RebuildUntil != 950 {
				t.Fatalf("partition 0 during the rebuild: %+v, want offset 500 rebuilt until 950", cp)
			}
			if cp := cps[1]; cp.Offset != 40 || cp.RebuildUntil != 0 {
				t.Fatalf("partition 1 at its mark: %+v, want offset 40 and no mark", cp)
			}
			if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 951, HighWatermark: 960, Expected: true, Known: 500}}, now); err != nil {
				t.Fatal(err)
			}
			if cp := read()[0]; cp.Offset != 951 || cp.RebuildUntil != 0 {
				t.Fatalf("partition 0 past its mark: %+v, want offset 951 and no mark", cp)
			}
			if err := st.ResetCheckpoint(ctx, "events", 0, 0, now); err == nil {
				t.Fatal("a reset to offset 0 was accepted")
			}
		})
	}
}
