package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/snapshot/snapshottest"
	"github.com/redis/go-redis/v9"
)

// targets are the Redis deployments the contract suite runs against.
func targets() []redistest.Deployment { return redistest.Deployments() }

// TestStoreContract runs the store's contract (pkg/snapshot/snapshottest)
// against every deployment, each store under a prefix of its own.
func TestStoreContract(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.Name, func(t *testing.T) {
			rdb, _ := tg.Open(t)
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

// TestStoreSurface holds the public store to its contract: the exported
// methods of *snapshot.Store are those of snapshottest.Store, which Run
// checks, the Redis store's setup, the read of the verifiers' report
// the query service answers /v1/verify with, and the announcements of
// checkpoint writes its waiting reads wake on (Progress), nothing more.
// What the projector keeps beside the snapshots is
// internal/projector/projstore's.
func TestStoreSurface(t *testing.T) {
	setup := []string{"Ping", "Progress", "VerifyReport", "WaitReplicas", "WithTimeoutDefaults"}
	contract := reflect.TypeFor[snapshottest.Store]()
	var want []string
	for i := range contract.NumMethod() {
		want = append(want, contract.Method(i).Name)
	}
	want = append(want, setup...)
	slices.Sort(want)
	store := reflect.TypeFor[*snapshot.Store]()
	var got []string
	for i := range store.NumMethod() {
		got = append(got, store.Method(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("exported methods of *snapshot.Store:\n got %v\nwant %v (snapshottest.Store and %v)", got, want, setup)
	}
}

// TestProgressAnnouncesCheckpointWrites: every SaveCheckpoints announces
// the partitions it wrote to the subscribers of the topic's progress, on
// every deployment, and only to those of that topic.
func TestProgressAnnouncesCheckpointWrites(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.Name, func(t *testing.T) {
			rdb, _ := tg.Open(t)
			st, err := snapshot.NewStore(rdb, "pr")
			if err != nil {
				t.Fatal(err)
			}
			sub, cancel := context.WithCancel(t.Context())
			progress, err := st.Progress(sub, "ev")
			if err != nil {
				t.Fatal(err)
			}
			other, err := st.Progress(sub, "other")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.SaveCheckpoints(ctx, "ev", []snapshot.Checkpoint{{Partition: 3, Offset: 7}, {Partition: 11, Offset: 2}}, t0); err != nil {
				t.Fatal(err)
			}
			var got []int32
			for len(got) < 2 {
				select {
				case p := <-progress:
					got = append(got, p)
				case <-time.After(10 * time.Second):
					t.Fatalf("announced %v within 10 s, want [3 11]", got)
				}
			}
			if !slices.Equal(got, []int32{3, 11}) {
				t.Fatalf("announced %v, want [3 11]", got)
			}
			select {
			case p := <-other:
				t.Fatalf("another topic's subscriber was told of partition %d", p)
			case <-time.After(100 * time.Millisecond):
			}
			cancel()
			for range progress { // closed once the context ends
			}
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
		t.Run(tg.Name, func(t *testing.T) {
			rdb, drop := tg.Open(t)
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
		t.Run(tg.Name, func(t *testing.T) {
			rdb, _ := tg.Open(t)
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
}
