package projector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/workload"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// benchEnv is a broker with a pre-filled topic and a redis-server.
type benchEnv struct {
	cluster *kfake.Cluster
	brokers []string
	srv     *redistest.Server
	rdb     redis.UniversalClient // srv's, unless a benchmark points it elsewhere
	events  int
	// noFeed turns the change feed off in config (it is on by default).
	noFeed bool
}

// newBenchEnv produces the events of sessions (about 20 each with the
// default mix; BENCH_EXEC_WEIGHT sets workload.Options.ExecutionWeight) to a
// 12-partition topic.
func newBenchEnv(b *testing.B, sessions int) *benchEnv {
	b.Helper()
	c := kafkatest.Start(b)
	srv := redistest.Start(b)
	e := &benchEnv{cluster: c, brokers: c.ListenAddrs(), srv: srv, rdb: srv.Client(b)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kafka.Partitioner()), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 12); err != nil {
		b.Fatal(err)
	}
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), kafka.DLQTopic(topic), 12); err != nil {
		b.Fatal(err)
	}
	weight, _ := strconv.Atoi(os.Getenv("BENCH_EXEC_WEIGHT"))
	g := workload.New(11, workload.Options{InvalidShare: 0.02, DuplicateShare: 0.02, ExecutionWeight: weight})
	start := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	// Produce in slices of sessions to bound memory.
	const slice = 5000
	for first := 0; first < sessions; first += slice {
		var ss [][]fsm.Event
		for i := first; i < min(first+slice, sessions); i++ {
			ss = append(ss, g.Session("b-"+strconv.Itoa(i), start))
		}
		stream := g.Interleave(ss)
		for i := range stream {
			ev := &stream[i]
			cl.Produce(ctx, &kgo.Record{Key: []byte(ev.SessionID), Value: fsm.AppendRecord(nil, ev)}, func(_ *kgo.Record, err error) {
				if err != nil {
					panic(err)
				}
			})
		}
		e.events += len(stream)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return e
}

func (e *benchEnv) config(group, instance string) Config {
	// The defaults, on the benchmark's brokers and Redis, with devstack's
	// flush interval, shorter group timeouts and no leave on shutdown.
	cfg := DefaultConfig()
	cfg.Kafka = kafka.Config{Brokers: e.brokers, ClientID: "bench"}
	cfg.Topic, cfg.Group, cfg.InstanceID = topic, group, instance
	cfg.Redis.URL, cfg.HTTPAddr = e.srv.URL(), ":0"
	cfg.LeaveOnShutdown = false
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.SessionTimeout, cfg.RebalanceTimeout = 10*time.Second, 20*time.Second
	cfg.ChangeFeed = !e.noFeed
	return cfg
}

// catchUp runs a projector from its checkpoints (none: a full rebuild)
// until every checkpoint reaches the log end, and returns the time taken.
// It folds: see fold.
func (e *benchEnv) catchUp(b *testing.B, prefix, group string, opts ...Option) time.Duration {
	return e.fold(b, prefix, e.config(group, "bench-"+group), opts...)
}

// fold is catchUpWith for a benchmark that measures folding: the snapshot
// changelog is deleted first, so that the projector cannot restore what an
// earlier run wrote there instead of folding the log, and the benchmark
// fails if any partition was restored all the same.
func (e *benchEnv) fold(b *testing.B, prefix string, cfg Config, opts ...Option) time.Duration {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		b.Fatal(err)
	}
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, changelog.Topic(cfg.Topic))
	cl.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			b.Fatalf("deleting the changelog %s: %v", r.Topic, r.Err)
		}
	}
	var p *Projector
	d := e.catchUpWith(b, prefix, cfg, append(opts, func(q *Projector) { p = q })...)
	if n := p.restores.Load(); n > 0 {
		b.Fatalf("%d partitions were restored from the changelog: this run did not fold the log", n)
	}
	return d
}

// catchUpWith is catchUp with a configuration.
func (e *benchEnv) catchUpWith(b *testing.B, prefix string, cfg Config, opts ...Option) time.Duration {
	b.Helper()
	st, err := projstore.New(e.rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.WaitReplicas(cfg.RedisWaitReplicas, cfg.RedisWaitTimeout); err != nil {
		b.Fatal(err)
	}
	ends := endOffsets(b, e.brokers)
	p := New(cfg, st, append([]Option{WithLogger(testLog())}, opts...)...)
	c, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- p.Run(c) }()
	for {
		if cps, err := st.Checkpoints(ctx, topic); err == nil && caughtUp(cps, ends) {
			break
		}
		select {
		case err := <-done:
			b.Fatalf("projector stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	return elapsed
}

// naive is the baseline: consume each record, GET its snapshot, fold, SET it
// back, one event at a time, for n events.
func (e *benchEnv) naive(b *testing.B, n int) time.Duration {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var r fsm.Reducer
	var ev fsm.Event
	start := time.Now()
	done := 0
	for done < n {
		fetches := cl.PollRecords(ctx, 1000)
		for _, rec := range fetches.Records() {
			if done == n {
				break
			}
			done++
			if fsm.DecodeRecord(rec.Value, &ev) != nil {
				continue
			}
			key := "naive:" + ev.SessionID
			var s snapshot.Snapshot
			if raw, err := e.rdb.Get(ctx, key).Bytes(); err == nil {
				if err := snapshot.Decode(raw, &s); err != nil {
					b.Fatal(err)
				}
			}
			if _, folded := s.Fold(&r, &ev, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset}); folded && s.Exists() {
				if err := e.rdb.Set(ctx, key, s.AppendBinary(nil), 0).Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	return time.Since(start)
}

// raw is the ceiling: a plain franz-go consumer (no group, no decoding)
// reading every record of the topic from the start, with the projector's
// fetch settings, on the same broker.
func (e *benchEnv) raw(b *testing.B) time.Duration {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	var n, bytes int
	for n < e.events {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			b.Fatal(err)
		}
		fetches.EachRecord(func(r *kgo.Record) { n++; bytes += len(r.Value) })
	}
	if bytes == 0 {
		b.Fatal("raw consume read no bytes")
	}
	return time.Since(start)
}

// BenchmarkCatchUp measures how fast a projector folds a pre-filled topic
// (BENCH_SESSIONS sessions, default 50,000, about 1,000,000 events over 12
// partitions; broker in-process, redis-server on the same host), with the
// change feed off and on (the default), side by side with two baselines in
// the same process: the naive fold (GET, fold, SET per event) over the
// first 100,000 events, and the ceiling, a raw consume of every record.
// projector-events/s is the rate with the feed on; feed-on/off is what the
// feed leaves of the rate without it; of-raw is projector-events/s over
// raw-events/s. Run it once: go test -run='^$' -bench=CatchUp -benchtime=1x.
func BenchmarkCatchUp(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	for i := 0; b.Loop(); i++ {
		e.noFeed = true
		off := e.catchUp(b, fmt.Sprintf("off%d", i), fmt.Sprintf("off%d", i))
		e.noFeed = false
		d := e.catchUp(b, fmt.Sprintf("p%d", i), fmt.Sprintf("g%d", i))
		rate := float64(e.events) / d.Seconds()
		offRate := float64(e.events) / off.Seconds()
		naiveN := min(100_000, e.events)
		nd := e.naive(b, naiveN)
		naiveRate := float64(naiveN) / nd.Seconds()
		rawRate := float64(e.events) / e.raw(b).Seconds()
		b.ReportMetric(float64(e.events), "events")
		b.ReportMetric(rawRate, "raw-events/s")
		b.ReportMetric(rate/rawRate, "of-raw")
		b.ReportMetric(rate, "projector-events/s")
		b.ReportMetric(offRate, "feed-off-events/s")
		b.ReportMetric(rate/offRate, "feed-on/off")
		b.ReportMetric(naiveRate, "naive-events/s")
		b.ReportMetric(rate/naiveRate, "speedup")
	}
}

// BenchmarkCatchUpWait measures what waiting for replicas
// (CORREX_REDIS_WAIT_REPLICAS=1) costs a projector folding a pre-filled
// topic (BENCH_SESSIONS sessions, default 50,000, about 20 events each),
// without and with the wait, alternating in one process: on a
// redis-server with one replica (off-events/s, on-events/s, on/off: the
// snapshot writes wait, in their round trip), and on a Redis Cluster of
// three masters with one replica each (cluster-off-events/s,
// cluster-on-events/s, cluster-on/off: every master waits before each
// checkpoint). All on one host. Run it once: go test -run='^$'
// -bench=CatchUpWait -benchtime=1x.
func BenchmarkCatchUpWait(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	redistest.StartReplica(b, e.srv)
	single := e.rdb
	c := redistest.StartClusterWithReplicas(b, 3)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	b.Cleanup(func() { _ = cluster.Close() })
	run := func(rdb redis.UniversalClient, name string, wait int) time.Duration {
		e.rdb = rdb
		cfg := e.config(name, "bench-"+name)
		cfg.RedisWaitReplicas = wait
		return e.fold(b, name, cfg)
	}
	var off, on, coff, con time.Duration
	for i := 0; b.Loop(); i++ {
		off += run(single, fmt.Sprintf("off%d", i), 0)
		on += run(single, fmt.Sprintf("on%d", i), 1)
		coff += run(cluster, fmt.Sprintf("coff%d", i), 0)
		con += run(cluster, fmt.Sprintf("con%d", i), 1)
	}
	e.rdb = single
	n := float64(b.N * e.events)
	b.ReportMetric(float64(e.events), "events")
	b.ReportMetric(n/off.Seconds(), "off-events/s")
	b.ReportMetric(n/on.Seconds(), "on-events/s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "on/off")
	b.ReportMetric(n/coff.Seconds(), "cluster-off-events/s")
	b.ReportMetric(n/con.Seconds(), "cluster-on-events/s")
	b.ReportMetric(coff.Seconds()/con.Seconds(), "cluster-on/off")
}

// BenchmarkRecovery measures the time from a projector's start to caught up,
// after a stop with 10,000 events produced since, with its checkpoints and
// with a forced full replay (checkpoints deleted), at BENCH_SESSIONS
// sessions of history (about 20 events each).
func BenchmarkRecovery(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	e.catchUp(b, "r", "gr")
	st, _ := projstore.New(e.rdb, "r")
	for b.Loop() {
		extra := workload.New(99, workload.Options{}).Interleave(workload.New(99, workload.Options{}).Sessions("extra-"+strconv.FormatInt(time.Now().UnixNano(), 36), 500, time.Now()))
		cl, _ := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
		for i := range extra {
			cl.Produce(ctx, &kgo.Record{Key: []byte(extra[i].SessionID), Value: fsm.AppendRecord(nil, &extra[i])}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		cl.Close()
		withCheckpoints := e.catchUp(b, "r", "gr")
		if err := st.DeleteCheckpoints(ctx, topic); err != nil {
			b.Fatal(err)
		}
		fullReplay := e.catchUp(b, "r", "gr")
		b.ReportMetric(float64(e.events), "history-events")
		b.ReportMetric(withCheckpoints.Seconds(), "s-with-checkpoints")
		b.ReportMetric(fullReplay.Seconds(), "s-full-replay")
	}
}

// BenchmarkTracingOverhead folds the same pre-filled topic (BENCH_SESSIONS
// sessions, default 50,000) three ways, alternating, in one process, after
// an untimed warm-up catch-up: telemetry off; on, with an exporter that
// counts the spans it receives (the instrumentation's own cost: building,
// sampling, batching and handing over every span); and on, with the OTLP
// exporter's transform and protobuf encoding, the bytes discarded (what a
// deployment exporting over OTLP pays, short of the network). Traced runs
// use the always-on sampler, with metrics on; their time includes waiting,
// after the projector stopped, until every span they made was exported.
// on/off and encoded/off are the ratios of the rates, cpu-on/off and
// cpu-encoded/off those of the process's CPU time. A traced run that
// exported fewer lifecycle spans than the transitions and rejections the
// projector folded fails the benchmark: a design that drops spans cannot
// look cheap.
func BenchmarkTracingOverhead(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	counting := newTracedBench(b, &countingExporter{})
	client := &encodingClient{}
	encoding := newTracedBench(b, &countingExporter{next: otlptrace.NewUnstarted(client)})
	// An untimed first catch-up warms the broker's log and the heap, which
	// would otherwise slow whichever run comes first.
	e.catchUp(b, "warm", "warm")
	var off, on, encoded, offCPU, onCPU, encodedCPU time.Duration
	for i := 0; b.Loop(); i++ {
		cpu := cpuTime()
		off += e.catchUp(b, fmt.Sprintf("off%d", i), fmt.Sprintf("off%d", i))
		offCPU += cpuTime() - cpu
		cpu = cpuTime()
		on += counting.run(b, e, fmt.Sprintf("on%d", i))
		onCPU += cpuTime() - cpu
		cpu = cpuTime()
		encoded += encoding.run(b, e, fmt.Sprintf("enc%d", i))
		encodedCPU += cpuTime() - cpu
	}
	n := float64(b.N * e.events)
	b.ReportMetric(n/off.Seconds(), "off-events/s")
	b.ReportMetric(n/on.Seconds(), "on-events/s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "on/off")
	b.ReportMetric(off.Seconds()/encoded.Seconds(), "encoded/off")
	// The process's CPU time per run, in the same ratios: on a shared
	// machine, less sensitive than the rates to what else runs.
	b.ReportMetric(offCPU.Seconds()/onCPU.Seconds(), "cpu-on/off")
	b.ReportMetric(offCPU.Seconds()/encodedCPU.Seconds(), "cpu-encoded/off")
	b.ReportMetric(float64(counting.exporter.lifecycle.Load())/float64(b.N), "spans-exported/run")
	b.ReportMetric(float64(client.bytes.Load())/float64(b.N), "otlp-bytes/run")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tracedBench is a Telemetry exporting to one exporter, and the projector
// observer built on it, shared by the runs of a benchmark.
type tracedBench struct {
	tel      *correxotel.Telemetry
	obs      *Telemetry
	exporter *countingExporter
}

func newTracedBench(b *testing.B, exp *countingExporter) *tracedBench {
	b.Helper()
	tel, err := correxotel.Setup(ctx, correxotel.Config{ServiceName: "bench", Getenv: func(string) string { return "" },
		SpanExporter: exp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(ctx) })
	obs, err := NewTelemetry(tel, topic, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(obs.Close)
	return &tracedBench{tel: tel, obs: obs, exporter: exp}
}

// run catches a projector up with the observer, waits until its spans are
// exported, and returns the time of both. It fails the benchmark if a
// transition or rejection the projector folded has no exported span.
func (t *tracedBench) run(b *testing.B, e *benchEnv, name string) time.Duration {
	b.Helper()
	folded, exported := t.obs.lifecycleFolds(), t.exporter.lifecycle.Load()
	d := e.catchUp(b, name, name, WithObserver(t.obs))
	start := time.Now()
	t.obs.Drain()
	if err := t.tel.TracerProvider.ForceFlush(ctx); err != nil {
		b.Fatal(err)
	}
	d += time.Since(start)
	folded, exported = t.obs.lifecycleFolds()-folded, t.exporter.lifecycle.Load()-exported
	if exported != folded {
		b.Fatalf("%s: %d lifecycle spans exported for %d transitions and rejections folded", name, exported, folded)
	}
	return d
}

// lifecycleFolds is the number of transitions and rejections folded so far:
// one lifecycle span each.
func (o *Telemetry) lifecycleFolds() int64 {
	var n int64
	for from := range o.transitions {
		for to := range o.transitions[from] {
			n += o.transitions[from][to].Load()
		}
	}
	for r := range o.rejected {
		n += o.rejected[r].Load()
	}
	return n
}

// countingExporter counts the lifecycle spans it receives and passes every
// span on to next, if set.
type countingExporter struct {
	lifecycle atomic.Int64
	next      sdktrace.SpanExporter
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		if s.Name() == correxotel.SpanTransition || s.Name() == correxotel.SpanRejected {
			c.lifecycle.Add(1)
		}
	}
	if c.next != nil {
		return c.next.ExportSpans(ctx, spans)
	}
	return nil
}

func (c *countingExporter) Shutdown(ctx context.Context) error {
	if c.next != nil {
		return c.next.Shutdown(ctx)
	}
	return nil
}

// encodingClient is the network end of an OTLP exporter without the
// network: it encodes each request as the gRPC and HTTP clients do and
// discards the bytes.
type encodingClient struct{ bytes atomic.Int64 }

func (*encodingClient) Start(context.Context) error { return nil }
func (*encodingClient) Stop(context.Context) error  { return nil }
func (c *encodingClient) UploadTraces(_ context.Context, spans []*tracepb.ResourceSpans) error {
	raw, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: spans})
	c.bytes.Add(int64(len(raw)))
	return err
}

// BenchmarkCatchUpVerifier measures what the background verifier at its
// default rate (CORREX_VERIFY_RATE=20) costs a projector folding a
// pre-filled topic (BENCH_SESSIONS sessions, default 50,000, about 20
// events each) from nothing: catch-up without it and with it, alternating
// in one process (after an untimed warm-up), each run under its own
// prefix and group, and their
// ratio (verify-on/off, off time over on time; target at least 0.95,
// docs/verification.md, "Rate and cost"). Run it once: go test -run='^$' -bench=CatchUpVerifier
// -benchtime=1x.
func BenchmarkCatchUpVerifier(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	run := func(name string, rate float64) time.Duration {
		cfg := e.config(name, "bench-"+name)
		cfg.VerifyRate = rate
		return e.fold(b, name, cfg)
	}
	// The first catch-up over a fresh broker can be much slower than the
	// next (once, off first: off took 4.5 times on at 50,000 sessions): one
	// untimed run first, then each iteration times off, on, on, off, so
	// that neither side gains from its place.
	run("warm", 0)
	var off, on time.Duration
	for i := 0; b.Loop(); i++ {
		off += run(fmt.Sprintf("voff%da", i), 0)
		on += run(fmt.Sprintf("von%da", i), DefaultConfig().VerifyRate)
		on += run(fmt.Sprintf("von%db", i), DefaultConfig().VerifyRate)
		off += run(fmt.Sprintf("voff%db", i), 0)
	}
	n := float64(2 * b.N * e.events)
	b.ReportMetric(float64(e.events), "events")
	b.ReportMetric(n/off.Seconds(), "verify-off-events/s")
	b.ReportMetric(n/on.Seconds(), "verify-on-events/s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "verify-on/off")
}
