package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
)

func TestGetNotFound(t *testing.T) {
	st := startStack(t, 2)
	c := newClient(t, st, nil)
	_, err := c.Get(ctxFor(t, 30*time.Second), "no:such")
	var se *client.StatusError
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &se) || se.Status != 404 {
		t.Fatalf("err = %v, want ErrNotFound from a 404", err)
	}
}

// TestListPages lists 25 sessions 10 at a time, with a label filter and
// without.
func TestListPages(t *testing.T) {
	st := startStack(t, 2)
	c := newClient(t, st, nil)
	ctx := ctxFor(t, 60*time.Second)
	var evs []client.Event
	for i := range 25 {
		team := "a"
		if i%5 == 0 {
			team = "b"
		}
		evs = append(evs, client.SessionCreated(fmt.Sprintf("list:%02d", i), client.Labels(map[string]string{"team": team})))
	}
	if _, err := c.SendAndWait(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	pages := 0
	for p, err := range c.List(ctx, client.IDPrefix("list:"), client.Limit(10)) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range p.Sessions {
			if seen[s.SessionID] {
				t.Errorf("%s listed twice", s.SessionID)
			}
			seen[s.SessionID] = true
		}
	}
	if len(seen) != 25 || pages < 3 {
		t.Errorf("%d sessions in %d pages, want 25 in at least 3", len(seen), pages)
	}
	var b []string
	for p, err := range c.List(ctx, client.IDPrefix("list:"), client.HasLabels(map[string]string{"team": "b"}), client.StateIs("CREATED")) {
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Sessions {
			b = append(b, s.SessionID)
		}
	}
	if len(b) != 5 {
		t.Errorf("team b: %v, want 5 sessions", b)
	}
	// stopping early stops listing
	n := 0
	for range c.List(ctx, client.IDPrefix("list:"), client.Limit(5)) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("%d pages after break, want 1", n)
	}
}

// cutter is an http.RoundTripper that ends the body of every watch stream
// after its first change, as a dropped connection would.
type cutter struct {
	base    http.RoundTripper
	streams atomic.Int32
	resumed atomic.Int32 // streams that carried Last-Event-ID
}

func (c *cutter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/v1/watch") || resp.StatusCode != 200 {
		return resp, err
	}
	c.streams.Add(1)
	if req.Header.Get("Last-Event-ID") != "" {
		c.resumed.Add(1)
	}
	resp.Body = &cutBody{rc: resp.Body}
	return resp, nil
}

// cutBody passes bytes through until it has passed one complete change
// event, then reports the connection as reset.
type cutBody struct {
	rc   io.ReadCloser
	seen []byte
	done bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, errors.New("connection reset by peer (injected)")
	}
	n, err := b.rc.Read(p)
	b.seen = append(b.seen, p[:n]...)
	if i := bytes.Index(b.seen, []byte("event: change")); i >= 0 {
		if j := bytes.Index(b.seen[i:], []byte("\n\n")); j >= 0 {
			end := i + j + 2
			passed := len(b.seen) - n
			b.done = true
			return max(0, end-passed), nil
		}
	}
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

// TestWatchResumes cuts the stream after every change; the watch resumes
// with its last cursor and delivers each change once, in order. The test
// writes the change records itself, as the projector would, so that it
// knows each one's partition and order; the query service's watch reads
// them from Kafka.
func TestWatchResumes(t *testing.T) {
	st := startStack(t, 2)
	ctx := ctxFor(t, 60*time.Second)
	prod, err := kgo.NewClient(kgo.SeedBrokers(st.Brokers...), kgo.DefaultProduceTopic(feed.Topic(st.Topic)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	// The projector creates the change feed too, when it writes one.
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 2, 1, nil, feed.Topic(st.Topic)); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}

	cut := &cutter{base: http.DefaultTransport}
	c := newClient(t, st, cut)
	type got struct {
		ch  client.Change
		err error
	}
	changes := make(chan got, 64)
	go func() {
		defer close(changes)
		for ch, err := range c.Watch(ctx, client.IDPrefix("watch:")) {
			changes <- got{ch, err}
			if err != nil {
				return
			}
		}
	}()
	// A watch without a cursor starts at the end: write once it is open
	// (the watch answers 503 until the query service reads the feed, and
	// the client retries).
	testwait.Until(t, "the watch opens", 20*time.Second, func() bool { return cut.streams.Load() > 0 })
	const n = 10
	var want []string
	for i := range n {
		id := fmt.Sprintf("watch:%d", i%3)
		ch := feed.Change{SessionID: id, Version: uint64(i + 1), Position: feed.Position{Partition: int32(i % 2), Offset: int64(i)},
			EventID: fmt.Sprintf("ev-%d", i), Type: "SessionStarted", OccurredAt: time.Now().UTC(), Outcome: feed.Applied, From: "CREATED", To: "ACTIVE"}
		want = append(want, ch.EventID)
		rec := &kgo.Record{Key: []byte(id), Value: ch.AppendJSON(nil), Partition: int32(i % 2)}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var recv []string
	perPartition := map[int32][]string{}
	for len(recv) < n {
		select {
		case g := <-changes:
			if g.err != nil {
				t.Fatal(g.err)
			}
			if g.ch.Cursor == "" {
				t.Errorf("change %s without a cursor", g.ch.EventID)
			}
			recv = append(recv, g.ch.EventID)
			perPartition[g.ch.Position.Partition] = append(perPartition[g.ch.Position.Partition], g.ch.EventID)
		case <-ctx.Done():
			t.Fatalf("received %v, want %d changes", recv, n)
		}
	}
	slices.Sort(recv)
	sorted := slices.Clone(want)
	slices.Sort(sorted)
	if !slices.Equal(recv, sorted) {
		t.Errorf("received %v, want each of %v once", recv, want)
	}
	for p, ids := range perPartition {
		var w []string
		for i, id := range want {
			if int32(i%2) == p {
				w = append(w, id)
			}
		}
		if !slices.Equal(ids, w) {
			t.Errorf("partition %d: order %v, want %v", p, ids, w)
		}
	}
	if r := cut.resumed.Load(); r < n-1 {
		t.Errorf("%d streams resumed with Last-Event-ID, want at least %d (one after each cut but the last)", r, n-1)
	}
	t.Logf("%d changes over %d streams (%d resumed with Last-Event-ID)", n, cut.streams.Load(), cut.resumed.Load())
}

// headerSpy records the headers of the requests it passes on.
type headerSpy struct {
	base http.RoundTripper
	last atomic.Pointer[http.Header]
}

func (h *headerSpy) RoundTrip(req *http.Request) (*http.Response, error) {
	hd := req.Header.Clone()
	h.last.Store(&hd)
	return h.base.RoundTrip(req)
}

// TestTokenAndTraceContext checks that requests carry the bearer token and
// the caller's trace context.
func TestTokenAndTraceContext(t *testing.T) {
	st := startStack(t, 2)
	spy := &headerSpy{base: http.DefaultTransport}
	c, err := client.New(client.IngestURL(st.IngestURL), client.QueryURL(st.QueryURL),
		client.Token("cx_secret"), client.HTTPClient(&http.Client{Transport: spy}))
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(ctxFor(t, 30*time.Second),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	if _, err := c.Send(ctx, client.SessionCreated("trace:1")); err != nil {
		t.Fatal(err)
	}
	h := *spy.last.Load()
	if got := h.Get("Authorization"); got != "Bearer cx_secret" {
		t.Errorf("Authorization %q", got)
	}
	if got := h.Get("traceparent"); !strings.Contains(got, tid.String()) {
		t.Errorf("traceparent %q does not carry the caller's trace %s", got, tid)
	}
}

// TestWatchPipeline watches the change feed the projector writes, through
// a stream cut after every change: each transition, rejection and custom
// event of a session arrives once, in order, with its outcome.
func TestWatchPipeline(t *testing.T) {
	st := startStack(t, 2)
	cut := &cutter{base: http.DefaultTransport}
	c := newClient(t, st, cut)
	ctx := ctxFor(t, 60*time.Second)
	changes := make(chan client.Change, 64)
	errc := make(chan error, 1)
	connected := make(chan string, 64)
	go func() {
		onConnect := client.OnConnect(func(cursor string) { connected <- cursor })
		for ch, err := range c.Watch(ctx, client.IDPrefix("wp:"), onConnect) {
			if err != nil {
				errc <- err
				return
			}
			changes <- ch
		}
	}()
	// A watch without a cursor starts at the end: send once it is open.
	select {
	case cursor := <-connected:
		if cursor != "" {
			t.Errorf("the first stream starts from cursor %q, want the end (\"\")", cursor)
		}
	case err := <-errc:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the watch never connected")
	}
	id := "wp:1"
	evs := lifecycle(id)
	if _, err := c.SendAndWait(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	// Applied execution events change no state and write no change
	// (lifecycle's events 2-4: a model turn, a tool call and its end,
	// in ACTIVE); every other event of lifecycle writes one.
	var want []string
	for i, e := range evs {
		if i < 2 || i > 4 {
			want = append(want, e.ID+" "+e.Type)
		}
	}
	var got []string
	for len(got) < len(want) {
		select {
		case ch := <-changes:
			got = append(got, ch.EventID+" "+ch.Type)
			if ch.Type == client.TypeModelRequested && (ch.Outcome != "rejected" || ch.Reason != "execution_while_suspended") {
				t.Errorf("the model request while paused: %s %q", ch.Outcome, ch.Reason)
			}
		case err := <-errc:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("got %d changes of %d: %v", len(got), len(want), got)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes\n got %v\nwant %v", got, want)
	}
	// Every stream after the first resumed, and said so: the stream is cut
	// after each change, so each reconnection has a cursor.
	for len(connected) > 0 {
		if cursor := <-connected; cursor == "" {
			t.Error("a stream reopened at the end after changes were received")
		}
	}
	t.Logf("%d changes over %d streams", len(got), cut.streams.Load())
}
