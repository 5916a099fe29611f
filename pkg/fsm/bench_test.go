package fsm_test

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
)

// BenchmarkReducer folds a realistic interleaved stream (2,000 sessions, 5%
// invalid and 5% duplicate events mixed in) and reports the cost per event.
// Each iteration starts every session from scratch, so the allocations of
// growing a session's history are counted.
func BenchmarkReducer(b *testing.B) {
	g := workload.New(1, workload.Options{InvalidShare: 0.05, DuplicateShare: 0.05})
	sessions := g.Sessions("s", 2000, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC))
	foldStream(b, g.Interleave(sessions))
}

// foldStream folds stream, each session from scratch at each iteration,
// and reports the cost per event.
func foldStream(b *testing.B, stream []fsm.Event) {
	index := map[string]int{}
	owner := make([]int, len(stream))
	for i := range stream {
		id, ok := index[stream[i].SessionID]
		if !ok {
			id = len(index)
			index[stream[i].SessionID] = id
		}
		owner[i] = id
	}
	state := make([]fsm.Session, len(index))
	var r fsm.Reducer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		clear(state)
		for i := range stream {
			r.Apply(&state[owner[i]], &stream[i])
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	events := float64(b.N) * float64(len(stream))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/events, "allocs/event")
	b.ReportMetric(events/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReducerPinned is BenchmarkReducer over a pinned stream: the
// events the workload generator made for it at commit 963f0cc, the first
// release (500 sessions, 10,775 events, 5% invalid and 5% duplicate),
// stored as records in testdata/reducer-workload-963f0cc.bin.gz (each an
// unsigned varint length, then the record). The generator has since
// learnt more of the lifecycle, so BenchmarkReducer's events are not
// those of earlier releases; these stay the same, and the reducer of any
// commit can be timed on them: check that commit out, copy this file's
// benchmark and the stream there, and alternate the two runs.
func BenchmarkReducerPinned(b *testing.B) {
	foldStream(b, pinnedStream(b, "testdata/reducer-workload-963f0cc.bin.gz"))
}

// pinnedStream reads the records of a pinned stream (gzip; each record an
// unsigned varint length, then the record).
func pinnedStream(b *testing.B, path string) []fsm.Event {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReader(zr)
	var stream []fsm.Event
	for {
		n, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return stream
		}
		if err != nil {
			b.Fatal(err)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(r, rec); err != nil {
			b.Fatal(err)
		}
		var e fsm.Event
		if err := fsm.DecodeRecord(rec, &e); err != nil {
			b.Fatalf("record %d: %v", len(stream), err)
		}
		stream = append(stream, e)
	}
}

// BenchmarkDecodeRecord decodes the records of a realistic stream (the
// projector's first step for every record) and reports the cost per record.
func BenchmarkDecodeRecord(b *testing.B) {
	g := workload.New(1, workload.Options{})
	stream := g.Interleave(g.Sessions("s", 500, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
	recs := make([][]byte, len(stream))
	for i := range stream {
		recs[i] = fsm.AppendRecord(nil, &stream[i])
	}
	var e fsm.Event
	for b.Loop() {
		for _, r := range recs {
			if err := fsm.DecodeRecord(r, &e); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}
