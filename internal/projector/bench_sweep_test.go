package projector

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkSweepHuge archives one session of 200,000 events
// (BENCH_HUGE_EVENTS sets another count) from a kfake log into a file://
// bucket and reports the heap it held above what was live before
// (peak-live-MiB, measureHeap; allocated-MiB/op besides).
// The baseline, in the same run, is the whole-history path the sweep had:
// one read of the partition holding every entry (Histories with no
// budget), then the object written from the slice (Put). The sweep's path
// is sweeper.archive: the history streamed from the log into
// archive.Remote.PutStream. "read" runs measure the log read alone (the
// entries counted and dropped), which is what this package holds; the
// "archive" runs add what the archive's writer holds, which is PutStream's
// own business. Each run reads back what it wrote, and fails if the object
// is not the whole history or the sweep's run did not stream it.
func BenchmarkSweepHuge(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("BENCH_HUGE_EVENTS")); err == nil && v > 0 {
		n = v
	}
	c := kafkatest.Start(b)
	brokers := c.ListenAddrs()
	sn := produceHuge(b, brokers, n)
	reader := &sessionlog.Reader{Kafka: kafka.Config{Brokers: brokers, ClientID: "bench-sweep"}, Topic: topic}
	want := int(sn.Counters.Events)

	whole := func(ctx context.Context, fn func(h sessionlog.History) error) error {
		return reader.Histories(ctx, 0, []*snapshot.Snapshot{sn}, math.MaxInt64, func(_ *snapshot.Snapshot, h sessionlog.History) error {
			if h.Streamed() {
				b.Fatal("the baseline's history was streamed, not held")
			}
			return fn(h)
		})
	}
	b.Run("read/whole", func(b *testing.B) {
		measureHeap(b, func() {
			if err := whole(ctx, func(h sessionlog.History) error { return countEntries(b, h, want) }); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("read/streamed", func(b *testing.B) {
		measureHeap(b, func() {
			err := reader.Histories(ctx, 0, []*snapshot.Snapshot{sn}, 0, func(_ *snapshot.Snapshot, h sessionlog.History) error {
				if !h.Streamed() {
					b.Fatal("the history was held, not streamed")
				}
				return countEntries(b, h, want)
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("archive/whole", func(b *testing.B) {
		bucket := openBenchBucket(b)
		measureHeap(b, func() {
			err := whole(ctx, func(h sessionlog.History) error {
				return bucket.Put(ctx, &archive.Object{Snapshot: sn, History: h.Entries, ArchivedAt: time.Now()})
			})
			if err != nil {
				b.Fatal(err)
			}
		})
		checkHugeObject(b, bucket, sn, want)
	})
	b.Run("archive/streamed", func(b *testing.B) {
		bucket := openBenchBucket(b)
		s := &sweeper{bucket: bucket, reader: reader, clock: newManualClock(time.Now()), budget: sessionlog.DefaultHistoryBudget}
		measureHeap(b, func() {
			if err := s.archive(ctx, 0, []*snapshot.Snapshot{sn}, func() {}); err != nil {
				b.Fatal(err)
			}
		})
		checkHugeObject(b, bucket, sn, want)
	})
}

// produceHuge produces one session of n events (created, started, n-3
// model turns, completed) to a new one-partition topic and returns its
// snapshot as the projector folds it.
func produceHuge(b *testing.B, brokers []string, n int) *snapshot.Snapshot {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(10_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 1); err != nil {
		b.Fatal(err)
	}
	ev := eventsOf(0xb5)
	var sn snapshot.Snapshot
	var red fsm.Reducer
	var mu sync.Mutex
	var perr error
	for i := range n {
		typ := fsm.ModelRequested
		switch i {
		case 0:
			typ = fsm.SessionCreated
		case 1:
			typ = fsm.SessionStarted
		case n - 1:
			typ = fsm.SessionCompleted
		}
		e := ev("huge", typ, fsm.Fields{Goal: "g"})
		cl.Produce(ctx, &kgo.Record{Key: []byte(e.SessionID), Value: fsm.AppendRecord(nil, &e), Partition: 0}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				perr = err
				return
			}
			if r.Offset != int64(i) {
				perr = strconv.ErrRange
			}
		})
		sn.Fold(&red, &e, snapshot.Position{Partition: 0, Offset: int64(i)})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if perr != nil {
		b.Fatalf("producing the session: %v (a record not at the offset folded)", perr)
	}
	if !sn.Terminal() || sn.Counters.Events != uint64(n) {
		b.Fatalf("the huge session folded to %s with %d events, want ended with %d", sn.State, sn.Counters.Events, n)
	}
	return &sn
}

func openBenchBucket(b *testing.B) *archive.Remote {
	b.Helper()
	r, err := archive.StartRemote(ctx, "file://"+b.TempDir(), archive.RemoteOptions{Timeout: 10 * time.Minute, Log: testLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !r.Reachable() {
		if time.Now().After(deadline) {
			b.Fatal(r.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// countEntries consumes h and fails unless it has want entries in order.
func countEntries(b *testing.B, h sessionlog.History, want int) error {
	got := 0
	err := h.Each(func(e wire.HistoryEntry) error {
		got++
		if e.Version == 0 {
			b.Fatalf("entry %d has no version", got)
		}
		return nil
	})
	if err == nil && got != want {
		b.Fatalf("%d entries read, want %d", got, want)
	}
	return err
}

// checkHugeObject reads the archived object back and fails unless it is
// sn's, complete, with want entries ending at sn's position.
func checkHugeObject(b *testing.B, bucket *archive.Remote, sn *snapshot.Snapshot, want int) {
	b.Helper()
	o, err := bucket.Get(ctx, sn.ID)
	if err != nil {
		b.Fatal(err)
	}
	if !o.HistoryComplete() || len(o.History) != want || o.History[want-1].Position != sn.Position {
		b.Fatalf("archived: complete %v, %d entries; want complete, %d entries ending at %v", o.HistoryComplete(), len(o.History), want, sn.Position)
	}
}

// measureHeap runs f b.N times and reports the largest live heap above
// what was live before a run (peak-live-MiB: the heap the collector
// marked live, read every millisecond, with GOGC at 10 during the runs so
// that it collects often and what it reports is what f holds, not the
// garbage a default pacing lets pile up before a collection) and the
// bytes allocated per run.
func measureHeap(b *testing.B, f func()) {
	b.Helper()
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	read := func() (live, allocs uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var peak, allocated uint64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		base, a0 := read()
		stop, done := make(chan struct{}), make(chan uint64)
		go func() {
			var top uint64
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				if h, _ := read(); h > top {
					top = h
				}
				select {
				case <-stop:
					done <- top
					return
				case <-t.C:
				}
			}
		}()
		b.StartTimer()
		f()
		b.StopTimer()
		runtime.GC() // the live heap at f's end, if no collection ran since its peak
		close(stop)
		if top := <-done; top > base {
			peak = max(peak, top-base)
		}
		_, a1 := read()
		allocated += a1 - a0
		b.StartTimer()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-live-MiB")
	b.ReportMetric(float64(allocated)/float64(b.N)/(1<<20), "allocated-MiB/op")
}
