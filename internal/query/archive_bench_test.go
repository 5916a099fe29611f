package query_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// BenchmarkArchivedRead reads closed sessions through the HTTP handler
// (GET /v1/sessions/{id}, one client, 2,000 reads in random order) twice in
// one run: from Redis (the baseline: the snapshots stored there), and from
// the archive (the same sessions absent from Redis, each an object holding
// its snapshot and whole history, in a bucket of a real S3-compatible
// server), and reports each one's p50 and p99 in
// milliseconds. Target (DESIGN 12.4): an archived read's p99 within 50 ms.
func BenchmarkArchivedRead(b *testing.B) {
	srv := redistest.Start(b)
	live, err := snapshot.NewStore(srv.Client(b), "bench-live")
	if err != nil {
		b.Fatal(err)
	}
	gone, err := snapshot.NewStore(srv.Client(b), "bench-gone") // holds none of them
	if err != nil {
		b.Fatal(err)
	}
	arch, err := archive.Open(ctx, benchArchiveURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer arch.Close()
	g := workload.New(11, workload.Options{})
	var entries []snapshot.Entry
	var ids []string
	for i, events := range g.Sessions("arch", 4000, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)) {
		var s snapshot.Snapshot
		var r fsm.Reducer
		var hist []wire.HistoryEntry
		for j := range events {
			pos := snapshot.Position{Offset: int64(i*100 + j)}
			o, _ := s.Fold(&r, &events[j], pos)
			hist = append(hist, wire.HistoryEntry{Version: s.Version, Position: pos, EventID: events[j].ID.String(),
				Type: events[j].TypeName(), OccurredAt: events[j].OccurredAt, Outcome: o.Result.String(), To: o.To.String()})
		}
		if !s.Terminal() {
			continue
		}
		if err := arch.Put(ctx, &archive.Object{Snapshot: &s, History: hist, ArchivedAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
		entries = append(entries, snapshot.NewEntry(&s))
		ids = append(ids, s.ID)
		if len(ids) == 1000 {
			break
		}
	}
	if len(ids) < 100 {
		b.Fatalf("only %d closed sessions in the workload", len(ids))
	}
	if _, err := live.PutBatch(ctx, entries); err != nil {
		b.Fatal(err)
	}
	read := func(b *testing.B, store query.Store, archived bool) {
		hs := httptest.NewServer(query.NewHandler(store, topic, nil, query.Options{Archive: arch}))
		defer hs.Close()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		for b.Loop() {
			var lat []time.Duration
			for n := range 2000 {
				id := ids[(n*7919)%len(ids)]
				start := time.Now()
				resp, err := client.Get(hs.URL + "/v1/sessions/" + id)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode != http.StatusOK || archived != bytes.HasSuffix(bytes.TrimSpace(body), []byte(`,"archived":true}`)) {
					b.Fatalf("read %s: %d %s", id, resp.StatusCode, body)
				}
			}
			slices.Sort(lat)
			p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(p(0.50), "p50-ms")
			b.ReportMetric(p(0.99), "p99-ms")
		}
	}
	b.Run("redis", func(b *testing.B) { read(b, live, false) })
	b.Run("archive", func(b *testing.B) { read(b, gone, true) })
}

// benchArchiveURL is the bucket the benchmark archives into: one of a real
// S3-compatible server (internal/s3test, versitygw), so that an archived
// read pays what it pays in production (an HTTP listing and an object
// read). Without the server the benchmark is skipped
// (CORREX_REQUIRE_S3=1 fails it instead).
func benchArchiveURL(b *testing.B) string {
	return s3test.StartBucket(b)
}
