package query

import (
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkWatchChangeData measures what the watcher does with each record
// of the change feed before any subscriber sees it, as it does now (decode
// for the filters, then the record's own bytes copied) and as it did
// (decode, then the change encoded again), in one run: reencoded/record is
// the ratio of their times.
func BenchmarkWatchChangeData(b *testing.B) {
	c := feed.Change{SessionID: "acme:run-1", Version: 7, Position: feed.Position{Partition: 3, Offset: 123456},
		EventID: "0193a000-0000-7000-8000-000000000042", Type: "SessionPaused",
		OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), Outcome: feed.Applied, From: "ACTIVE", To: "PAUSED",
		Labels: map[string]string{"team": "core", "env": "prod", "app/tier": "web"}, CorrelationID: "c-42"}
	rec := &kgo.Record{Partition: 3, Offset: 99, Value: c.AppendJSON(nil)}
	w := NewWatcher(kafka.Config{}, "events", WatchOptions{})
	var record, reencoded time.Duration
	for b.Loop() {
		start := time.Now()
		ch := w.decode(rec, 12)
		_ = ch.wireBytes(true)
		mid := time.Now()
		ch = w.decode(rec, 12)
		_ = ch.c.AppendJSON(nil)
		end := time.Now()
		record += mid.Sub(start)
		reencoded += end.Sub(mid)
	}
	b.ReportMetric(float64(record.Nanoseconds())/float64(b.N), "record-ns/change")
	b.ReportMetric(float64(reencoded.Nanoseconds())/float64(b.N), "reencoded-ns/change")
	b.ReportMetric(float64(reencoded)/float64(record), "reencoded/record")
}
