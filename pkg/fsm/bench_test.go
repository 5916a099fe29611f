package fsm_test

import (
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
	index := map[string]int{}
	for i, s := range sessions {
		index[s[0].SessionID] = i
	}
	stream := g.Interleave(sessions)
	owner := make([]int, len(stream))
	for i := range stream {
		owner[i] = index[stream[i].SessionID]
	}
	state := make([]fsm.Session, len(sessions))
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
