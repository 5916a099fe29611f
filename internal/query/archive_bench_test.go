package query_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"runtime"
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
// milliseconds. Target (docs/guarantees.md, CORREX_ARCHIVE_URL): an
// archived read's p99 within 50 ms.
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

// BenchmarkArchivedReadHuge reads one huge archived session (150,000
// events, a 30 MiB object) through the HTTP handler, archived in
// format 1 (one JSON document, the baseline, as objects were written
// before) and in format 2 (read by range), in one run, from a bucket of a
// real S3-compatible server. For each it reports the p50 of a GET
// /v1/sessions/{id} with no head kept (get-p50-ms), of a history page
// after a cursor with the head kept as paging keeps it (page-p50-ms), the
// MiB allocated per read in the process (server and client), and the MiB
// read from the archive per read.
func BenchmarkArchivedReadHuge(b *testing.B) {
	url := benchArchiveURL(b)
	arch, err := archive.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer arch.Close()
	srv := redistest.Start(b)
	gone, err := snapshot.NewStore(srv.Client(b), "bench-huge") // holds neither
	if err != nil {
		b.Fatal(err)
	}
	const events = 150_000
	s1, h1 := hugeSession("huge:format1", 0, events)
	putWhole(b, url, &archive.Object{Snapshot: s1, History: h1, ArchivedAt: time.Now()})
	s2, h2 := hugeSession("huge:format2", 0, events)
	if err := arch.Put(ctx, &archive.Object{Snapshot: s2, History: h2, ArchivedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	h1, h2 = nil, nil
	read := func(b *testing.B, id string, reads int) {
		cold := httptest.NewServer(query.NewHandler(gone, topic, nil, query.Options{Archive: arch, ArchiveHeadCache: -1}))
		defer cold.Close()
		warm := httptest.NewServer(query.NewHandler(gone, topic, nil, query.Options{Archive: arch}))
		defer warm.Close()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		get := func(url string) []byte {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d %.300s", url, resp.StatusCode, body)
			}
			return body
		}
		var first wire.HistoryPage
		if err := json.Unmarshal(get(warm.URL+"/v1/sessions/"+id+"/history"), &first); err != nil || first.Next == nil {
			b.Fatalf("first page: %v", err)
		}
		page := warm.URL + "/v1/sessions/" + id + "/history?after=" + neturl.QueryEscape(*first.Next)
		measure := func(url string) (p50 time.Duration, allocMiB, readMiB float64) {
			var lat []time.Duration
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			bytes := arch.BytesRead()
			for range reads {
				start := time.Now()
				get(url)
				lat = append(lat, time.Since(start))
			}
			runtime.ReadMemStats(&after)
			slices.Sort(lat)
			return lat[len(lat)/2], float64(after.TotalAlloc-before.TotalAlloc) / float64(reads) / (1 << 20),
				float64(arch.BytesRead()-bytes) / float64(reads) / (1 << 20)
		}
		for b.Loop() {
			gp, ga, gr := measure(cold.URL + "/v1/sessions/" + id)
			pp, pa, pr := measure(page)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(gp), "get-p50-ms")
			b.ReportMetric(ga, "get-alloc-MiB")
			b.ReportMetric(gr, "get-read-MiB")
			b.ReportMetric(ms(pp), "page-p50-ms")
			b.ReportMetric(pa, "page-alloc-MiB")
			b.ReportMetric(pr, "page-read-MiB")
			b.ReportMetric(0, "ns/op")
		}
	}
	b.Run("format1", func(b *testing.B) { read(b, s1.ID, 5) })
	b.Run("format2", func(b *testing.B) { read(b, s2.ID, 50) })
}
