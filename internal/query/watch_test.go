package query_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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

// A watch streams the changes that pass its filters, each with a cursor,
// and the filters combine (all must hold).
func TestWatchStreamsChangesWithFilters(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	paths := map[string]string{
		"all":    "/v1/watch",
		"state":  "/v1/watch?state=PAUSED",
		"labels": "/v1/watch?label=team=a&label=env=prod",
		"prefix": "/v1/watch?prefix=acme:",
		"parent": "/v1/watch?parent=p-1",
		"mixed":  "/v1/watch?prefix=acme:&state=PAUSED&label=team=a",
	}
	streams := map[string]*sseStream{}
	for name, p := range paths {
		streams[name] = f.open(p, "")
	}
	with := func(c feed.Change, labels map[string]string, parent string) feed.Change {
		c.Labels, c.ParentSessionID = labels, parent
		return c
	}
	cs := []feed.Change{
		chg("acme:1", 0, 0, "ACTIVE"),
		with(chg("beta:1", 0, 1, "PAUSED"), map[string]string{"team": "a", "env": "prod"}, ""),
		with(chg("acme:2", 0, 2, "PAUSED"), map[string]string{"team": "a"}, "p-1"),
		with(chg("beta:2", 0, 3, "ACTIVE"), map[string]string{"team": "a", "env": "dev"}, "p-1"),
		with(chg("acme:3", 0, 4, "PAUSED"), map[string]string{"team": "b", "env": "prod"}, "p-2"),
	}
	// The last change passes every filter: each stream is read up to it.
	sentinel := with(chg("acme:z", 0, 5, "PAUSED"), map[string]string{"team": "a", "env": "prod"}, "p-1")
	f.produce(append(cs, sentinel)...)
	want := map[string][]string{ // restated by hand from the table above
		"all":    {"acme:1", "beta:1", "acme:2", "beta:2", "acme:3", "acme:z"},
		"state":  {"beta:1", "acme:2", "acme:3", "acme:z"},
		"labels": {"beta:1", "acme:z"},
		"prefix": {"acme:1", "acme:2", "acme:3", "acme:z"},
		"parent": {"acme:2", "beta:2", "acme:z"},
		"mixed":  {"acme:2", "acme:z"},
	}
	for name, s := range streams {
		var got []string
		for {
			c, id := s.change()
			if _, err := f.watcher.DecodeCursor(id); err != nil {
				t.Fatalf("%s: id %q is not a cursor: %v", name, id, err)
			}
			got = append(got, c.SessionID)
			if c.SessionID == "acme:z" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[name]) {
			t.Errorf("%s (%s): got %v, want %v", name, paths[name], got, want[name])
		}
	}
	// The data is the change's canonical JSON.
	s := f.open("/v1/watch", "")
	f.produce(sentinel)
	ev := s.next()
	if want := string(sentinel.AppendJSON(nil)); ev.data != want {
		t.Errorf("data\n%s\nwant\n%s", ev.data, want)
	}
}

// Resuming with the id of the last event read (Last-Event-ID, or ?cursor=)
// delivers exactly the records after it, across partitions: none missed,
// none twice.
func TestWatchResumesWithoutGapOrDuplicate(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	s := f.open("/v1/watch", "")
	var cs []feed.Change
	for i := range 30 {
		cs = append(cs, chg(fmt.Sprintf("s-%d", i%7), int32(i%watchParts), int64(i), "ACTIVE"))
	}
	f.produce(cs...)
	seen := map[string]bool{}
	var last string
	for range 10 {
		c, id := s.change()
		seen[c.EventID], last = true, id
	}
	s.resp.Body.Close() // the connection drops
	var more []feed.Change
	for i := 30; i < 50; i++ {
		more = append(more, chg(fmt.Sprintf("s-%d", i%7), int32(i%watchParts), int64(i), "PAUSED"))
	}
	f.produce(more...)
	want := map[string]bool{}
	for _, c := range append(cs, more...) {
		if !seen[c.EventID] {
			want[c.EventID] = true
		}
	}
	for _, how := range []string{"header", "query"} {
		var r *sseStream
		if how == "header" {
			r = f.open("/v1/watch", "", "Last-Event-ID", last)
		} else {
			r = f.open("/v1/watch?cursor="+last, "")
		}
		got := map[string]bool{}
		for range len(want) {
			c, _ := r.change()
			if got[c.EventID] || seen[c.EventID] {
				t.Fatalf("%s: %s delivered twice", how, c.EventID)
			}
			got[c.EventID] = true
		}
		// One more change shows that nothing else was pending before it.
		tail := chg("s-tail-"+how, 1, 100, "ACTIVE")
		f.produce(tail)
		if c, _ := r.change(); c.EventID != tail.EventID {
			t.Fatalf("%s: after the missed records came %s, want the new %s", how, c.EventID, tail.EventID)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: resumed with %d records, want %d", how, len(got), len(want))
		}
		r.resp.Body.Close()
		want[tail.EventID] = true // a later resume from the same id gets it too
	}
}

// A cursor older than the feed's retention gets 410, and bad cursors and
// parameters get 400 naming the field.
func TestWatchRefusesBadRequests(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	f.produce(chg("s-1", 0, 0, "ACTIVE"), chg("s-1", 0, 1, "PAUSED"))
	old := f.watcher.EncodeCursor([]int64{0, 0, 0})
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: feed.Topic(topic), Partition: 0, At: 2})
	if _, err := f.adm.DeleteRecords(context.Background(), offs); err != nil {
		t.Fatal(err)
	}
	get := func(path string, header ...string) (*http.Response, []byte) {
		resp := f.request(path, "", header...)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp, b[:n]
	}
	resp, body := get("/v1/watch", "Last-Event-ID", old)
	if resp.StatusCode != http.StatusGone || !strings.Contains(string(body), query.TypeCursorExpired) {
		t.Errorf("expired cursor: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ path, header, field string }{
		{"/v1/watch?state=BOGUS", "", "state"},
		{"/v1/watch?label=Team=a", "", "label"},
		{"/v1/watch?label=team", "", "label"},
		{"/v1/watch?prefix=bad%20prefix", "", "prefix"},
		{"/v1/watch?parent=bad%20id", "", "parent"},
		{"/v1/watch?cursor=not-a-cursor", "", "cursor"},
		{"/v1/watch", "garbage!", "Last-Event-ID"},
		{"/v1/watch?cursor=" + f.watcher.EncodeCursor([]int64{0, 0, 0, 0, 0}), "", "cursor"},
		{"/v1/sessions/bad%20id/watch", "", "id"},
	} {
		var resp *http.Response
		var body []byte
		if c.header != "" {
			resp, body = get(c.path, "Last-Event-ID", c.header)
		} else {
			resp, body = get(c.path)
		}
		wantProblem(t, resp, body, 400, c.field)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// A token bound to a prefix sees only its sessions' changes, whatever the
// filters ask, and a session watch outside its prefix is a 404 with the
// same bytes as a missing session.
func TestWatchTenantsAreIsolated(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{}, "acme", "beta")
	acme := f.open("/v1/watch", f.tokens["acme"])
	acmeWide := f.open("/v1/watch?prefix=ac", f.tokens["acme"])
	acmeAsksBeta := f.open("/v1/watch?prefix=beta:", f.tokens["acme"])
	beta := f.open("/v1/watch", f.tokens["beta"])
	f.produce(chg("beta:1", 0, 0, "ACTIVE"), chg("acme:1", 0, 1, "ACTIVE"), chg("beta:2", 0, 2, "ACTIVE"),
		chg("acme:2", 0, 3, "ACTIVE"), chg("beta:z", 0, 4, "ACTIVE"), chg("acme:z", 0, 5, "ACTIVE"))
	for name, c := range map[string]struct {
		s    *sseStream
		want string
	}{
		"acme": {acme, "[acme:1 acme:2 acme:z]"}, "acme wide prefix": {acmeWide, "[acme:1 acme:2 acme:z]"},
		"beta": {beta, "[beta:1 beta:2 beta:z]"},
	} {
		var got []string
		for len(got) == 0 || !strings.HasSuffix(got[len(got)-1], ":z") {
			ch, _ := c.s.change()
			got = append(got, ch.SessionID)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: got %v, want %s", name, got, c.want)
		}
	}
	// The reader offered beta:z and acme:z (partition 0, in order) after
	// every earlier change, so a beta change for acme would be queued by
	// now; give the stream a moment to have written it.
	f.produce(chg("acme:after", 0, 6, "ACTIVE"))
	acme.change()
	for quiet := time.After(100 * time.Millisecond); ; {
		select {
		case ev := <-acmeAsksBeta.events:
			if ev.comment == "" && !ev.idOnly() { // a sealed cursor may come
				t.Errorf("acme watching prefix beta: got %+v", ev)
			}
			continue
		case <-quiet:
		}
		break
	}

	var s snapshot.Snapshot
	var r fsm.Reducer
	e := fsm.NewEvent(fsm.EventID{1}, "beta:1", fsm.SessionCreated, changeAt, fsm.Fields{})
	s.Fold(&r, &e, snapshot.Position{Partition: 0, Offset: 0})
	if _, err := f.store.PutBatch(context.Background(), []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	read := func(path, token string) (int, string) {
		resp := f.request(path, token)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	st1, other := read("/v1/sessions/beta:1/watch", f.tokens["acme"])
	st2, missing := read("/v1/sessions/acme:nobody/watch", f.tokens["acme"])
	if st1 != 404 || st2 != 404 || other != missing {
		t.Errorf("another tenant's session: %d %s\nmissing session: %d %s", st1, other, st2, missing)
	}
	bs := f.open("/v1/sessions/beta:1/watch", f.tokens["beta"])
	if ev := bs.next(); ev.name != "snapshot" {
		t.Errorf("the owner's session watch began with %+v", ev)
	}
}

// A session's watch begins with its snapshot; changes at or below the
// snapshot's position that arrive afterwards are dropped, later ones and
// only the session's follow.
func TestSessionWatchStartsWithSnapshot(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted} {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1)}, "s-1", et, changeAt.Add(time.Duration(i)*time.Second), fsm.Fields{})
		s.Fold(&r, &e, snapshot.Position{Partition: 1, Offset: 10 + int64(i)})
	}
	if _, err := f.store.PutBatch(context.Background(), []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	w := f.open("/v1/sessions/s-1/watch", "")
	ev := w.next()
	var got snapshot.Snapshot
	if ev.name != "snapshot" || json.Unmarshal([]byte(ev.data), &got) != nil || got.ID != "s-1" || got.Version != 2 {
		t.Fatalf("first event: %+v", ev)
	}
	if _, err := f.watcher.DecodeCursor(ev.id); err != nil {
		t.Fatalf("snapshot id %q: %v", ev.id, err)
	}
	f.produce(chg("s-1", 1, 10, "CREATED"), chg("s-1", 1, 11, "ACTIVE"), chg("o-1", 1, 12, "ACTIVE"),
		chg("s-1", 1, 13, "PAUSED"), chg("s-1", 1, 14, "ACTIVE"))
	c1, id1 := w.change()
	c2, _ := w.change()
	if c1.Position.Offset != 13 || c2.Position.Offset != 14 || c1.SessionID != "s-1" || c2.SessionID != "s-1" {
		t.Fatalf("after the snapshot: %+v then %+v, want s-1 at 1:13 and 1:14", c1.Position, c2.Position)
	}
	// Resuming after 1:13 gives 1:14 and nothing before it.
	rw := f.open("/v1/sessions/s-1/watch", "", "Last-Event-ID", id1)
	if c, _ := rw.change(); c.Position.Offset != 14 {
		t.Fatalf("resumed at %+v, want 1:14", c.Position)
	}
	resp := f.request("/v1/sessions/nobody/watch", "")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("missing session: %d", resp.StatusCode)
	}
}

// An idle stream carries a comment heartbeat, and outlives the server's
// read and write timeouts (300 ms in the fixture).
func TestWatchHeartbeat(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{Heartbeat: 20 * time.Millisecond})
	s := f.open("/v1/watch", "")
	pings := 0
	start := time.Now()
	for time.Since(start) < 600*time.Millisecond {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended after %v", time.Since(start))
			}
			if ev.comment == "ping" {
				pings++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat within 10s")
		}
	}
	if pings == 0 {
		t.Fatal("no heartbeat")
	}
	f.produce(chg("s-1", 0, 0, "ACTIVE"))
	if c, _ := s.change(); c.SessionID != "s-1" {
		t.Fatalf("got %s", c.SessionID)
	}
}

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
