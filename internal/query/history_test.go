package query_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// historyFixture is a broker holding three sessions' events interleaved on
// one partition, a Redis holding the snapshots folded from them, and the
// expected history of each (what snapshot.Fold said of every event).
type historyFixture struct {
	t       *testing.T
	brokers []string
	store   *snapshot.Store
	want    map[string][]wire.HistoryEntry
	events  map[string][]fsm.Event // each session's events, in the log's order
	tokens  map[string]string
	guard   *auth.Guard
	quiet   *slog.Logger
	client  *http.Client // nil: http.DefaultClient
}

func newHistoryFixture(t *testing.T) *historyFixture {
	t.Helper()
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 1); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	ids := []string{"acme:h-1", "acme:h-2", "other:h-3"}
	var recs []*kgo.Record
	var evs []fsm.Event
	seq := byte(0)
	for i := range 40 {
		for n, id := range ids {
			seq++
			eid := fsm.EventID{byte(n + 1), byte(i), seq}
			t := at.Add(time.Duration(i) * time.Second)
			var e fsm.Event
			switch i {
			case 0:
				e = fsm.NewEvent(eid, id, fsm.SessionCreated, t, fsm.Fields{Goal: "g"})
			case 1:
				e = fsm.NewEvent(eid, id, fsm.SessionStarted, t, fsm.Fields{})
			case 2:
				e = fsm.NewEvent(eid, id, fsm.EventCustom, t, fsm.Fields{})
				e.Custom = "x.acme.Note"
			case 3: // not paused: rejected
				e = fsm.NewEvent(eid, id, fsm.SessionResumed, t, fsm.Fields{})
			case 4: // a resent SessionStarted: a duplicate
				e = evs[len(evs)-3*3]
				e.OccurredAt = t
			case 5: // armed at version 1, the session is at 3: superseded
				e = fsm.NewEvent(eid, id, fsm.TimeoutExpired, t, fsm.Fields{Timeout: fsm.TimeoutInactivity, ArmedVersion: 1, HasArmedVersion: true})
			case 6:
				e = fsm.NewEvent(eid, id, fsm.SessionPaused, t, fsm.Fields{})
			case 7:
				e = fsm.NewEvent(eid, id, fsm.SessionResumed, t, fsm.Fields{})
			case 8:
				e = fsm.NewEvent(eid, id, fsm.ApprovalRequested, t, fsm.Fields{RequestID: "r-1", HasRequestID: true})
			case 9: // decided by alice, sent through ingest by ops-bot
				e = fsm.NewEvent(eid, id, fsm.ApprovalGranted, t, fsm.Fields{RequestID: "r-1", HasRequestID: true, By: "alice"})
				e.SentBy = "ops-bot"
			case 39:
				e = fsm.NewEvent(eid, id, fsm.SessionCompleted, t, fsm.Fields{})
			default:
				e = fsm.NewEvent(eid, id, fsm.ModelRequested, t, fsm.Fields{})
			}
			evs = append(evs, e)
			recs = append(recs, &kgo.Record{Key: []byte(id), Value: fsm.AppendRecord(nil, &e)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "hist")
	if err != nil {
		t.Fatal(err)
	}
	f := &historyFixture{t: t, brokers: c.ListenAddrs(), store: store, want: map[string][]wire.HistoryEntry{}, events: map[string][]fsm.Event{}, tokens: map[string]string{},
		quiet: slog.New(slog.NewTextHandler(io.Discard, nil))}
	folded := map[string]*snapshot.Snapshot{}
	var red fsm.Reducer
	for i, rec := range recs {
		e := &evs[i]
		s := folded[e.SessionID]
		if s == nil {
			s = &snapshot.Snapshot{}
			folded[e.SessionID] = s
		}
		pos := snapshot.Position{Partition: rec.Partition, Offset: rec.Offset}
		o, _ := s.Fold(&red, e, pos)
		en := wire.HistoryEntry{Version: s.Version, Position: pos, EventID: e.ID.String(), Type: e.TypeName(),
			OccurredAt: e.OccurredAt, Outcome: o.Result.String(), To: o.To.String()}
		if o.From != fsm.StateNone {
			en.From = o.From.String()
		}
		if o.Reason != fsm.ReasonNone {
			en.Reason = o.Reason.String()
		}
		if e.Type == fsm.ApprovalRequested || e.Type == fsm.ApprovalGranted {
			en.RequestID, en.By, en.SentBy = e.Fields.RequestID, e.Fields.By, e.SentBy
		}
		f.want[e.SessionID] = append(f.want[e.SessionID], en)
		f.events[e.SessionID] = append(f.events[e.SessionID], *e)
	}
	var entries []snapshot.Entry
	for _, s := range folded {
		entries = append(entries, snapshot.NewEntry(s))
	}
	if _, err := store.PutBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	// The fixture's history holds every outcome, and a decision whose
	// sender is not its decider.
	h1 := f.want["acme:h-1"]
	if d := h1[9]; d.Outcome != "applied" || d.RequestID != "r-1" || d.By != "alice" || d.SentBy != "ops-bot" {
		t.Fatalf("the fixture's decision is %+v", d)
	}
	for i, want := range map[int]string{2: "applied", 3: "rejected", 4: "duplicate", 5: "superseded"} {
		if h1[i].Outcome != want {
			t.Fatalf("the fixture's event %d is %s, want %s", i, h1[i].Outcome, want)
		}
	}
	var lines []string
	for role, line := range map[string]string{"admin": "admin", "reader": "sessions:read", "other": "sessions:read prefix=other:"} {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[role] = tok
		lines = append(lines, auth.HashToken(tok)+" "+line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f.guard, err = auth.New(auth.Config{TokensFile: path}, f.quiet); err != nil {
		t.Fatal(err)
	}
	return f
}

// server serves the query API over the fixture, with o.
func (f *historyFixture) server(o query.Options) (*httptest.Server, *query.Handler) {
	f.t.Helper()
	o.Guard, o.Log = f.guard, f.quiet
	replayer := &query.KafkaReplayer{Kafka: kafka.Config{Brokers: f.brokers, ClientID: "history-test"}, Topic: topic}
	h := query.NewHandler(f.store, topic, replayer, o)
	srv := httptest.NewServer(h)
	f.t.Cleanup(srv.Close)
	return srv, h
}

func (f *historyFixture) get(srv *httptest.Server, role, id string, q url.Values) (int, []byte) {
	f.t.Helper()
	return f.request(http.MethodGet, srv, role, "/v1/sessions/"+id+"/history?"+q.Encode())
}

func (f *historyFixture) request(method string, srv *httptest.Server, role, path string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens[role])
	cl := f.client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// page reads one page, which must be a 200.
func (f *historyFixture) page(srv *httptest.Server, id, after string, limit int) wire.HistoryPage {
	f.t.Helper()
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", itoa(limit))
	}
	status, body := f.get(srv, "reader", id, q)
	if status != http.StatusOK {
		f.t.Fatalf("history %s after %q: %d %s", id, after, status, body)
	}
	var p wire.HistoryPage
	if err := json.Unmarshal(body, &p); err != nil {
		f.t.Fatalf("%v: %s", err, body)
	}
	return p
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func encoded(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHistoryPages pages through a session's history three entries at a
// time, and in one page: every event of the session appears once, in the
// log's order, with the fold's outcome (applied, rejected, duplicate,
// superseded; the other sessions' events between them left out), and the
// last page's next is null. Each page continues from the fold state the
// previous one left: none folds the session again from its start.
func TestHistoryPages(t *testing.T) {
	f := newHistoryFixture(t)
	srv, h := f.server(query.Options{})
	id := "acme:h-1"
	var got []wire.HistoryEntry
	after, pages := "", 0
	for {
		p := f.page(srv, id, after, 3)
		pages++
		if len(p.History) == 0 || len(p.History) > 3 {
			t.Fatalf("page %d holds %d entries", pages, len(p.History))
		}
		got = append(got, p.History...)
		if p.Next == nil {
			break
		}
		after = *p.Next
	}
	if w, g := encoded(t, f.want[id]), encoded(t, got); w != g {
		t.Fatalf("paged history\n got %s\nwant %s", g, w)
	}
	if pages != (len(f.want[id])+2)/3 {
		t.Errorf("%d pages for %d entries, 3 a page", pages, len(got))
	}
	if n := h.HistoryRefolds(); n != 0 {
		t.Errorf("%d pages folded the session again from its start", n)
	}
	whole := f.page(srv, id, "", 0)
	if whole.Next != nil || encoded(t, whole.History) != encoded(t, f.want[id]) {
		t.Fatalf("one page: next %v, %d entries", whole.Next, len(whole.History))
	}
}

// TestHistoryCursorWithoutTheCachedFold: a cursor taken to a replica
// sharing the key but not the fold state (here, one that keeps none) gives
// the same next page, by folding the session again up to the cursor; a
// replica with another key refuses it (400 naming after).
func TestHistoryCursorWithoutTheCachedFold(t *testing.T) {
	f := newHistoryFixture(t)
	key := []byte("a secret of at least sixteen bytes")
	a, _ := f.server(query.Options{CursorKey: key})
	b, hb := f.server(query.Options{CursorKey: key, HistoryCache: -1})
	id := "acme:h-2"
	first := f.page(a, id, "", 7)
	if first.Next == nil {
		t.Fatal("no next after 7 of 40 entries")
	}
	fromA, fromB := f.page(a, id, *first.Next, 7), f.page(b, id, *first.Next, 7)
	if encoded(t, fromA) == "" || encoded(t, fromA.History) != encoded(t, fromB.History) ||
		encoded(t, fromA.History) != encoded(t, f.want[id][7:14]) {
		t.Fatalf("second page\nfrom the caching replica %s\nfrom the other %s", encoded(t, fromA.History), encoded(t, fromB.History))
	}
	if n := hb.HistoryRefolds(); n != 1 {
		t.Errorf("the replica without the state folded again %d times, want 1", n)
	}
	other, _ := f.server(query.Options{CursorKey: []byte("another secret of sixteen bytes")})
	status, body := f.get(other, "reader", id, url.Values{"after": {*first.Next}})
	assertProblem(t, status, body, http.StatusBadRequest, "after")
}

// TestHistoryRefusals: a bad limit or cursor is a 400 naming it, an unknown
// session and another tenant's are the same 404, and only GET is allowed.
func TestHistoryRefusals(t *testing.T) {
	f := newHistoryFixture(t)
	srv, _ := f.server(query.Options{})
	p := f.page(srv, "acme:h-2", "", 5)
	cursorOfH2 := *p.Next
	altered := []byte(cursorOfH2)
	altered[len(altered)/2] ^= 1
	for _, tc := range []struct {
		q     url.Values
		field string
	}{
		{url.Values{"limit": {"0"}}, "limit"},
		{url.Values{"limit": {"1001"}}, "limit"},
		{url.Values{"limit": {"ten"}}, "limit"},
		{url.Values{"limit": {""}}, "limit"},
		{url.Values{"after": {""}}, "after"},
		{url.Values{"after": {"not-a-cursor"}}, "after"},
		{url.Values{"after": {strings.Repeat("A", 5000)}}, "after"},
		{url.Values{"after": {string(altered)}}, "after"},
		{url.Values{"after": {cursorOfH2}}, "after"}, // another session's
	} {
		status, body := f.get(srv, "reader", "acme:h-1", tc.q)
		assertProblem(t, status, body, http.StatusBadRequest, tc.field)
	}
	s1, b1 := f.get(srv, "reader", "acme:nope", nil)
	s2, b2 := f.get(srv, "other", "acme:h-1", nil)
	if s1 != http.StatusNotFound || s2 != http.StatusNotFound || !bytes.Equal(b1, b2) {
		t.Errorf("unknown: %d %s; another tenant's: %d %s", s1, b1, s2, b2)
	}
	if s, _ := f.get(srv, "other", "other:h-3", nil); s != http.StatusOK {
		t.Errorf("a tenant's own session: %d", s)
	}
	if s, body := f.request(http.MethodPost, srv, "reader", "/v1/sessions/acme:h-1/history"); s != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d %s", s, body)
	}
	unavailable := httptest.NewServer(query.NewHandler(f.store, topic, nil, query.Options{}))
	defer unavailable.Close()
	if resp, err := http.Get(unavailable.URL + "/v1/sessions/acme:h-1/history"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("without Kafka: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func assertProblem(t *testing.T, status int, body []byte, wantStatus int, field string) {
	t.Helper()
	var p struct {
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	if status != wantStatus || json.Unmarshal(body, &p) != nil || len(p.Errors) != 1 || p.Errors[0].Field != field {
		t.Errorf("got %d %s, want %d naming %s", status, body, wantStatus, field)
	}
}

// TestReplayAndRebuildCounted: correx.query.replays counts replays by
// outcome (match, mismatch) and correx.query.rebuilds counts rebuilds
// (replaced, then match).
func TestReplayAndRebuildCounted(t *testing.T) {
	f := newHistoryFixture(t)
	tel, _, reader := correxotel.NewForTest()
	srv, _ := f.server(query.Options{Meter: tel.MeterProvider})
	id := "acme:h-1"
	replay := func() {
		if s, body := f.request(http.MethodGet, srv, "admin", "/v1/sessions/"+id+"/replay"); s != http.StatusOK {
			t.Fatalf("replay: %d %s", s, body)
		}
	}
	rebuild := func() {
		if s, body := f.request(http.MethodPost, srv, "admin", "/v1/sessions/"+id+"/rebuild"); s != http.StatusOK {
			t.Fatalf("rebuild: %d %s", s, body)
		}
	}
	replay()
	stored, err := f.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	stored.Goal = "tampered"
	if ok, err := f.store.Replace(ctx, snapshot.NewEntry(stored)); err != nil || !ok {
		t.Fatalf("tampering: %v %v", ok, err)
	}
	replay()
	rebuild()
	rebuild()
	replay()
	got := counts(t, reader)
	want := map[string]int64{"correx.query.replays match": 2, "correx.query.replays mismatch": 1,
		"correx.query.rebuilds replaced": 1, "correx.query.rebuilds match": 1}
	if encoded(t, got) != encoded(t, want) {
		t.Fatalf("counted %v, want %v", got, want)
	}
}

// counts collects the query's counters by name and outcome.
func counts(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !strings.HasPrefix(m.Name, "correx.query.") {
				continue
			}
			for _, p := range d.DataPoints {
				o, _ := p.Attributes.Value("correx.outcome")
				got[m.Name+" "+o.AsString()] += p.Value
			}
		}
	}
	return got
}
