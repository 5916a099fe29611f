package projstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// targets are the Redis deployments the tests run against.
func targets() []redistest.Deployment { return redistest.Deployments() }

var ctx = context.Background()

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

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

func put(t *testing.T, st *projstore.Store, snaps ...*snapshot.Snapshot) snapshot.PutResult {
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

func TestStoreErrorsWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	st, _ := projstore.New(c, "down")
	srv.Stop()
	var se *snapshot.StoreError
	if _, err := st.DeletePartition(ctx, 0); !errors.As(err, &se) || se.Op != "delete" {
		t.Errorf("delete partition: %v", err)
	}
}

// TestWaitReplicatedSingleServer: on a single server WaitReplicated does
// nothing, even with WaitReplicas: the snapshot writes wait there.
func TestWaitReplicatedSingleServer(t *testing.T) {
	st, _ := projstore.New(redistest.Start(t).Client(t), "wait")
	if err := st.WaitReplicas(1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if m, err := st.MarkReplication(ctx); m != nil || err != nil {
		t.Errorf("MarkReplication on a single server: %v %v, want nothing done", m, err)
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
	st, _ := projstore.New(cc, "wait")
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
		return errors.Is(err, projstore.ErrMastersChanged), fmt.Sprint(err)
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
			t.Run(tg.Name+"/"+prefix, func(t *testing.T) {
				rdb, _ := tg.Open(t)
				st, err := projstore.New(rdb, prefix)
				if err != nil {
					t.Fatal(err)
				}
				var snaps []*snapshot.Snapshot
				var links []projstore.ChildLink
				for i := range 40 {
					snaps = append(snaps, snap(t, fmt.Sprintf("x-%d", i), 0, int64(i)))
					links = append(links, projstore.ChildLink{Parent: fmt.Sprintf("x-%d", i%4), Child: fmt.Sprintf("x-%d", i)})
				}
				put(t, st, snaps...)
				if err := st.AddChildren(ctx, links); err != nil {
					t.Fatal(err)
				}
				if _, err := st.SaveCheckpoints(ctx, "events", []snapshot.Checkpoint{{Partition: 0, Offset: 40}}, time.Now()); err != nil {
					t.Fatal(err)
				}
				if err := st.PutOutbox(ctx, "events", []projstore.OutboxBatch{{Partition: 0, Last: 39, Data: []byte("x")}}); err != nil {
					t.Fatal(err)
				}
				armed := map[int32][]projstore.ArmedDeadline{0: {{SessionID: "x-1", Kind: fsm.TimeoutInactivity, At: t0.UnixNano(), Version: 2}}}
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
		t.Run(tg.Name, func(t *testing.T) {
			rdb, _ := tg.Open(t)
			st, err := projstore.New(rdb, "rc")
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
