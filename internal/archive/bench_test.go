package archive

import (
	"context"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/wire"
)

// BenchmarkPutHuge writes the object of a session of 125,000 events (about
// 24 MiB) into a file:// bucket, twice in one run: whole, as format 1 was
// written (the history held in memory, encoded as one document, written
// at once: the baseline), and streamed, PutStream with the entries made
// as they are asked for (as a log read makes them). It reports what
// matters for the projector that writes it, not the time: the MiB
// allocated per object (alloc-MiB/op) and the heap's peak over the heap
// before the write (peak-heap-MiB).
func BenchmarkPutHuge(b *testing.B) {
	const n = 125_000
	snap := terminal(b)[0]
	entry := func(i int) wire.HistoryEntry { return history(1, 2*int64(i))[0] }
	ctx := context.Background()
	s, err := Open(ctx, "file://"+filepath.ToSlash(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	key := Key(snap.ID, snap.State.String(), EndedAt(snap))
	measure := func(b *testing.B, put func() int64) {
		var allocs, peak, size float64
		for b.Loop() {
			runtime.GC()
			stop := watchHeap()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			base := heapNow()
			size = float64(put())
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			allocs += float64(after.TotalAlloc - before.TotalAlloc)
			peak = max(peak, float64(stop()-base))
		}
		b.ReportMetric(allocs/float64(b.N)/(1<<20), "alloc-MiB/op")
		b.ReportMetric(peak/(1<<20), "peak-heap-MiB")
		b.ReportMetric(size/(1<<20), "object-MiB")
		b.ReportMetric(0, "ns/op") // the time is not what this measures
	}
	b.Run("whole", func(b *testing.B) {
		measure(b, func() int64 {
			h := make([]wire.HistoryEntry, n)
			for i := range h {
				h[i] = entry(i)
			}
			enc, err := Encode(&Object{Snapshot: snap, History: h, ArchivedAt: time.Unix(1, 0)})
			if err != nil {
				b.Fatal(err)
			}
			writeObject(b, s.bucket, key, enc) // synced on Close, as Put is
			return int64(len(enc))
		})
	})
	b.Run("stream", func(b *testing.B) {
		measure(b, func() int64 {
			err := s.PutStream(ctx, &Object{Snapshot: snap, ArchivedAt: time.Unix(1, 0)}, func(yield func(wire.HistoryEntry) error) error {
				for i := range n {
					if err := yield(entry(i)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			_, size, err := s.find(ctx, snap.ID)
			if err != nil {
				b.Fatal(err)
			}
			return size
		})
	})
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapNow is the bytes of the heap's objects, live or not yet swept.
func heapNow() int64 {
	s := []metrics.Sample{{Name: heapSample[0].Name}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// watchHeap samples the heap every half millisecond until the function it
// returns is called, which returns the highest sample.
func watchHeap() func() int64 {
	var mu sync.Mutex
	peak := heapNow()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(500 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				v := heapNow()
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	return func() int64 {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return max(peak, heapNow())
	}
}
