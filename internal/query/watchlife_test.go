package query_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A token may hold MaxWatchesPerPrincipal watches; the next gets 429 with
// Retry-After, other tokens are not affected, and a closed watch frees its
// slot.
func TestWatchLimitPerToken(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{MaxWatchesPerPrincipal: 2}, "acme", "beta")
	a1 := f.open("/v1/watch", f.tokens["acme"])
	f.open("/v1/sessions/acme:x/watch?cursor="+f.watcher.EncodeCursor([]int64{0, 0, 0}), f.tokens["acme"])
	resp := f.request("/v1/watch", f.tokens["acme"])
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third watch: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.open("/v1/watch", f.tokens["beta"])
	a1.resp.Body.Close()
	testwait.Until(t, "the closed watch's slot is free", 10*time.Second, func() bool {
		resp := f.request("/v1/watch", f.tokens["acme"])
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// A client that never reads is cut once its queue is full: the reader
// stops holding changes for it, its stream ends, and resuming from the
// last event it got delivers the rest exactly.
func TestWatchCutsSlowConsumer(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{Queue: 4, WriteTimeout: time.Second})
	// A client with a small receive buffer that reads nothing for now.
	slow := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		}}).DialContext}}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/v1/watch", nil)
	resp, err := slow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	testwait.Until(t, "the watch is subscribed", 10*time.Second, func() bool { return f.watcher.Subscribers() == 1 })
	labels := map[string]string{}
	for i := range 16 {
		labels[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 256)
	}
	var cs []feed.Change
	for i := range 400 {
		c := chg(fmt.Sprintf("s-%d", i), int32(i%watchParts), int64(i), "ACTIVE")
		c.Labels = labels
		cs = append(cs, c)
	}
	f.produce(cs...)
	testwait.Until(t, "the slow watch is cut", 10*time.Second, func() bool { return f.watcher.Cuts() == 1 && f.watcher.Subscribers() == 0 })
	s := &sseStream{t: t, resp: resp, events: make(chan sseEvent, 4096)}
	go s.read()
	got := map[string]bool{}
	last := ""
	for _, ev := range s.ends() {
		if ev.name == "change" {
			var c feed.Change
			if err := feed.Decode([]byte(ev.data), &c); err != nil {
				t.Fatal(err)
			}
			got[c.EventID], last = true, ev.id
		}
	}
	if len(got) == 0 || len(got) >= len(cs) {
		t.Fatalf("the slow client got %d of %d changes before the cut", len(got), len(cs))
	}
	// Resume as an EventSource does: from the last id, again if cut again
	// (the rest of the 400 may still be reaching the queue of 4).
	for resumes := 0; len(got) < len(cs); resumes++ {
		if resumes == 50 {
			t.Fatalf("%d of %d changes after %d resumes", len(got), len(cs), resumes)
		}
		r := f.open("/v1/watch", "", "Last-Event-ID", last)
		for ev := range r.events {
			if ev.name != "change" {
				continue
			}
			var c feed.Change
			if err := feed.Decode([]byte(ev.data), &c); err != nil {
				t.Fatal(err)
			}
			if got[c.EventID] {
				t.Fatalf("%s delivered twice", c.EventID)
			}
			got[c.EventID], last = true, ev.id
			if len(got) == len(cs) {
				break
			}
		}
		r.resp.Body.Close()
	}
}

// Stopping the watcher (the service shutting down) ends every stream, and
// releases its subscribers.
func TestWatchShutdownEndsStreams(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	var streams []*sseStream
	for _, p := range []string{"/v1/watch", "/v1/watch?state=ACTIVE", "/v1/watch?cursor=" + f.watcher.EncodeCursor([]int64{0, 0, 0})} {
		streams = append(streams, f.open(p, ""))
	}
	testwait.Until(t, "every watch is subscribed", 10*time.Second, func() bool { return f.watcher.Subscribers() == len(streams) })
	f.stop()
	select {
	case err := <-f.ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		f.ran <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, s := range streams {
		s.ends()
	}
	if n := f.watcher.Subscribers(); n != 0 {
		t.Fatalf("%d subscribers left", n)
	}
	resp := f.request("/v1/watch", "")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a watch after shutdown: %d", resp.StatusCode)
	}
}

// A watch resumed from a cursor reads the missed changes from the feed
// itself (catch-up): those must pass the same filter as live ones, the
// token's own prefix first. A tenant resuming never sees another tenant's
// changes, and filters hold across the catch-up.
func TestWatchResumeKeepsTenantAndFilters(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{}, "acme")
	s := f.open("/v1/watch?state=ACTIVE", f.tokens["acme"])
	f.produce(chg("acme:1", 0, 0, "ACTIVE"))
	_, last := s.change()
	s.resp.Body.Close() // the connection drops; meanwhile:
	f.produce(chg("beta:secret", 0, 1, "ACTIVE"), chg("acme:2", 0, 2, "PAUSED"), chg("acme:3", 0, 3, "ACTIVE"))
	r := f.open("/v1/watch?state=ACTIVE", f.tokens["acme"], "Last-Event-ID", last)
	c, id := r.change()
	if c.SessionID != "acme:3" {
		t.Fatalf("resumed acme's ACTIVE watch: got %s (%s), want acme:3", c.SessionID, c.To)
	}
	// The cursor moved past what the filter skipped: resuming from it
	// again delivers only what is new.
	r.resp.Body.Close()
	f.produce(chg("acme:4", 0, 4, "ACTIVE"))
	again := f.open("/v1/watch?state=ACTIVE", f.tokens["acme"], "Last-Event-ID", id)
	if c, _ := again.change(); c.SessionID != "acme:4" {
		t.Fatalf("resumed again: got %s, want acme:4", c.SessionID)
	}
}

// levelCounter counts log records by level and message.
type levelCounter struct {
	mu   sync.Mutex
	seen map[string]int // "LEVEL message"
}

func (c *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *levelCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[r.Level.String()+" "+r.Message]++
	return nil
}
func (c *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *levelCounter) WithGroup(string) slog.Handler      { return c }
func (c *levelCounter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[key]
}
func (c *levelCounter) warnings() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.seen {
		if strings.HasPrefix(k, "WARN ") {
			n += v
		}
	}
	return n
}

// TestWatchWaitsQuietlyForTheFeed: at start the changes topic may not exist
// yet (the projector creates it). The watcher retries each second; it says
// so once, not at every retry, and says when it reads the feed.
func TestWatchWaitsQuietlyForTheFeed(t *testing.T) {
	c := kafkatest.Start(t, kfake.SeedTopics(watchParts, topic))
	logs := &levelCounter{seen: map[string]int{}}
	w := query.NewWatcher(kafka.Config{Brokers: c.ListenAddrs()}, topic, query.WatchOptions{Log: slog.New(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	testwait.Until(t, "three attempts to read the feed", 10*time.Second, func() bool {
		return logs.count("DEBUG watch: the change feed is not readable yet") >= 3
	})
	if n := logs.warnings(); n > 1 {
		t.Fatalf("%d warnings while waiting for the changes topic (%v), want at most one", n, logs.seen)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), watchParts, 1, nil, feed.Topic(topic)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the watcher reads the feed", 10*time.Second, w.Ready)
	if logs.count("INFO watch: reading the change feed") != 1 {
		t.Fatalf("no record that the watcher reads the feed: %v", logs.seen)
	}
}

// TestWatchMetrics: correx.query.watches counts the open streams, and
// correx.query.watches.cut is exported at 0 before any cut.
func TestWatchMetrics(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	srv := httptest.NewServer(query.NewHandler(f.store, topic, nil, query.Options{Watch: f.watcher, Meter: mp}))
	t.Cleanup(srv.Close)
	collect := func() (open, cut int64) {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		open, cut = -1, -1
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Gauge[int64]:
					if m.Name == "correx.query.watches" && len(d.DataPoints) == 1 {
						open = d.DataPoints[0].Value
					}
				case metricdata.Sum[int64]:
					if m.Name == "correx.query.watches.cut" && len(d.DataPoints) == 1 {
						cut = d.DataPoints[0].Value
					}
				}
			}
		}
		return open, cut
	}
	if open, cut := collect(); open != 0 || cut != 0 {
		t.Fatalf("before any watch: watches %d, cut %d; want both exported at 0", open, cut)
	}
	var bodies []io.Closer
	for _, path := range []string{"/v1/watch", "/v1/watch?state=ACTIVE"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		bodies = append(bodies, resp.Body)
	}
	if open, _ := collect(); open != 2 {
		t.Errorf("two streams open: watches %d, want 2", open)
	}
	for _, b := range bodies {
		b.Close()
	}
	testwait.Until(t, "the closed streams leave correx.query.watches", 10*time.Second, func() bool {
		open, _ := collect()
		return open == 0
	})
}
