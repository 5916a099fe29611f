package feed_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const eventsTopic = "t.events"

// env is a broker with the changes topic and a real redis-server.
type env struct {
	brokers []string
	rdb     *redis.Client
	prod    *kgo.Client
}

func newEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	c := kafkatest.Start(t, kfake.SeedTopics(partitions, feed.Topic(eventsTopic)))
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &env{brokers: c.ListenAddrs(), rdb: redistest.Start(t).Client(t), prod: prod}
}

// produce writes changes to their position's partition of the changes
// topic, as the projector does.
func (e *env) produce(t *testing.T, cs ...feed.Change) {
	t.Helper()
	for _, c := range cs {
		rec := &kgo.Record{Topic: feed.Topic(eventsTopic), Partition: c.Position.Partition, Key: []byte(c.SessionID), Value: c.AppendJSON(nil)}
		if err := e.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) consumer(t *testing.T, opts ...feed.Option) *feed.Consumer {
	t.Helper()
	c, err := feed.NewConsumer(append([]feed.Option{feed.Brokers(e.brokers...), feed.EventsTopic(eventsTopic),
		feed.Group("observer"), feed.Redis(e.rdb), feed.KeyPrefix("test")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sessionChanges returns n changes of one session on partition p, at
// events offsets start, start+step, ...
func sessionChanges(id string, p int32, start, step int64, n int) []feed.Change {
	states := []string{"CREATED", "INITIALIZING", "ACTIVE", "PAUSED", "ACTIVE", "AWAITING_APPROVAL", "ACTIVE", "COMPLETED"}
	var out []feed.Change
	for i := range n {
		c := feed.Change{SessionID: id, Version: uint64(i + 1), Position: feed.Position{Partition: p, Offset: start + int64(i)*step},
			EventID: fmt.Sprintf("%s-e%d", id, i), Type: "T", OccurredAt: time.Date(2026, 11, 30, 0, 0, i, 0, time.UTC),
			Outcome: feed.Applied, To: states[i%len(states)]}
		if i > 0 {
			c.From = states[(i-1)%len(states)]
		}
		out = append(out, c)
	}
	return out
}

// interleave merges per-session change lists round-robin, keeping each
// list's order (the projector's fold order across sessions).
func interleave(lists ...[]feed.Change) []feed.Change {
	var out []feed.Change
	for i := 0; ; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// recorder is a handler that notes what it accepted.
type recorder struct {
	mu   sync.Mutex
	got  []feed.Change
	seen map[feed.Key]int
}

func (r *recorder) handle(_ context.Context, c feed.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[feed.Key]int{}
	}
	r.got = append(r.got, c)
	r.seen[c.Key()]++
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// check fails unless every change of want was accepted exactly once and
// each session's changes arrived in order.
func (r *recorder) check(t *testing.T, want []feed.Change) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range want {
		if n := r.seen[c.Key()]; n != 1 {
			t.Errorf("change %s of %s accepted %d times, want 1", c.Position, c.SessionID, n)
		}
	}
	if len(r.got) != len(want) {
		t.Errorf("accepted %d changes, want %d", len(r.got), len(want))
	}
	last := map[string]int64{}
	for _, c := range r.got {
		if prev, ok := last[c.SessionID]; ok && c.Position.Offset <= prev {
			t.Errorf("session %s: change at offset %d after %d", c.SessionID, c.Position.Offset, prev)
		}
		last[c.SessionID] = c.Position.Offset
	}
}

// run starts c.Run in a goroutine; stop cancels it and returns its error.
func run(t *testing.T, c *feed.Consumer, handle func(context.Context, feed.Change) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, handle) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				err = errors.New("Run did not return after its context ended")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// The projector writes a range again after its crash, byte-identical and at
// new changes-topic offsets; the consumer restarts in the middle. Every
// change reaches the handler once, in order per session.
func TestConsumerDeliversEachChangeOnceThroughRewritesAndRestart(t *testing.T) {
	e := newEnv(t, 3)
	a := sessionChanges("a", 0, 0, 2, 8)
	b := sessionChanges("b", 0, 1, 2, 8)
	c := sessionChanges("c", 1, 10, 1, 8)
	d := sessionChanges("d", 2, 5, 3, 8)
	// First part: a, b, c, d's first four changes, with the projector
	// writing a's and b's first three again (a crash after producing).
	first := interleave(a[:4], b[:4], c[:4], d[:4])
	e.produce(t, first...)
	e.produce(t, interleave(a[:3], b[:3])...)

	rec := &recorder{}
	stop := run(t, e.consumer(t), rec.handle)
	testwait.Until(t, "the first part", 20*time.Second, func() bool { return rec.count() >= len(first) })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// While the consumer is down: the rest, and the first part written
	// again once more (another projector crash).
	e.produce(t, interleave(a[4:], b[4:], c[4:], d[4:])...)
	e.produce(t, first...)
	e.produce(t, c[6:]...)
	stop = run(t, e.consumer(t), rec.handle)
	all := interleave(a, b, c, d)
	testwait.Until(t, "every change", 20*time.Second, func() bool { return rec.count() >= len(all) })
	// A duplicate after the last change must not arrive either: write one
	// more, then a fresh change behind it, and wait for the fresh one.
	e.produce(t, d[7])
	fresh := sessionChanges("e", 2, 100, 1, 1)
	e.produce(t, fresh...)
	testwait.Until(t, "the fresh change", 20*time.Second, func() bool { return rec.count() >= len(all)+1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	rec.check(t, append(all, fresh...))
}

// A handler error stops Run with a *HandlerError; the change is not
// checkpointed, so the next Run starts with it.
func TestConsumerHandlerErrorStopsAndTheChangeComesAgain(t *testing.T) {
	e := newEnv(t, 1)
	all := sessionChanges("a", 0, 0, 1, 6)
	e.produce(t, all...)
	boom := errors.New("boom")
	rec := &recorder{}
	failing := func(ctx context.Context, c feed.Change) error {
		if c.Position.Offset == 3 {
			return boom
		}
		return rec.handle(ctx, c)
	}
	err := e.consumer(t).Run(context.Background(), failing)
	var he *feed.HandlerError
	if !errors.As(err, &he) || !errors.Is(err, boom) || he.Change.Position.Offset != 3 {
		t.Fatalf("Run = %v, want a HandlerError of the change at offset 3 wrapping boom", err)
	}
	stop := run(t, e.consumer(t), rec.handle)
	testwait.Until(t, "every change", 20*time.Second, func() bool { return rec.count() >= len(all) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.check(t, all)
}

// StartAt(Latest) skips what was there at the first assignment, and a
// restart does not move that start.
func TestConsumerStartAtLatest(t *testing.T) {
	e := newEnv(t, 1)
	old := sessionChanges("old", 0, 0, 1, 3)
	e.produce(t, old...)
	c := e.consumer(t, feed.StartAt(feed.Latest))
	rec := &recorder{}
	stop := run(t, c, rec.handle)
	testwait.Until(t, "the checkpoint at the end", 20*time.Second, func() bool {
		n, err := e.rdb.HGet(context.Background(), c.CheckpointKey(0), "~next").Int()
		return err == nil && n == 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fresh := sessionChanges("new", 0, 10, 1, 2)
	e.produce(t, fresh...)
	stop = run(t, e.consumer(t, feed.StartAt(feed.Latest)), rec.handle)
	testwait.Until(t, "the new changes", 20*time.Second, func() bool { return rec.count() >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec.check(t, fresh)
}

// A filter hands over only what it keeps; the rest moves the checkpoint.
func TestConsumerFilter(t *testing.T) {
	e := newEnv(t, 1)
	all := sessionChanges("a", 0, 0, 1, 8)
	e.produce(t, all...)
	rec := &recorder{}
	c := e.consumer(t, feed.Filter(func(c *feed.Change) bool { return c.To == "ACTIVE" }))
	stop := run(t, c, rec.handle)
	testwait.Until(t, "the checkpoint past the last change", 20*time.Second, func() bool {
		n, err := e.rdb.HGet(context.Background(), c.CheckpointKey(0), "~next").Int()
		return err == nil && n == len(all)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var want []feed.Change
	for _, c := range all {
		if c.To == "ACTIVE" {
			want = append(want, c)
		}
	}
	rec.check(t, want)
}

// A checkpoint beyond the end of its partition (the topic was recreated)
// stops Run instead of skipping changes.
func TestConsumerCheckpointAheadOfTheLog(t *testing.T) {
	e := newEnv(t, 1)
	e.produce(t, sessionChanges("a", 0, 0, 1, 2)...)
	c := e.consumer(t)
	if err := e.rdb.HSet(context.Background(), c.CheckpointKey(0), "~next", 50).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.Run(ctx, (&recorder{}).handle)
	var ce *feed.CheckpointError
	if !errors.Is(err, feed.ErrCheckpointAhead) || !errors.As(err, &ce) || ce.Partition != 0 {
		t.Fatalf("Run = %v, want ErrCheckpointAhead for partition 0", err)
	}
}

// Two instances of a group share the partitions; a change is handled by
// one of them, once, and a session's changes in order.
func TestConsumersShareTheGroup(t *testing.T) {
	e := newEnv(t, 4)
	var lists [][]feed.Change
	for i := range 8 {
		lists = append(lists, sessionChanges(fmt.Sprintf("s%d", i), int32(i%4), int64(i), 8, 6))
	}
	all := interleave(lists...)
	rec := &recorder{}
	stop1 := run(t, e.consumer(t), rec.handle)
	stop2 := run(t, e.consumer(t), rec.handle)
	e.produce(t, all...)
	testwait.Until(t, "every change", 20*time.Second, func() bool { return rec.count() >= len(all) })
	if err := errors.Join(stop1(), stop2()); err != nil {
		t.Fatal(err)
	}
	rec.check(t, all)
}

func TestNewConsumerRequiresRedisAndGroup(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		name string
		opts []feed.Option
		want error
	}{
		{"no redis", []feed.Option{feed.Group("g")}, feed.ErrNoRedis},
		{"no group", []feed.Option{feed.Redis(rdb)}, feed.ErrNoGroup},
		{"empty topic", []feed.Option{feed.Redis(rdb), feed.Group("g"), feed.EventsTopic("")}, feed.ErrInvalidOption},
		{"bad start", []feed.Option{feed.Redis(rdb), feed.Group("g"), feed.StartAt(7)}, feed.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := feed.NewConsumer(tc.opts...); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
