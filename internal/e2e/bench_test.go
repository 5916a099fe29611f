package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkFreshness measures how long an accepted event takes to become
// visible: from ingest's 202 to the first read of the query API that shows
// it (a client reading the session every millisecond), for 200 events on an
// idle pipeline and 200 events while a background load of 20,000 events/s
// goes through ingest (batches of 100), with the projector at its defaults.
// Run it once: go test -run='^$' -bench=Freshness -benchtime=1x ./internal/e2e.
func BenchmarkFreshness(b *testing.B) {
	srv := redistest.Start(b)
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: srv.URL()}, Partitions: 12, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Stop() })
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	waitHTTPB(b, hc, st.QueryURL+"/readyz")
	g := workload.New(5, workload.Options{})
	for round := 0; b.Loop(); round++ {
		// The load is made before it is sent (see readsUnderSteadyWrites):
		// made by the sender, it took longer than the measurement, which
		// then ran with no load at all.
		batches := ndjsonBatches(g.Interleave(g.Sessions("bg-"+strconv.Itoa(round), 20_000, time.Now())), 100)
		idle := freshness(b, hc, st, "idle", 200)
		load := startLoad(b, hc, st.IngestURL, batches)
		began, before := time.Now(), load.sent.Load()
		loaded := freshness(b, hc, st, "loaded", 200)
		rate := float64(load.sent.Load()-before) / time.Since(began).Seconds()
		load.stop()
		if rate < 10_000 {
			b.Fatalf("the background load ran at %.0f events/s, not 20,000: the loaded figures would not be under load", rate)
		}
		b.ReportMetric(pct(idle, 0.50), "idle-p50-ms")
		b.ReportMetric(pct(idle, 0.99), "idle-p99-ms")
		b.ReportMetric(pct(loaded, 0.50), "loaded-p50-ms")
		b.ReportMetric(pct(loaded, 0.99), "loaded-p99-ms")
		b.ReportMetric(rate, "background-events/s")
	}
}

// freshness sends n events one at a time, each creating a session, and
// returns, for each, the time from the 202 to the first read that shows it.
func freshness(b *testing.B, hc *http.Client, st *devstack.Stack, label string, n int) []time.Duration {
	b.Helper()
	var out []time.Duration
	for i := range n {
		id := fmt.Sprintf("fresh-%s-%d-%d", label, time.Now().UnixNano(), i)
		body := fmt.Sprintf(`{"sessionId":%q,"type":"SessionCreated"}`, id)
		resp, err := hc.Post(st.IngestURL+"/v1/events", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			b.Fatalf("ingest: %d", resp.StatusCode)
		}
		accepted := time.Now()
		for {
			r, err := hc.Get(st.QueryURL + "/v1/sessions/" + id)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode == 200 {
				out = append(out, time.Since(accepted))
				break
			}
			if time.Since(accepted) > 10*time.Second {
				b.Fatalf("%s not visible after 10s", id)
			}
			time.Sleep(time.Millisecond) // the scenario: a fixed 1 ms sampling period is the latency's resolution
		}
	}
	return out
}

// BenchmarkReadsUnderWrites reads snapshots through the query API at 500
// requests/s (open loop) while a projector catches up on a pre-filled
// topic (BENCH_SESSIONS sessions, default 25,000, about 500,000 events),
// and, in the same moments, reads one snapshot key with a plain Redis GET;
// then the same reads on the idle pipeline. It reports query p50 and p99
// under load and idle, and Redis GET p99 under load.
//
// "processes" runs the broker, the projector and the query service each in
// its own process, as they are deployed, and measures from the benchmark's
// process; "in-process" runs them in the benchmark's own process (devstack),
// where the readers share one Go runtime with a fold that keeps both cores
// busy, so that their tail is the runtime's scheduling, not Redis's.
func BenchmarkReadsUnderWrites(b *testing.B) {
	sessions := 25000
	if v, err := strconv.Atoi(envOr("BENCH_SESSIONS", "")); err == nil {
		sessions = v
	}
	b.Run("processes", func(b *testing.B) {
		bin := buildServices(b, "kafkabroker", "projector", "query")
		_, brokerAddr := startBroker(b, bin["kafkabroker"], map[string]string{"KFAKE_PARTITIONS": "12", "KFAKE_LOG_LEVEL": "warn"})
		readsUnderWrites(b, []string{brokerAddr}, sessions, func(redisURL string) (string, func()) {
			env := map[string]string{
				"CORREX_KAFKA_BROKERS": brokerAddr, "CORREX_REDIS_URL": redisURL, "CORREX_PARTITIONS": "12",
				"CORREX_AUTH_DISABLED": "true", "CORREX_RATE_LIMIT": "0",
				"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
				// prefill dates its events 2026-11-29: the default inactivity
				// timeout would have passed, and fire for every live session.
				"CORREX_TIMEOUT_INACTIVITY": "0",
			}
			query, queryURL := startHTTPService(b, "query", bin["query"], env)
			proj := map[string]string{"CORREX_INSTANCE_ID": "bench"}
			for k, v := range env {
				if _, set := proj[k]; !set {
					proj[k] = v
				}
			}
			projector, _ := startHTTPService(b, "projector", bin["projector"], proj)
			return queryURL, func() {
				for _, p := range []*process{projector, query} {
					_ = p.cmd.Process.Signal(syscall.SIGTERM)
					<-p.done
				}
			}
		})
	})
	b.Run("steady", readsUnderSteadyWrites)
	b.Run("in-process", func(b *testing.B) {
		c := kafkatest.Start(b)
		readsUnderWrites(b, c.ListenAddrs(), sessions, func(redisURL string) (string, func()) {
			st, err := devstack.Start(context.Background(), devstack.Options{Brokers: c.ListenAddrs(), Redis: redisconn.Config{URL: redisURL},
				Partitions: 12, Log: quietLog(),
				// As above: no inactivity timeout for the prefilled sessions.
				Projector: func(c *projector.Config) { c.Timeouts[fsm.TimeoutInactivity] = 0 }})
			if err != nil {
				b.Fatal(err)
			}
			return st.QueryURL, func() { _ = st.Stop() }
		})
	})
}

// readsUnderWrites fills the topic on brokers, and for each round starts a
// projector and a query service with start (which returns the query URL
// and a stop function), measures reads while the projector catches up and
// then idle, and reports the figures.
func readsUnderWrites(b *testing.B, brokers []string, sessions int, start func(redisURL string) (queryURL string, stop func())) {
	srv := redistest.Start(b)
	events := prefill(b, brokers, sessions)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	store, ids, entries := readSessions(b, rdb)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	for b.Loop() {
		queryURL, stop := start(srv.URL())
		waitHTTPB(b, hc, queryURL+"/readyz")
		began := time.Now()
		caughtUp := make(chan struct{})
		go func() {
			defer close(caughtUp)
			for {
				if cps, err := store.Checkpoints(context.Background(), "correx.session-events"); err == nil && len(cps) == 12 {
					var next int64
					for _, cp := range cps {
						next += cp.Offset
					}
					if next >= int64(events) {
						return
					}
				}
				time.Sleep(10 * time.Millisecond) // the scenario: a fixed sampling period is the catch-up time's resolution
			}
		}()
		loadQ, loadR := readLatencies(b, hc, rdb, queryURL, ids, caughtUp)
		catchUp := time.Since(began)
		idleQ, _ := readLatencies(b, hc, rdb, queryURL, ids, timeAfter(3*time.Second))
		stop()
		b.ReportMetric(float64(events)/catchUp.Seconds(), "catchup-events/s")
		b.ReportMetric(pct(idleQ, 0.50), "idle-query-p50-ms")
		b.ReportMetric(pct(idleQ, 0.99), "idle-query-p99-ms")
		b.ReportMetric(pct(loadQ, 0.50), "load-query-p50-ms")
		b.ReportMetric(pct(loadQ, 0.99), "load-query-p99-ms")
		b.ReportMetric(pct(loadR, 0.99), "load-redis-get-p99-ms")
		b.ReportMetric(pct(loadQ, 0.99)/pct(idleQ, 0.99), "load/idle-p99")
		// The next round catches up from nothing again.
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		if _, err := store.PutBatch(context.Background(), entries); err != nil {
			b.Fatal(err)
		}
		deleteGroup(b, brokers)
	}
}

// readsUnderSteadyWrites reads snapshots through the query API at 500
// requests/s, and one snapshot key with a plain Redis GET in the same
// ticks, for 3 s on the idle pipeline (in the benchmark's process,
// devstack), then for 15 s while a background load of 20,000 events/s goes
// through ingest (batches of 100, four senders) and the projector keeps up
// with it. Each round sends sessions of its own. It
// reports both p99s idle and under the load, and their ratio under the
// load (query-p99/redis-p99): what the query service adds to a read of
// Redis while the pipeline is busy.
func readsUnderSteadyWrites(b *testing.B) {
	srv := redistest.Start(b)
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: srv.URL()}, Partitions: 12, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Stop() })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	_, ids, _ := readSessions(b, rdb)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	waitHTTPB(b, hc, st.QueryURL+"/readyz")
	// The load, made before each round: 20,000 sessions' events in NDJSON
	// batches of 100, sent by four senders at 50 batches/s each. One
	// sender waits for each answer, and would fall behind whenever ingest
	// took more than the 5 ms between its batches. The figures are over
	// every round's reads.
	g := workload.New(5, workload.Options{})
	var idleQ, idleR, loadQ, loadR []time.Duration
	var sentAll int64
	var loaded time.Duration
	for round := 0; b.Loop(); round++ {
		batches := ndjsonBatches(g.Interleave(g.Sessions("steady-"+strconv.Itoa(round), 20_000, time.Now())), 100)
		q, r := readLatencies(b, hc, rdb, st.QueryURL, ids, timeAfter(3*time.Second))
		idleQ, idleR = append(idleQ, q...), append(idleR, r...)
		load := startLoad(b, hc, st.IngestURL, batches)
		began, before := time.Now(), load.sent.Load()
		q, r = readLatencies(b, hc, rdb, st.QueryURL, ids, timeAfter(15*time.Second))
		loadQ, loadR = append(loadQ, q...), append(loadR, r...)
		sentAll += load.sent.Load() - before
		loaded += time.Since(began)
		load.stop()
	}
	if rate := float64(sentAll) / loaded.Seconds(); rate < 10_000 {
		b.Fatalf("the background load ran at %.0f events/s, not 20,000: the figures would not be under load", rate)
	}
	b.ReportMetric(pct(idleQ, 0.99), "idle-query-p99-ms")
	b.ReportMetric(pct(idleR, 0.99), "idle-redis-get-p99-ms")
	b.ReportMetric(pct(loadQ, 0.50), "load-query-p50-ms")
	b.ReportMetric(pct(loadQ, 0.99), "load-query-p99-ms")
	b.ReportMetric(pct(loadR, 0.99), "load-redis-get-p99-ms")
	b.ReportMetric(pct(loadQ, 0.99)/pct(loadR, 0.99), "query/redis-p99")
	b.ReportMetric(float64(sentAll)/loaded.Seconds(), "background-events/s")
}

// loadSenders send a background load of 20,000 events/s together, each
// 50 batches of 100 a second (sendBatches).
const loadSenders = 4

// background is a load being sent: sent counts the events ingest accepted.
type background struct {
	sent   atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startLoad sends batches through ingest with loadSenders senders, and
// returns once the load has run for 2 s, long enough to settle.
func startLoad(b *testing.B, hc *http.Client, ingestURL string, batches [][]byte) *background {
	ctx, cancel := context.WithCancel(context.Background())
	l := &background{cancel: cancel}
	for i := range loadSenders {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); sendBatches(ctx, b, hc, ingestURL, batches, i, loadSenders, &l.sent) }()
	}
	time.Sleep(2 * time.Second) // the scenario: a pause between load steps, for the load to settle
	return l
}

// stop ends the load and waits for its senders.
func (l *background) stop() {
	l.cancel()
	l.wg.Wait()
}

// ndjsonBatches encodes stream as NDJSON batches of n events.
func ndjsonBatches(stream []fsm.Event, n int) [][]byte {
	var out [][]byte
	for i := 0; i+n <= len(stream); i += n {
		var buf bytes.Buffer
		for j := i; j < i+n; j++ {
			buf.Write(envelopeJSON(&stream[j]))
			buf.WriteByte('\n')
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// sendBatches sends batches sender, sender+senders, ... through ingest at
// 50 batches per second until ctx ends or they run out, and adds the
// events of each accepted batch (100) to sent.
func sendBatches(ctx context.Context, b *testing.B, hc *http.Client, ingestURL string, batches [][]byte, sender, senders int, sent *atomic.Int64) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := sender; i < len(batches); i += senders {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		resp, err := hc.Post(ingestURL+"/v1/events", "application/x-ndjson", bytes.NewReader(batches[i]))
		if err != nil {
			if ctx.Err() == nil {
				b.Error(err)
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			b.Errorf("background load: %d", resp.StatusCode)
			return
		}
		sent.Add(100)
	}
}

// readSessions stores 500 folded sessions to read, under the "correx"
// prefix, and returns the store, their ids and their entries (to store
// them again after a flush).
func readSessions(b *testing.B, rdb *redis.Client) (*snapshot.Store, []string, []snapshot.Entry) {
	b.Helper()
	store, err := snapshot.NewStore(rdb, "correx")
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	var entries []snapshot.Entry
	g := workload.New(3, workload.Options{})
	var r fsm.Reducer
	for i, evs := range g.Sessions("read", 500, time.Now()) {
		var s snapshot.Snapshot
		for j := range evs {
			s.Fold(&r, &evs[j], snapshot.Position{Partition: 99, Offset: int64(i*100 + j)})
		}
		entries = append(entries, snapshot.NewEntry(&s))
		ids = append(ids, s.ID)
	}
	if _, err := store.PutBatch(context.Background(), entries); err != nil {
		b.Fatal(err)
	}
	return store, ids, entries
}

func timeAfter(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// readLatencies reads at 500/s through the API, and with a plain GET of one
// snapshot key in the same ticks, until stop is closed.
func readLatencies(b *testing.B, hc *http.Client, rdb *redis.Client, queryURL string, ids []string, stop <-chan struct{}) (q, r []time.Duration) {
	b.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	key := "correx:s:{" + strconv.Itoa(snapshot.Bucket(ids[0])) + "}:" + ids[0]
	for n := 0; ; n++ {
		select {
		case <-stop:
			wg.Wait()
			return q, r
		case <-tick.C:
		}
		id := ids[n%len(ids)]
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			resp, err := hc.Get(queryURL + "/v1/sessions/" + id)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d := time.Since(start)
			if resp.StatusCode != 200 {
				b.Errorf("read %s: %d", id, resp.StatusCode)
				return
			}
			mu.Lock()
			q = append(q, d)
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			_ = rdb.Get(context.Background(), key).Err()
			d := time.Since(start)
			mu.Lock()
			r = append(r, d)
			mu.Unlock()
		}()
	}
}

// prefill produces about 20 events for each of n sessions to a 12-partition
// topic and returns how many.
func prefill(b *testing.B, brokers []string, n int) int {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("correx.session-events"),
		kgo.RecordPartitioner(kafka.Partitioner()), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for _, t := range []string{"correx.session-events", kafka.DLQTopic("correx.session-events")} {
		if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), t, 12); err != nil {
			b.Fatal(err)
		}
	}
	g := workload.New(11, workload.Options{})
	stream := g.Interleave(g.Sessions("w", n, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
	for i := range stream {
		cl.Produce(ctx, &kgo.Record{Key: []byte(stream[i].SessionID), Value: fsm.AppendRecord(nil, &stream[i])}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return len(stream)
}

func deleteGroup(b *testing.B, brokers []string) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	_, _ = kadm.NewClient(cl).DeleteGroups(context.Background(), "correx-projector")
}

func waitHTTPB(b *testing.B, hc *http.Client, u string) {
	b.Helper()
	testwait.Until(b, u+" ready", 30*time.Second, func() bool {
		resp, err := hc.Get(u)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
}

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return def
}

// envelopeJSON is e as a client sends it to ingest.
func envelopeJSON(e *fsm.Event) []byte {
	m := map[string]any{"eventId": e.ID.String(), "sessionId": e.SessionID, "type": e.Type.String(),
		"occurredAt": e.OccurredAt.Format(time.RFC3339Nano)}
	if len(e.Payload) > 0 {
		m["payload"] = json.RawMessage(e.Payload)
	}
	b, _ := json.Marshal(m)
	return b
}
