package projector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "events"

var ctx = context.Background()

func testLog() *slog.Logger {
	if os.Getenv("PROJECTOR_VERBOSE") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is a broker and a Redis for one test.
type env struct {
	t       *testing.T
	brokers []string
	rdb     *redis.Client
	srv     *redistest.Server
	kc      *kfake.Cluster // the broker, for tests that control its requests
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	c := kafkatest.Start(t)
	srv := redistest.Start(t)
	e := &env{t: t, brokers: c.ListenAddrs(), rdb: srv.Client(t), srv: srv, kc: c}
	cl := e.client()
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, partitions); err != nil {
		t.Fatal(err)
	}
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), kafka.DLQTopic(topic), partitions); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) client(opts ...kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kafka.Partitioner())}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

// produce writes events as ingest would, in order.
func (e *env) produce(events []fsm.Event) {
	e.t.Helper()
	e.produceAt(events, time.Time{})
}

// produceAt produces events with the record timestamp ts (the time of the
// produce when ts is zero).
func (e *env) produceAt(events []fsm.Event, ts time.Time) {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	recs := make([]*kgo.Record, len(events))
	for i := range events {
		recs[i] = &kgo.Record{Key: []byte(events[i].SessionID), Value: fsm.AppendRecord(nil, &events[i]), Timestamp: ts}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) store(prefix string) *projstore.Store {
	s, err := projstore.New(e.rdb, prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) config(instance string) Config {
	return Config{Kafka: kafka.Config{Brokers: e.brokers, ClientID: "test-" + instance}, Topic: topic, Partitions: 4,
		Group: "g", InstanceID: instance, Redis: redisconn.Config{URL: e.srv.URL(), Prefix: "unused"}, HTTPAddr: ":0",
		FlushInterval: 30 * time.Millisecond, MaxFlushInterval: 200 * time.Millisecond, FlushSize: 40, CacheSize: 300,
		MaxPollRecords: 100,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 8 * time.Second, LeaveOnShutdown: true}
}

// running is a projector in a goroutine.
type running struct {
	p    *Projector
	stop context.CancelFunc
	done chan error
}

func (e *env) start(cfg Config, prefix string, hook func(crashPoint) bool) *running {
	return e.startWith(cfg, prefix, func(p *Projector) { p.crash.hook = hook })
}

// startWith starts a projector after setup sets its test hooks.
func (e *env) startWith(cfg Config, prefix string, setup func(*Projector)) *running {
	p := New(cfg, e.store(prefix), WithLogger(testLog()))
	setup(p)
	c, cancel := context.WithCancel(ctx)
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	return r
}

// halt stops the projector gracefully and returns Run's error.
func (r *running) halt() error {
	r.stop()
	return <-r.done
}

// endOffsets returns the end offset of every partition of the topic.
func endOffsets(tb testing.TB, brokers []string) map[int32]int64 {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// caughtUp reports whether every non-empty partition's checkpoint has
// reached its end offset.
func caughtUp(cps map[int32]snapshot.Checkpoint, ends map[int32]int64) bool {
	for p, end := range ends {
		if end > 0 && cps[p].Offset < end {
			return false
		}
	}
	return true
}

// waitCaughtUp waits until every partition's checkpoint under prefix has
// reached the end of the log, for as long as the checkpoints move: it
// fails once they have not moved for stall.
func (e *env) waitCaughtUp(prefix string, stall time.Duration) {
	e.t.Helper()
	ends := endOffsets(e.t, e.brokers)
	testwait.WhileProgressing(e.t, "the checkpoints at the log's end", stall, func() (bool, string) {
		cps, err := e.store(prefix).Checkpoints(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		return caughtUp(cps, ends), fmt.Sprintf("checkpoints %v, ends %v", checkpointOffsets(cps), ends)
	})
}

// checkpointOffsets are the offsets of cps, by partition.
func checkpointOffsets(cps map[int32]snapshot.Checkpoint) map[int32]int64 {
	out := make(map[int32]int64, len(cps))
	for p, cp := range cps {
		out[p] = cp.Offset
	}
	return out
}

// dump returns every stored snapshot under prefix, encoded, by session id.
func (e *env) dump(prefix string) map[string][]byte {
	e.t.Helper()
	out := map[string][]byte{}
	cursor := ""
	for {
		page, err := e.store(prefix).List(ctx, fsm.StateNone, cursor, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, s := range page.Snapshots {
			out[s.ID] = s.AppendBinary(nil)
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

func (e *env) assertSame(want, got map[string][]byte) {
	e.t.Helper()
	if len(want) != len(got) {
		e.t.Fatalf("got %d snapshots, want %d", len(got), len(want))
	}
	var bad []string
	for id, w := range want {
		if !bytes.Equal(w, got[id]) {
			bad = append(bad, id)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		var gs, ws snapshot.Snapshot
		_ = snapshot.Decode(got[bad[0]], &gs)
		_ = snapshot.Decode(want[bad[0]], &ws)
		g, _ := gs.MarshalJSON()
		w, _ := ws.MarshalJSON()
		e.t.Fatalf("%d sessions differ, first %s\n got %s\nwant %s", len(bad), bad[0], g, w)
	}
}

// workloadEvents returns an interleaved stream of n sessions with duplicates
// (client resends) and invalid events mixed in.
func workloadEvents(seed uint64, n int) []fsm.Event {
	g := workload.New(seed, workload.Options{InvalidShare: 0.05, DuplicateShare: 0.08})
	return g.Interleave(g.Sessions(fmt.Sprintf("s%d", seed), n, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
}

// reference folds the log uninterrupted under prefix and returns the result.
func (e *env) reference(prefix string) map[string][]byte {
	e.t.Helper()
	cfg := e.config("ref")
	cfg.Group = "ref-" + prefix
	r := e.start(cfg, prefix, nil)
	e.waitCaughtUp(prefix, 60*time.Second)
	if err := r.halt(); err != nil {
		e.t.Fatal(err)
	}
	return e.dump(prefix)
}

// crashedOrCaughtUp waits until a projector started with a crash hook
// either crashes (true) or catches up with the log as it is now without
// having crashed (false), whichever comes first: a wait on progress, not a
// fixed time. A crash that races the stop after catching up counts as one.
func (e *env) crashedOrCaughtUp(r *running, prefix string) bool {
	e.t.Helper()
	ends := endOffsets(e.t, e.brokers)
	var crashed, caught bool
	if !testwait.Eventually(120*time.Second, func() bool {
		select {
		case err := <-r.done:
			if !errors.Is(err, errCrashed) {
				e.t.Fatalf("Run returned %v, want the crash", err)
			}
			crashed = true
			return true
		default:
		}
		cps, err := e.store(prefix).Checkpoints(ctx, topic)
		caught = err == nil && caughtUp(cps, ends)
		return caught
	}) {
		e.t.Fatalf("the projector neither crashed nor caught up with %v", ends)
	}
	if crashed {
		return true
	}
	switch err := r.halt(); {
	case errors.Is(err, errCrashed):
		return true
	case err != nil:
		e.t.Fatal(err)
	}
	return false
}

// crashAt returns a hook that crashes at the n-th time point is reached.
func crashAt(point crashPoint, n int64) func(crashPoint) bool {
	var hits atomic.Int64
	return func(p crashPoint) bool { return p == point && hits.Add(1) == n }
}

// TestCrashAnywhere kills projectors abruptly at many points (while folding,
// before and after the snapshot write, before and after the checkpoint),
// restarts them, and requires snapshots identical to an uninterrupted fold.
func TestCrashAnywhere(t *testing.T) {
	e := newEnv(t, 4)
	events := workloadEvents(1, 400)
	points := []struct {
		point crashPoint
		n     int64
	}{
		{crashFold, 1}, {crashFold, 300}, {crashBeforePut, 1}, {crashAfterPut, 1}, {crashAfterPut, 3},
		{crashBeforeCheckpoint, 2}, {crashAfterCheckpoint, 1}, {crashFold, 700}, {crashAfterPut, 5}, {crashBeforePut, 4},
	}
	// Each round brings new events, so every crash interrupts real work.
	chunk := len(events) / len(points)
	crashes := 0
	for i, pt := range points {
		e.produce(events[i*chunk : min((i+1)*chunk, len(events))])
		r := e.start(e.config("a"), "crash", crashAt(pt.point, pt.n))
		if e.crashedOrCaughtUp(r, "crash") {
			crashes++
		} else {
			t.Logf("crash point %s #%d not reached before the projector caught up", pt.point, pt.n)
		}
	}
	if crashes < len(points) {
		t.Fatalf("only %d of %d crash points were reached", crashes, len(points))
	}
	e.produce(events[len(points)*chunk:])
	r := e.start(e.config("a"), "crash", nil)
	e.waitCaughtUp("crash", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	want := e.reference("ref")
	e.assertSame(want, e.dump("crash"))
	t.Logf("%d crashes, %d sessions identical", crashes, len(want))
}

// TestDeadLetters writes poison records straight to the topic (garbage, an
// unknown version, an unknown type, an invalid event, a record keyed by
// another session, an orphan) among good ones: they land in the DLQ with
// their reason and the partition keeps flowing.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t, 1)
	good := workloadEvents(2, 20)
	half := len(good) / 2
	e.produce(good[:half])
	cl := e.client()
	defer cl.Close()
	poison := []struct {
		key, value, reason string
	}{
		{"s-x", "\x00\x01garbage", ReasonUndecodable},
		{"s-x", `{"v":7,"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445566","sessionId":"s-x","type":"SessionStarted","occurredAt":"2026-11-29T06:00:00Z"}`, ReasonUnsupportedVersion},
		{"s-x", `{"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445567","sessionId":"s-x","type":"SessionExploded","occurredAt":"2026-11-29T06:00:00Z"}`, ReasonUnknownEventType},
		{"s-x", `{"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445568","sessionId":"s-x","type":"TimeoutExpired","occurredAt":"2026-11-29T06:00:00Z"}`, ReasonInvalidEvent},
		{"other", `{"eventId":"0190f2a4-5b6c-7d8e-9f00-112233445569","sessionId":"s-x","type":"SessionCreated","occurredAt":"2026-11-29T06:00:00Z"}`, ReasonKeyMismatch},
		{"s-orphan", `{"eventId":"0190f2a4-5b6c-7d8e-9f00-11223344556a","sessionId":"s-orphan","type":"SessionPaused","occurredAt":"2026-11-29T06:00:00Z"}`, ReasonUnknownSession},
	}
	for _, p := range poison {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(p.key), Value: []byte(p.value)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	e.produce(good[half:])
	want := e.reference("ref")
	if _, ok := want["s-orphan"]; ok {
		t.Fatal("an orphan created a snapshot")
	}
	if _, ok := want["s-x"]; ok {
		t.Fatal("a poison record created a snapshot")
	}
	// Every good session is there, folded past the poison.
	var ref fsm.Session
	var r fsm.Reducer
	count := map[string]bool{}
	for i := range good {
		count[good[i].SessionID] = true
	}
	if len(want) != len(count) {
		t.Fatalf("%d snapshots, want %d", len(want), len(count))
	}
	_ = ref
	_ = r

	dlq := e.client(kgo.ConsumeTopics(kafka.DLQTopic(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer dlq.Close()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(poison) && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		dlq.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			var reason, source string
			for _, h := range rec.Headers {
				switch h.Key {
				case kafka.HeaderDLQReason:
					reason = string(h.Value)
				case kafka.HeaderDLQSource:
					source = string(h.Value)
				}
			}
			if source == "" {
				t.Errorf("DLQ record without source header")
			}
			got = append(got, reason)
		})
		cancel()
	}
	if len(got) != len(poison) {
		t.Fatalf("DLQ holds %v, want %d records", got, len(poison))
	}
	for i, p := range poison {
		if got[i] != p.reason {
			t.Errorf("DLQ record %d: reason %q, want %q", i, got[i], p.reason)
		}
	}
}

// TestRebalanceAndZombie grows the group from one projector to three and back
// to one while events keep arriving, with one member frozen past the
// rebalance timeout (a zombie) that resumes writing after it lost its
// partitions. Nothing is lost or applied twice, and no snapshot or
// checkpoint ever moves backwards.
func TestRebalanceAndZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): a member frozen past the rebalance timeout, three rebalances (about 20 s); make test runs it")
	}
	t.Parallel() // its own broker and redis-server; mostly waits out the group's timeouts
	e := newEnv(t, 4)
	events := workloadEvents(3, 600)
	third := len(events) / 3
	e.produce(events[:third])

	// Watch every snapshot position and checkpoint while the test runs.
	var regress atomic.Value
	watchStop := make(chan struct{})
	var watchWG sync.WaitGroup
	watchWG.Add(1)
	go func() {
		defer watchWG.Done()
		seen := map[string]snapshot.Position{}
		seenCkpt := map[int32]int64{}
		st := e.store("rb")
		for {
			select {
			case <-watchStop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			for id, b := range e.dumpQuiet(st) {
				var s snapshot.Snapshot
				if snapshot.Decode(b, &s) != nil {
					continue
				}
				if prev, ok := seen[id]; ok && s.Position.Less(prev) {
					regress.Store(fmt.Sprintf("%s went back from %v to %v", id, prev, s.Position))
				}
				seen[id] = s.Position
			}
			cps, _ := st.Checkpoints(ctx, topic)
			for p, cp := range cps {
				if cp.Offset < seenCkpt[p] {
					regress.Store(fmt.Sprintf("checkpoint %d went back from %d to %d", p, seenCkpt[p], cp.Offset))
				}
				seenCkpt[p] = cp.Offset
			}
		}
	}()

	a := e.start(e.config("a"), "rb", nil)
	e.waitCaughtUp("rb", 30*time.Second)
	// The zombie freezes inside the first poll it folds and resumes only
	// when released, long after the group has dropped it.
	freeze := make(chan struct{})
	var frozen atomic.Bool
	var zombieWrites atomic.Int64
	zcfg := e.config("z")
	z := e.start(zcfg, "rb", func(p crashPoint) bool {
		switch {
		case p == crashFold && frozen.CompareAndSwap(false, true):
			<-freeze
		case p == crashBeforePut && frozen.Load():
			zombieWrites.Add(1)
		}
		return false
	})
	b := e.start(e.config("b"), "rb", nil)
	testwait.Until(t, "the zombie to own partitions", 30*time.Second, func() bool { return z.p.st.assigned.Load() > 0 && b.p.st.assigned.Load() > 0 })
	e.produce(events[third : 2*third])
	testwait.Until(t, "the zombie to freeze", 30*time.Second, frozen.Load)
	// b leaves: the rebalance waits for the frozen member, then drops it
	// after the rebalance timeout and gives everything to a.
	if err := b.halt(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a to own every partition", 30*time.Second, func() bool { return a.p.st.assigned.Load() == 4 })
	e.produce(events[2*third:])
	e.waitCaughtUp("rb", 60*time.Second)
	close(freeze) // the zombie wakes up and writes what it folded
	testwait.Until(t, "the zombie to write", 30*time.Second, func() bool { return zombieWrites.Load() > 0 })
	if err := z.halt(); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("zombie: %v", err)
	}
	e.waitCaughtUp("rb", 90*time.Second)
	if err := a.halt(); err != nil {
		t.Fatal(err)
	}
	close(watchStop)
	watchWG.Wait()
	if msg := regress.Load(); msg != nil {
		t.Fatal(msg)
	}
	want := e.reference("ref")
	e.assertSame(want, e.dump("rb"))
}

func (e *env) dumpQuiet(st *projstore.Store) map[string][]byte {
	out := map[string][]byte{}
	cursor := ""
	for {
		page, err := st.List(ctx, fsm.StateNone, cursor, 1000)
		if err != nil {
			return out
		}
		for _, s := range page.Snapshots {
			out[s.ID] = s.AppendBinary(nil)
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

func contextWithCancel() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }

// TestFoldReadsAnUncachedSession folds a record whose session is not in the
// cache: the stored snapshot is read first, so the fold continues it instead
// of treating the session as unknown.
func TestFoldReadsAnUncachedSession(t *testing.T) {
	e := newEnv(t, 1)
	st := e.store("uncached")
	var s snapshot.Snapshot
	var r fsm.Reducer
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	created := fsm.NewEvent(fsm.EventID{1}, "s-1", fsm.SessionCreated, at, fsm.Fields{})
	s.Fold(&r, &created, snapshot.Position{Offset: 0})
	if _, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	p := New(e.config("x"), st, WithLogger(testLog()))
	part := p.st.addPartition(0)
	started := fsm.NewEvent(fsm.EventID{2}, "s-1", fsm.SessionStarted, at.Add(time.Second), fsm.Fields{})
	rec := &kgo.Record{Partition: 0, Offset: 1, Key: []byte("s-1"), Value: fsm.AppendRecord(nil, &started)}
	if err := p.folder.fold(ctx, part, rec, &started); err != nil {
		t.Fatal(err)
	}
	en := p.st.cache.get(0, "s-1")
	if en == nil || en.snap.State != fsm.StateActive || en.snap.Version != 2 || !en.dirty {
		t.Fatalf("fold of an uncached session: %+v", en)
	}
}

// TestRebuildAfterRedisEmptiedWhileIdle empties Redis under a projector that
// has folded everything and gets no new events: it must notice the vanished
// checkpoints by itself and rebuild the same read model from the log.
func TestRebuildAfterRedisEmptiedWhileIdle(t *testing.T) {
	e := newEnv(t, 4)
	e.produce(workloadEvents(7, 200))
	r := e.start(e.config("idle"), "idle", nil)
	e.waitCaughtUp("idle", 30*time.Second)
	want := e.dump("idle")
	if len(want) == 0 {
		t.Fatal("nothing folded")
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp("idle", 30*time.Second) // no new event: only the check can notice
	testwait.Until(t, "every snapshot rebuilt", 30*time.Second, func() bool { return len(e.dumpQuiet(e.store("idle"))) == len(want) })
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.assertSame(want, e.dump("idle"))
}

// TestGracefulShutdownLeavesTheGroup stops one of two static members
// gracefully: its partitions must move to the other at once, not after the
// session timeout. The session timeout is two minutes here, so that a move
// that waited for it cannot pass the minute given, however busy the
// machine.
func TestGracefulShutdownLeavesTheGroup(t *testing.T) {
	e := newEnv(t, 4)
	e.produce(workloadEvents(8, 50))
	config := func(instance string) Config {
		cfg := e.config(instance)
		cfg.SessionTimeout, cfg.RebalanceTimeout = 2*time.Minute, 2*time.Minute
		return cfg
	}
	a := e.start(config("a"), "leave", nil)
	b := e.start(config("b"), "leave", nil)
	testwait.Until(t, "both members to own partitions", 60*time.Second, func() bool { return a.p.st.assigned.Load() > 0 && b.p.st.assigned.Load() > 0 })
	if err := b.halt(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a to own every partition before b's 2-minute session timeout", 60*time.Second, func() bool { return a.p.st.assigned.Load() == 4 })
	e.waitCaughtUp("leave", 30*time.Second)
	if err := a.halt(); err != nil {
		t.Fatal(err)
	}
}

// TestStopWhileStartingLeavesTheGroup stops a static member that the
// group assigned partitions while it was still starting (before its topics
// were ensured): it must leave too, or its partitions wait for its
// 2-minute session timeout.
func TestStopWhileStartingLeavesTheGroup(t *testing.T) {
	e := newEnv(t, 4)
	e.produce(workloadEvents(8, 50))
	config := func(instance string) Config {
		cfg := e.config(instance)
		cfg.SessionTimeout, cfg.RebalanceTimeout = 2*time.Minute, 2*time.Minute
		return cfg
	}
	a := e.start(config("a"), "leave", nil)
	testwait.Until(t, "a to own partitions", 60*time.Second, func() bool { return a.p.st.assigned.Load() > 0 })
	b := e.startWith(config("b"), "leave", func(p *Projector) {
		p.starting = func(ctx context.Context) { <-ctx.Done() }
	})
	testwait.Until(t, "b to be assigned partitions while starting", 60*time.Second, func() bool { return b.p.st.assigned.Load() > 0 })
	if err := b.halt(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a to own every partition before b's 2-minute session timeout", 60*time.Second, func() bool { return a.p.st.assigned.Load() == 4 })
	if err := a.halt(); err != nil {
		t.Fatal(err)
	}
}

// TestRebuildAfterRedisEmptiedUnderLoad empties Redis while a projector with
// a small cache folds a workload that resends SessionCreated events (the
// generator's invalid events): sessions evicted from the cache meet a
// duplicate SessionCreated after the loss. The rebuild must still end equal
// to an uninterrupted fold.
func TestRebuildAfterRedisEmptiedUnderLoad(t *testing.T) {
	e := newEnv(t, 3)
	g := workload.New(21, workload.Options{InvalidShare: 0.3, DuplicateShare: 0.05})
	events := g.Interleave(g.Sessions("ld", 300, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
	half := len(events) / 2
	e.produce(events[:half])
	cfg := e.config("load")
	cfg.CacheSize, cfg.FlushSize = 20, 10
	r := e.start(cfg, "load", nil)
	e.waitCaughtUp("load", 30*time.Second)
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.produce(events[half:])
	e.waitCaughtUp("load", 60*time.Second)
	want := e.reference("ref")
	// An idle check may still find a lost checkpoint and rebuild: wait for
	// the fold to equal the reference (assertSame says how it differs if
	// it never does).
	testwait.Eventually(30*time.Second, func() bool { return maps.EqualFunc(want, e.dumpQuiet(e.store("load")), bytes.Equal) })
	e.waitCaughtUp("load", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.assertSame(want, e.dump("load"))
}

// TestRebuildDiscardsWhatFollowedTheLoss checks the rebuild step itself: it
// deletes the rebuilt partition's snapshots (one folded after the loss may
// lack the history Redis lost) and leaves other partitions' alone, and the
// records of that partition already polled are not folded.
func TestRebuildDiscardsWhatFollowedTheLoss(t *testing.T) {
	e := newEnv(t, 2)
	st := e.store("rebuild")
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	mk := func(id string, p int32, off int64) snapshot.Entry {
		var s snapshot.Snapshot
		var r fsm.Reducer
		ev := fsm.NewEvent(fsm.EventID{byte(off)}, id, fsm.SessionCreated, at, fsm.Fields{Goal: "again"})
		s.Fold(&r, &ev, snapshot.Position{Partition: p, Offset: off})
		return snapshot.NewEntry(&s)
	}
	if _, err := st.PutBatch(ctx, []snapshot.Entry{mk("poisoned", 0, 50), mk("good", 1, 7)}); err != nil {
		t.Fatal(err)
	}
	p := New(e.config("x"), st, WithLogger(testLog()))
	cl := e.client(kgo.ConsumeTopics(topic))
	defer cl.Close()
	p.connect(cl, ctx, ctx)
	part := p.st.addPartition(0)
	part.next, part.ckptKnown, part.lastCkpt = 60, true, 60
	p.rec.rebuild(part)
	if _, err := st.Get(ctx, "poisoned"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("the rebuilt partition's snapshot survived: %v", err)
	}
	if _, err := st.Get(ctx, "good"); err != nil {
		t.Fatalf("another partition's snapshot was deleted: %v", err)
	}
	if part.next != 0 || !part.ckptKnown || part.lastCkpt != 0 || part.rebuildUntil != 60 {
		t.Fatalf("partition state not reset to checkpoint 0, rebuilt until 60: %+v", part)
	}
	// The rebuild is stored before anything is deleted: a restart folds
	// from 0, not from the old checkpoint over the deleted snapshots.
	cps, err := st.Checkpoints(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if cp := cps[0]; cp.Offset != 0 || cp.RebuildUntil != 60 {
		t.Fatalf("stored checkpoint %+v, want offset 0 rebuilt until 60", cp)
	}
	// A fetch polled before the rebuild: its records are not folded.
	ev := fsm.NewEvent(fsm.EventID{9}, "late", fsm.SessionCreated, at, fsm.Fields{})
	stale := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{{Partition: 0, HighWatermark: 100,
		Records: []*kgo.Record{{Topic: topic, Partition: 0, Offset: 70, Key: []byte("late"), Value: fsm.AppendRecord(nil, &ev)}}}}}}}}
	if err := p.folder.process(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if p.st.cache.get(0, "late") != nil || part.next != 0 || p.st.cache.dirtyLen() != 0 {
		t.Fatalf("a record polled before the rebuild was folded: next %d, dirty %d", part.next, p.st.cache.dirtyLen())
	}
}

// TestRedisWentBackInTime restores, under a running projector, a copy of
// Redis taken earlier (as a lagging replica promoted by a failover, or a
// restart from an older RDB file, would): the snapshots written since are
// gone, and the projector's cache still holds them as written. The next
// checkpoint write finds a stored checkpoint lower than the one it wrote, and
// the partition is rebuilt from the log: the read model ends equal to an
// uninterrupted fold.
func TestRedisWentBackInTime(t *testing.T) {
	e := newEnv(t, 3)
	events := workloadEvents(31, 300)
	third := len(events) / 3
	e.produce(events[:third])
	r := e.start(e.config("back"), "back", nil)
	e.waitCaughtUp("back", 30*time.Second)
	// The copy Redis will go back to.
	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]string{}
	for _, k := range keys {
		v, err := e.rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		saved[k] = v
	}
	e.produce(events[third : 2*third])
	e.waitCaughtUp("back", 30*time.Second)
	// Redis goes back in time, at once, as a promoted replica or a restart
	// from an older file does: one transaction empties it and writes the
	// copy back. (Emptied first and then written back key by key, the
	// projector would see an emptied Redis, start its rebuild, and have
	// what it rebuilt overwritten with older snapshots by hand: a
	// different fault, which the background verifier repairs.)
	if _, err := e.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.FlushAll(ctx)
		for k, v := range saved {
			pipe.RestoreReplace(ctx, k, 0, v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.produce(events[2*third:])
	e.waitCaughtUp("back", 60*time.Second)
	want := e.reference("ref")
	// An idle check may still find a lost checkpoint and rebuild: wait for
	// the fold to equal the reference (assertSame says how it differs if
	// it never does).
	testwait.Eventually(30*time.Second, func() bool { return maps.EqualFunc(want, e.dumpQuiet(e.store("back")), bytes.Equal) })
	e.waitCaughtUp("back", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.assertSame(want, e.dump("back"))
}
