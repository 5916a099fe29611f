package query_test

import (
	"bufio"

	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"net/http/httptest"
)

// BenchmarkQueryLatency reads snapshots through the HTTP API at a fixed rate
// (QUERY_RATE, 500 requests/s, for 5 seconds, open loop) and reports p50 and
// p99, next to redis-benchmark's GET latency against the same redis-server
// in the same run (one client, values of the snapshots' size).
func BenchmarkQueryLatency(b *testing.B) {
	srv := redistest.Start(b)
	store, err := snapshot.NewStore(srv.Client(b), "bench")
	if err != nil {
		b.Fatal(err)
	}
	g := workload.New(9, workload.Options{})
	var entries []snapshot.Entry
	var ids []string
	size := 0
	for i, events := range g.Sessions("q", 2000, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)) {
		var s snapshot.Snapshot
		var r = new(fsmReducer)
		for j := range events {
			s.Fold(&r.r, &events[j], snapshot.Position{Offset: int64(i*100 + j)})
		}
		e := snapshot.NewEntry(&s)
		size += len(e.Data)
		entries = append(entries, e)
		ids = append(ids, s.ID)
	}
	if _, err := store.PutBatch(ctx, entries); err != nil {
		b.Fatal(err)
	}
	h := query.NewHandler(store, topic, nil, query.Options{})
	hs := httptest.NewServer(h)
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for b.Loop() {
		const rate, dur = 500, 5 * time.Second
		lat := make(chan time.Duration, rate*6)
		tick := time.NewTicker(time.Second / rate)
		end := time.Now().Add(dur)
		n := 0
		var inflight sync.WaitGroup
		for now := range tick.C {
			if now.After(end) {
				break
			}
			id := ids[n%len(ids)]
			n++
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				start := time.Now()
				resp, err := client.Get(hs.URL + "/v1/sessions/" + id)
				if err != nil || resp.StatusCode != 200 {
					b.Errorf("read %s: %v", id, err)
					return
				}
				resp.Body.Close()
				lat <- time.Since(start)
			}()
		}
		tick.Stop()
		inflight.Wait() // every read answered, so none sends on the closed channel
		close(lat)
		var all []time.Duration
		for d := range lat {
			all = append(all, d)
		}
		slices.Sort(all)
		p := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000 }
		b.ReportMetric(p(0.50), "query-p50-ms")
		b.ReportMetric(p(0.99), "query-p99-ms")
		p50, p99 := redisBenchmark(b, srv.Addr, size/len(entries))
		b.ReportMetric(p50, "redis-get-p50-ms")
		b.ReportMetric(p99, "redis-get-p99-ms")
	}
}

type fsmReducer struct{ r fsm.Reducer }

// redisBenchmark runs redis-benchmark GET with one client and returns its
// p50 and p99 latency in milliseconds.
func redisBenchmark(b *testing.B, addr string, valueSize int) (p50, p99 float64) {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-t", "get", "-n", "20000", "-c", "1",
		"-d", strconv.Itoa(valueSize)).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	// "latency summary (msec):" is followed by a header and a line of
	// avg min p50 p95 p99 max.
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "latency summary") {
			sc.Scan()
			sc.Scan()
			f := strings.Fields(sc.Text())
			if len(f) >= 5 {
				p50, _ = strconv.ParseFloat(f[2], 64)
				p99, _ = strconv.ParseFloat(f[4], 64)
				return p50, p99
			}
		}
	}
	b.Fatalf("no latency summary in redis-benchmark output:\n%s", out)
	return 0, 0
}
