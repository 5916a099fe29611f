package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
)

// BenchmarkRetentionSoak runs the whole pipeline under a steady workload of
// sessions that open and close (BENCH_SOAK_RATE sessions/s, default 200,
// each created, started and completed 5 s later) with closed sessions
// retained 30 s and then archived (CORREX_RETAIN_CLOSED, a file:// archive),
// for BENCH_SOAK_MINUTES (default 10), sampling Redis used_memory every
// 15 s. It prints the curve and reports the growth of used_memory over the
// second half: the mean of the last three samples against the mean of the
// three around the middle, in percent (target: within 10). Run it once:
// go test -run='^$' -bench=RetentionSoak -benchtime=1x -timeout 30m ./internal/e2e.
func BenchmarkRetentionSoak(b *testing.B) {
	minutes, _ := strconv.ParseFloat(envOr("BENCH_SOAK_MINUTES", "10"), 64)
	rate, _ := strconv.Atoi(envOr("BENCH_SOAK_RATE", "200"))
	if minutes <= 0 || rate <= 0 {
		b.Fatal("BENCH_SOAK_MINUTES and BENCH_SOAK_RATE must be positive")
	}
	srv := redistest.Start(b)
	archiveDir := b.TempDir()
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: srv.URL()}, Partitions: 12,
		Log: quietLog(), Projector: func(c *projector.Config) {
			c.RetainClosed = 30 * time.Second
			c.ArchiveURL = "file://" + filepath.ToSlash(archiveDir)
			c.ArchiveSweep = 2 * time.Second
		}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Stop() })
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 10 * time.Second}
	waitHTTPB(b, hc, st.QueryURL+"/readyz")
	rc := srv.Client(b)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(minutes*float64(time.Minute)))
		loadDone := make(chan error, 1)
		go func() { loadDone <- openAndClose(ctx, hc, st.IngestURL, rate) }()
		type sample struct {
			at   time.Duration
			used int64
			keys int64
		}
		var curve []sample
		began := time.Now()
		tick := time.NewTicker(15 * time.Second)
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case <-tick.C:
			}
			info, err := rc.InfoMap(context.Background(), "memory").Result()
			if err != nil {
				b.Fatal(err)
			}
			used, _ := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
			keys, _ := rc.DBSize(context.Background()).Result()
			curve = append(curve, sample{time.Since(began).Round(time.Second), used, keys})
		}
		tick.Stop()
		cancel()
		if err := <-loadDone; err != nil {
			b.Fatal(err)
		}
		if len(curve) < 8 {
			b.Fatalf("%d samples: run it longer", len(curve))
		}
		for _, s := range curve {
			fmt.Fprintf(os.Stdout, "soak: t=%v used_memory=%d keys=%d\n", s.at, s.used, s.keys)
		}
		mean := func(ss []sample) float64 {
			var sum float64
			for _, s := range ss {
				sum += float64(s.used)
			}
			return sum / float64(len(ss))
		}
		mid := len(curve) / 2
		growth := (mean(curve[len(curve)-3:]) - mean(curve[mid-1:mid+2])) / mean(curve[mid-1:mid+2]) * 100
		archived := 0
		_ = filepath.WalkDir(archiveDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
				archived++
			}
			return nil
		})
		if archived == 0 {
			b.Fatal("no session was archived")
		}
		b.ReportMetric(growth, "second-half-growth-%")
		b.ReportMetric(float64(curve[len(curve)-1].used)/(1<<20), "final-used-MB")
		b.ReportMetric(float64(archived), "archived-sessions")
	}
}

// openAndClose sends, every 100 ms, rate/10 new sessions (SessionCreated,
// SessionStarted) and completes the sessions opened 5 s earlier, until ctx
// ends.
func openAndClose(ctx context.Context, hc *http.Client, ingestURL string, rate int) error {
	perTick := max(rate/10, 1)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	const closeAfter = 50 // ticks
	var buf bytes.Buffer
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		buf.Reset()
		for i := range perTick {
			id := fmt.Sprintf("soak-%s-%d-%d", run, n, i)
			fmt.Fprintf(&buf, `{"sessionId":%q,"type":"SessionCreated"}`+"\n", id)
			fmt.Fprintf(&buf, `{"sessionId":%q,"type":"SessionStarted"}`+"\n", id)
			if n >= closeAfter {
				fmt.Fprintf(&buf, `{"sessionId":"soak-%s-%d-%d","type":"SessionCompleted"}`+"\n", run, n-closeAfter, i)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ingestURL+"/v1/events", bytes.NewReader(buf.Bytes()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("ingest answered %d", resp.StatusCode)
		}
	}
}
