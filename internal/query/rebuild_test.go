package query_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// rebuildFixture is a broker holding two sessions' events, a Redis holding
// the snapshots folded from them (as the projector stores them), and the
// query API over both with token authentication, configured with the
// timeout defaults fixtureTimeouts.
type rebuildFixture struct {
	t      *testing.T
	store  *snapshot.Store
	srv    *httptest.Server
	folded map[string]*snapshot.Snapshot
	tokens map[string]string // by role: admin, tenant (admin under acme:), reader
}

func newRebuildFixture(t *testing.T) *rebuildFixture {
	t.Helper()
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 3); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	for n, id := range []string{"acme:s-1", "other:s-2"} {
		for i, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused, fsm.SessionCompleted, fsm.SessionResumed} {
			e := fsm.NewEvent(fsm.EventID{byte(n + 1), byte(i + 1)}, id, et, at.Add(time.Duration(i)*time.Second), fsm.Fields{Goal: "g"})
			recs = append(recs, &kgo.Record{Key: []byte(id), Value: fsm.AppendRecord(nil, &e)})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "rb")
	if err != nil {
		t.Fatal(err)
	}
	f := &rebuildFixture{t: t, store: store, folded: map[string]*snapshot.Snapshot{}, tokens: map[string]string{}}
	var red fsm.Reducer
	var entries []snapshot.Entry
	for _, rec := range recs { // ProduceSync set each record's partition and offset
		var e fsm.Event
		if err := fsm.DecodeRecord(rec.Value, &e); err != nil {
			t.Fatal(err)
		}
		s := f.folded[e.SessionID]
		if s == nil {
			s = &snapshot.Snapshot{}
			f.folded[e.SessionID] = s
		}
		s.Fold(&red, &e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
	}
	for _, s := range f.folded {
		entries = append(entries, snapshot.NewEntry(s))
	}
	if _, err := store.PutBatch(ctx, entries); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for role, line := range map[string]string{"admin": "admin", "tenant": "admin prefix=acme:", "reader": "sessions:read"} {
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	guard, err := auth.New(auth.Config{TokensFile: path}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	replayer := &query.KafkaReplayer{Kafka: kafka.Config{Brokers: c.ListenAddrs(), ClientID: "rebuild-test"}, Topic: topic}
	// As Serve configures it.
	f.srv = httptest.NewServer(query.NewHandler(store.WithTimeoutDefaults(fixtureTimeouts()), topic, replayer, query.Options{Guard: guard, Log: quiet}))
	t.Cleanup(f.srv.Close)
	return f
}

// fixtureTimeouts are the service's timeout defaults in the fixture: the
// built-in ones, and an inactivity timeout, which arms a deadline in ACTIVE.
func fixtureTimeouts() fsm.Timeouts {
	t := fsm.DefaultTimeouts()
	t[fsm.TimeoutInactivity] = time.Hour
	return t
}

// do requests a rebuild of id.
func (f *rebuildFixture) do(method, role, id string) (*http.Response, []byte) {
	f.t.Helper()
	return f.request(method, role, "/v1/sessions/"+id+"/rebuild")
}

func (f *rebuildFixture) request(method, role, path string) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.tokens[role])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// stored returns the stored snapshot's encoding.
func (f *rebuildFixture) stored(id string) []byte {
	f.t.Helper()
	s, err := f.store.Get(ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return s.AppendBinary(nil)
}

// TestRebuildRepairsATamperedSnapshot: a stored snapshot changed behind the
// projector's back (same position, another goal and state) is rebuilt from
// the log, reported as differing and replaced; a second rebuild finds
// nothing to repair.
func TestRebuildRepairsATamperedSnapshot(t *testing.T) {
	f := newRebuildFixture(t)
	id := "acme:s-1"
	want := f.folded[id].AppendBinary(nil)
	tampered := *f.folded[id]
	tampered.Goal, tampered.State = "tampered", fsm.StateFailed
	if ok, err := f.store.Replace(ctx, snapshot.NewEntry(&tampered)); err != nil || !ok {
		t.Fatalf("tampering: %v %v", ok, err)
	}
	if bytes.Equal(f.stored(id), want) {
		t.Fatal("the tampered snapshot equals the folded one")
	}
	for i, wantDiffered := range []bool{true, false} {
		resp, body := f.do(http.MethodPost, "admin", id)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("rebuild %d: %d %s", i, resp.StatusCode, body)
		}
		var got struct {
			Snapshot json.RawMessage `json:"snapshot"`
			Differed bool            `json:"differed"`
			Replaced bool            `json:"replaced"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Differed != wantDiffered || got.Replaced != wantDiffered {
			t.Fatalf("rebuild %d: differed %v, replaced %v, want %v: %s", i, got.Differed, got.Replaced, wantDiffered, body)
		}
		if !bytes.Contains(got.Snapshot, []byte(`"goal":"g"`)) || !bytes.Contains(got.Snapshot, []byte(`"state":"ACTIVE"`)) {
			t.Fatalf("rebuild %d: snapshot %s", i, got.Snapshot)
		}
		if !bytes.Equal(f.stored(id), want) {
			t.Fatalf("rebuild %d: the stored snapshot is not the one folded from the log", i)
		}
	}
}

// TestRebuildScopesAndTenants: only admin tokens rebuild (403 for a reader),
// a tenant's admin token sees only its own sessions (404 for another's,
// exactly as for an unknown one), and only POST is allowed.
func TestRebuildScopesAndTenants(t *testing.T) {
	f := newRebuildFixture(t)
	tests := []struct {
		method, role, id string
		status           int
	}{
		{http.MethodPost, "reader", "acme:s-1", http.StatusForbidden},
		{http.MethodPost, "tenant", "other:s-2", http.StatusNotFound},
		{http.MethodPost, "tenant", "acme:nope", http.StatusNotFound},
		{http.MethodPost, "tenant", "acme:s-1", http.StatusOK},
		{http.MethodGet, "admin", "acme:s-1", http.StatusMethodNotAllowed},
		{http.MethodPost, "admin", "bad id!", http.StatusBadRequest},
	}
	var notFoundBody []byte
	for _, tt := range tests {
		resp, body := f.do(tt.method, tt.role, strings.ReplaceAll(tt.id, " ", "%20"))
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s as %s: %d, want %d: %s", tt.method, tt.id, tt.role, resp.StatusCode, tt.status, body)
		}
		if tt.status == http.StatusNotFound {
			if notFoundBody != nil && !bytes.Equal(body, notFoundBody) {
				t.Errorf("404 bodies differ: %s vs %s", body, notFoundBody)
			}
			notFoundBody = body
		}
		if tt.status >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s as %s: content type %q", tt.method, tt.id, tt.role, resp.Header.Get("Content-Type"))
		}
	}
}

// TestReplayShowsTheServiceTimeoutDefaults: a session created without
// timeouts, replayed from the log, shows exactly what its stored snapshot
// shows, the effective timeouts (the service defaults) and the deadline
// they arm included, and matches it.
func TestReplayShowsTheServiceTimeoutDefaults(t *testing.T) {
	f := newRebuildFixture(t)
	id := "acme:s-1"
	resp, body := f.request(http.MethodGet, "admin", "/v1/sessions/"+id)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get: %d %s", resp.StatusCode, body)
	}
	var stored map[string]any
	if err := json.Unmarshal(body, &stored); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"inactivity": "1h0m0s", "approval": "24h0m0s", "cancellation": "5m0s"}
	if !reflect.DeepEqual(stored["timeouts"], want) || stored["deadline"] == nil {
		t.Fatalf("stored snapshot: timeouts %v, deadline %v; want %v and the inactivity deadline", stored["timeouts"], stored["deadline"], want)
	}
	resp, body = f.request(http.MethodGet, "admin", "/v1/sessions/"+id+"/replay")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("replay: %d %s", resp.StatusCode, body)
	}
	var replay struct {
		Snapshot      map[string]any `json:"snapshot"`
		MatchesStored bool           `json:"matchesStored"`
	}
	if err := json.Unmarshal(body, &replay); err != nil {
		t.Fatal(err)
	}
	if !replay.MatchesStored {
		t.Errorf("matchesStored false: %s", body)
	}
	if !reflect.DeepEqual(replay.Snapshot, stored) {
		for k, v := range stored {
			if !reflect.DeepEqual(replay.Snapshot[k], v) {
				t.Errorf("replayed %s: %v, stored %v", k, replay.Snapshot[k], v)
			}
		}
		for k, v := range replay.Snapshot {
			if _, ok := stored[k]; !ok {
				t.Errorf("replayed %s: %v, not in the stored snapshot", k, v)
			}
		}
	}
}
