package ingest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDecisionsRecordTheSendingToken: an approval decision that comes
// through ingest carries the name of the token that sent it (sentBy),
// beside the payload's by, which the producer writes and may set on
// someone's behalf; other events carry no sender, nor do decisions sent
// with authentication off; and a client cannot write sentBy itself.
func TestDecisionsRecordTheSendingToken(t *testing.T) {
	f := newFixture(t, 5*time.Second)
	as := func(p *auth.Principal) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.srv.Config.Handler.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	post := func(srv *httptest.Server, body string) (int, []byte) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/events", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		return resp.StatusCode, raw
	}
	bot := as(&auth.Principal{Name: "ops-bot", Scopes: []auth.Scope{auth.ScopeEventsWrite}})
	open := as(&auth.Principal{Name: "anonymous", Scopes: []auth.Scope{auth.ScopeAdmin}, Anonymous: true})

	// A client's own sentBy is refused, naming the field, and nothing is
	// produced.
	before := f.produced()
	status, raw := post(bot, `{"events":[{"sessionId":"s-9","type":"ApprovalGranted","sentBy":"mallory","payload":{"requestId":"r-1","by":"alice"}}]}`)
	var p problem
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if status != 400 || len(p.Errors) != 1 || p.Errors[0].Field != "sentBy" || p.Errors[0].Index != 0 {
		t.Fatalf("a client's sentBy: %d %s", status, raw)
	}
	if f.produced() != before {
		t.Fatal("a refused request produced records")
	}

	body := `{"events":[` +
		`{"sessionId":"s-1","type":"SessionCreated"},` +
		`{"sessionId":"s-1","type":"SessionStarted"},` +
		`{"sessionId":"s-1","type":"ApprovalRequested","payload":{"requestId":"r-1"}},` +
		`{"sessionId":"s-1","type":"ApprovalGranted","payload":{"requestId":"r-1","by":"alice"}},` +
		`{"sessionId":"s-1","type":"ApprovalRequested","payload":{"requestId":"r-2"}}]}`
	if status, raw := post(bot, body); status != 202 {
		t.Fatalf("%d %s", status, raw)
	}
	if status, raw := post(open, `{"events":[{"sessionId":"s-1","type":"ApprovalDenied","payload":{"requestId":"r-2","by":"bob"}}]}`); status != 202 {
		t.Fatalf("%d %s", status, raw)
	}
	events := readAll(t, f, 6)
	want := []struct{ by, sentBy string }{{}, {}, {}, {"alice", "ops-bot"}, {}, {"bob", ""}}
	for i, e := range events {
		if e.Fields.By != want[i].by || e.SentBy != want[i].sentBy {
			t.Errorf("%s: by %q sentBy %q, want %q and %q", e.TypeName(), e.Fields.By, e.SentBy, want[i].by, want[i].sentBy)
		}
	}
}

// readAll reads the first n records of the topic (one session: one
// partition, in order) and decodes them as the projector does.
func readAll(t *testing.T, f *fixture, n int) []fsm.Event {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []fsm.Event
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var e fsm.Event
			if err := fsm.DecodeRecord(r.Value, &e); err != nil {
				t.Errorf("record %d: %v", r.Offset, err)
			}
			out = append(out, e)
		})
	}
	if len(out) != n {
		t.Fatalf("read %d records, want %d", len(out), n)
	}
	return out
}
