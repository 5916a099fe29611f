package query_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const watchParts = 3

type watchFixture struct {
	t       *testing.T
	store   *snapshot.Store
	watcher *query.Watcher
	srv     *httptest.Server
	prod    *kgo.Client
	adm     *kadm.Client
	stop    context.CancelFunc
	ran     chan error
	tokens  map[string]string // name -> bearer token; empty without authentication
	// tokenFile holds the tokens' lines (the guard reloads it on SIGHUP).
	tokenFile string
	lines     map[string]string // name -> its line in tokenFile
}

// newWatchFixture serves the query API with a watcher over a kfake broker
// holding "events" and "events.changes" (3 partitions each). The HTTP
// server has short read and write timeouts, which a stream must outlive.
// Each name in tokens gets a sessions:read token bound to prefix "name:".
func newWatchFixture(t *testing.T, o query.WatchOptions, tokens ...string) *watchFixture {
	t.Helper()
	f := newWatchFixtureOn(t, kfake.SeedTopics(watchParts, topic, feed.Topic(topic)), o, tokens...)
	testwait.Until(t, "the watcher reads the feed", 10*time.Second, f.watcher.Ready)
	return f
}

// newWatchFixtureOn is newWatchFixture on a broker seeded as seed says,
// returned without waiting for the watcher.
func newWatchFixtureOn(t *testing.T, seed kfake.Opt, o query.WatchOptions, tokens ...string) *watchFixture {
	t.Helper()
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	c := kafkatest.Start(t, seed)
	kcfg := kafka.Config{Brokers: c.ListenAddrs()}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	f := &watchFixture{t: t, store: store, watcher: query.NewWatcher(kcfg, topic, o), ran: make(chan error, 1),
		tokens: map[string]string{}, lines: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() { f.ran <- f.watcher.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-f.ran
	})
	qo := query.Options{Watch: f.watcher}
	if len(tokens) > 0 {
		var lines []string
		for _, name := range tokens {
			tok, err := auth.NewToken()
			if err != nil {
				t.Fatal(err)
			}
			f.tokens[name] = tok
			f.lines[name] = auth.HashToken(tok) + " sessions:read prefix=" + name + ": name=" + name
			lines = append(lines, f.lines[name])
		}
		f.tokenFile = filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(f.tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if qo.Guard, err = auth.New(auth.Config{TokensFile: f.tokenFile}, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		qo.Guard.Watch(ctx) // reloads on SIGHUP
	}
	f.srv = httptest.NewUnstartedServer(query.NewHandler(store, topic, nil, qo))
	f.srv.Config.ReadTimeout, f.srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	// Small send buffers, so that a client that does not read blocks the
	// server's writes after a few kilobytes rather than megabytes.
	f.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096)
		}
		return ctx
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	if f.prod, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(feed.Topic(topic)),
		kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.prod.Close)
	f.adm = kadm.NewClient(f.prod)
	return f
}

var changeAt = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

// chg is a change of session id, recorded at events position p:off.
func chg(id string, p int32, off int64, to string) feed.Change {
	return feed.Change{SessionID: id, Version: uint64(off + 1), Position: feed.Position{Partition: p, Offset: off},
		EventID: fmt.Sprintf("ev-%s-%d-%d", id, p, off), Type: "SessionStarted", OccurredAt: changeAt,
		Outcome: feed.Applied, From: "CREATED", To: to}
}

// produce writes the changes to the changes topic, each on its events
// partition, in order.
func (f *watchFixture) produce(cs ...feed.Change) {
	f.t.Helper()
	recs := make([]*kgo.Record, len(cs))
	for i := range cs {
		recs[i] = &kgo.Record{Key: []byte(cs[i].SessionID), Value: cs[i].AppendJSON(nil), Partition: cs[i].Position.Partition}
	}
	if err := f.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

type sseEvent struct {
	name, id, data string
	comment        string // a comment line's text, for a comment
}

// idOnly reports whether ev carries only a cursor: it moves the client's
// last event id and is not dispatched (HTML, "dispatch the event").
func (ev sseEvent) idOnly() bool {
	return ev.comment == "" && ev.name == "" && ev.data == "" && ev.id != ""
}

// sseStream reads a Server-Sent Events body: fields per the HTML
// specification's event-stream format (event:, id:, data:, comments).
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent // closed at the end of the body
}

func (f *watchFixture) request(path, token string, header ...string) *http.Response {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// open starts a watch and reads it in the background.
func (f *watchFixture) open(path, token string, header ...string) *sseStream {
	f.t.Helper()
	resp := f.request(path, token, header...)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		f.t.Fatalf("%s: %d %q: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b[:n])
	}
	s := &sseStream{t: f.t, resp: resp, events: make(chan sseEvent, 4096)}
	f.t.Cleanup(func() { resp.Body.Close() })
	go s.read()
	return s
}

func (s *sseStream) read() {
	defer close(s.events)
	sc := bufio.NewScanner(s.resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var ev sseEvent
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" || len(data) > 0 || ev.id != "" {
				ev.data = strings.Join(data, "\n")
				s.events <- ev
			}
			ev, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
			s.events <- sseEvent{comment: strings.TrimSpace(line[1:])}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				ev.name = value
			case "id":
				ev.id = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// next returns the next event, skipping comments; it fails the test when
// the stream ends or nothing comes within 10 s.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatal("the stream ended")
			}
			if ev.comment == "" && !ev.idOnly() {
				return ev
			}
		case <-timeout:
			s.t.Fatal("no event within 10s")
		}
	}
}

// change returns the next event, which must be a change.
func (s *sseStream) change() (feed.Change, string) {
	s.t.Helper()
	ev := s.next()
	var c feed.Change
	if ev.name != "change" || ev.id == "" || feed.Decode([]byte(ev.data), &c) != nil {
		s.t.Fatalf("not a change event: %+v", ev)
	}
	return c, ev.id
}

// ends waits (10 s at most) for the end of the stream, returning the
// events read until then.
func (s *sseStream) ends() []sseEvent {
	s.t.Helper()
	var out []sseEvent
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			s.t.Fatal("the stream did not end within 10s")
		}
	}
}
