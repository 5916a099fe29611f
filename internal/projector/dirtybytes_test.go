package projector

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// largeFields are a SessionCreated's fields that make its snapshot about
// 8 KB: a 3 KB goal, 3 KB of metadata, 8 labels of 200 bytes.
func largeFields(i int) fsm.Fields {
	f := fsm.Fields{Goal: strings.Repeat("goal "+strconv.Itoa(i)+" ", 3000)[:3000],
		Metadata: []byte(`{"m":"` + strings.Repeat("x", 3000) + `"}`)}
	for k := range 8 {
		f.Labels = append(f.Labels, fsm.Label{Key: "k" + strconv.Itoa(k), Value: strings.Repeat(strconv.Itoa(k), 200)})
	}
	return f
}

// liveHeapPeak samples the live heap (what the collector marked) every
// millisecond, with GOGC at 10 so that it collects often, until stop is
// called, which returns the peak above the live heap when it started.
func liveHeapPeak(t *testing.T, profile string) (stop func() uint64) {
	t.Helper()
	old := debug.SetGCPercent(10)
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	quit, done := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if h := s[0].Value.Uint64(); h > top {
				if profile != "" && h > top+(8<<20) {
					if f, err := os.Create(profile); err == nil {
						pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}
				top = h
			}
			select {
			case <-quit:
				done <- top
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(quit)
		top := <-done
		debug.SetGCPercent(old)
		if top < base {
			return 0
		}
		return top - base
	}
}

// batchBytes is a Store that records the largest batch of snapshot
// encodings it was handed.
type batchBytes struct {
	Store
	mu              sync.Mutex
	largest, writes int
}

func (b *batchBytes) PutBatch(ctx context.Context, entries []snapshot.Entry) (snapshot.PutResult, error) {
	n := 0
	for _, e := range entries {
		n += len(e.Data)
	}
	b.mu.Lock()
	b.largest = max(b.largest, n)
	b.writes++
	b.mu.Unlock()
	return b.Store.PutBatch(ctx, entries)
}

// TestManyLargeDirtySnapshotsAreWrittenInBoundedBatches: a client that
// touches 6,000 sessions of 8 KB at once (their creations, one poll of
// MaxPollRecords) makes batches of at most FlushBytes of encodings (a
// quarter of CacheBytes, 8 MiB here) plus one snapshot, never one batch
// of all 6,000 snapshots that FlushSize (20,000) allows; every session is
// stored. Before the byte bound the batch was the whole 6,000, 30 MiB of
// encodings; the live heap above what was live before the projector
// started is logged (kfake's copy of the changelog and the poll's fetches
// are in it: the batch's bytes are what the test bounds).
func TestManyLargeDirtySnapshotsAreWrittenInBoundedBatches(t *testing.T) {
	t.Parallel() // its own broker and redis-server
	e := newEnv(t, 4)
	ev := eventsOf(0xd1)
	const n = 6000
	events := make([]fsm.Event, 0, n)
	ids := make([]string, 0, n)
	for i := range n {
		ids = append(ids, "big-"+strconv.Itoa(i))
		events = append(events, ev(ids[i], fsm.SessionCreated, largeFields(i)))
	}
	e.produce(events)
	events = nil
	cfg := e.config("a")
	d := DefaultConfig()
	cfg.FlushSize, cfg.CacheSize, cfg.MaxPollRecords = d.FlushSize, d.CacheSize, d.MaxPollRecords
	cfg.FlushInterval, cfg.MaxFlushInterval = d.FlushInterval, d.MaxFlushInterval
	cfg.CacheBytes, cfg.ChangelogEnabled, cfg.ChangeFeed = 32<<20, true, true
	limit := cfg.flushBytes()
	store := &batchBytes{Store: e.store("big")}
	stop := liveHeapPeak(t, os.Getenv("CORREX_DIRTY_PROFILE"))
	p := New(cfg, store, WithLogger(testLog()))
	c, cancel := contextWithCancel()
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	defer r.halt()
	e.waitCaughtUp("big", 120*time.Second)
	peak := stop()
	store.mu.Lock()
	largest, writes := store.largest, store.writes
	store.mu.Unlock()
	t.Logf("%d batches, the largest %.1f MiB of encodings (bound %.1f MiB); live heap peak %.1f MiB above the start",
		writes, float64(largest)/(1<<20), float64(limit)/(1<<20), float64(peak)/(1<<20))
	full := fullSnapshot()
	one := len(full.AppendBinary(nil))
	if largest > limit+one {
		t.Fatalf("a batch of %d bytes of encodings, want at most FlushBytes (%d) and one snapshot (%d)", largest, limit, one)
	}
	for i, s := range e.storedSessions("big", ids) {
		if s == nil {
			t.Fatalf("%s not stored", ids[i])
		}
	}
}
