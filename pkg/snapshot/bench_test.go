package snapshot_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// benchSnapshots folds n realistic sessions.
func benchSnapshots(n int) []*snapshot.Snapshot {
	g := workload.New(3, workload.Options{InvalidShare: 0.05, DuplicateShare: 0.05})
	out := make([]*snapshot.Snapshot, n)
	for i, events := range g.Sessions("bench", n, t0) {
		out[i] = fold(events, int64(i)*100)
	}
	return out
}

// BenchmarkCodec measures the stored binary format against the complete JSON
// form, per snapshot, for encoding and decoding.
func BenchmarkCodec(b *testing.B) {
	snaps := benchSnapshots(256)
	type codec struct {
		name   string
		encode func(*snapshot.Snapshot) []byte
	}
	codecs := []codec{
		{"binary", func(s *snapshot.Snapshot) []byte { return s.AppendBinary(nil) }},
		{"json", func(s *snapshot.Snapshot) []byte { b, _ := snapshot.EncodeJSON(s); return b }},
	}
	for _, c := range codecs {
		size := 0
		encoded := make([][]byte, len(snaps))
		for i, s := range snaps {
			encoded[i] = c.encode(s)
			size += len(encoded[i])
		}
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = c.encode(snaps[i%len(snaps)])
				i++
			}
			b.ReportMetric(float64(size)/float64(len(snaps)), "bytes/snapshot")
		})
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			var s snapshot.Snapshot
			i := 0
			for b.Loop() {
				if err := snapshot.Decode(encoded[i%len(encoded)], &s); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkStorePut compares batched fenced puts (PutBatch) with plain
// pipelined SETs of the same bytes to the same keys, against the same
// redis-server in the same run, alternating batch by batch. It reports both
// rates and fenced/set, the share of the plain rate that fencing keeps.
func BenchmarkStorePut(b *testing.B) {
	const batch = 1000
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4})
	b.Cleanup(func() { _ = rdb.Close() })
	st, err := snapshot.NewStore(rdb, "bench")
	if err != nil {
		b.Fatal(err)
	}
	snaps := benchSnapshots(batch)
	entries := make([]snapshot.Entry, batch)
	keys := make([]string, batch)
	for i, s := range snaps {
		entries[i] = snapshot.NewEntry(s)
		keys[i] = fmt.Sprintf("plain:{b%03d}:s:%s", snapshot.Bucket(s.ID), s.ID)
	}
	var fenced, plain time.Duration
	round := int64(0)
	for b.Loop() {
		round++
		for i := range entries { // a newer position each round, so every put writes
			binary.BigEndian.PutUint64(entries[i].Data[5:13], uint64(round*1_000_000+int64(i)))
		}
		start := time.Now()
		res, err := st.PutBatch(ctx, entries)
		if err != nil || res.Written != batch {
			b.Fatalf("put: %+v %v", res, err)
		}
		fenced += time.Since(start)

		start = time.Now()
		pipe := rdb.Pipeline()
		for i := range entries {
			pipe.Set(ctx, keys[i], entries[i].Data, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(start)
	}
	n := float64(b.N * batch)
	fencedRate, plainRate := n/fenced.Seconds(), n/plain.Seconds()
	b.ReportMetric(fencedRate, "fenced-snapshots/s")
	b.ReportMetric(plainRate, "set-snapshots/s")
	b.ReportMetric(fencedRate/plainRate, "fenced/set")
}
