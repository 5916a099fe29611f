package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// startStack runs the whole pipeline in process: the embedded Kafka broker,
// a real redis-server, ingest, projector and query.
func startStack(t testing.TB, partitions int) *devstack.Stack {
	t.Helper()
	srv := redistest.Start(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: partitions, Log: log,
		Projector: func(c *projector.Config) { c.FlushInterval = 50 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	return st
}

func newClient(t testing.TB, st *devstack.Stack, rt http.RoundTripper) *client.Client {
	t.Helper()
	opts := []client.ClientOpt{client.IngestURL(st.IngestURL), client.QueryURL(st.QueryURL),
		client.Retry(50, time.Millisecond, 50*time.Millisecond)}
	if rt != nil {
		opts = append(opts, client.HTTPClient(&http.Client{Transport: rt}))
	}
	c, err := client.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fault is what the injector does with one request to ingest.
type fault int

const (
	pass fault = iota
	// refuse answers 503 without forwarding: nothing is written.
	refuse
	// drop forwards the request, lets ingest write it, then fails the
	// round trip as a reset connection would: the client cannot know.
	drop
	// partial forwards the request, and answers 503 confirming only the
	// first half of what ingest accepted, as when Kafka confirms part of a
	// request: the others were written too, and are resent.
	partial
)

// injector is an http.RoundTripper in front of ingest that injects faults
// into POST /v1/events by a schedule, and records every body it was given.
type injector struct {
	base     http.RoundTripper
	schedule func(n int64) fault
	n        atomic.Int64

	mu     sync.Mutex
	bodies [][]byte
	counts [4]int
}

func newInjector(schedule func(n int64) fault) *injector {
	return &injector{base: http.DefaultTransport, schedule: schedule}
}

func (in *injector) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/v1/events") {
		return in.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	f := in.schedule(in.n.Add(1))
	in.mu.Lock()
	in.bodies = append(in.bodies, body)
	in.counts[f]++
	in.mu.Unlock()
	switch f {
	case refuse:
		return answer(req, http.StatusServiceUnavailable, `{"type":"https://correx.dev/problems/unavailable","title":"Service Unavailable","status":503,"accepted":[],"failed":[]}`), nil
	case drop:
		resp, err := in.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("read tcp: connection reset by peer (injected)")
	case partial:
		resp, err := in.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return resp, nil
		}
		var ans struct {
			Accepted []json.RawMessage `json:"accepted"`
		}
		if err := json.Unmarshal(b, &ans); err != nil {
			return nil, err
		}
		half := ans.Accepted[:len(ans.Accepted)/2]
		p, _ := json.Marshal(map[string]any{"type": "https://correx.dev/problems/unavailable", "status": 503,
			"title": "Service Unavailable", "accepted": half, "failed": ans.Accepted[len(half):]})
		return answer(req, http.StatusServiceUnavailable, string(p)), nil
	}
	return in.base.RoundTrip(req)
}

func answer(req *http.Request, status int, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/problem+json")
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: h, Request: req,
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), ProtoMajor: 1, ProtoMinor: 1}
}

// lifecycle is one session's events: valid ones, two rejected ones
// (execution_while_suspended, after_terminal), a custom event, a failed
// tool.
func lifecycle(id string) []client.Event {
	return []client.Event{
		client.SessionCreated(id, client.Goal("fix "+id), client.Labels(map[string]string{"team": "core"})),
		client.SessionStarted(id),
		client.ModelRequested(id),
		client.ToolRequested(id),
		client.ToolCompleted(id, false),
		client.SessionPaused(id),
		client.ModelRequested(id), // rejected: execution_while_suspended
		client.SessionResumed(id),
		client.Custom(id, "x.acme.BudgetChecked", map[string]int{"spent": 3}),
		client.ApprovalRequested(id),
		client.ApprovalGranted(id),
		client.SessionCompleted(id),
		client.SessionResumed(id), // rejected: after_terminal
	}
}

// reference folds events with pkg/fsm, as ingest would decode them, and
// returns the snapshot the query service would serve for them.
func reference(t testing.TB, events []client.Event) client.Snapshot {
	t.Helper()
	fe := make([]fsm.Event, len(events))
	for i := range events {
		raw, err := json.Marshal(&events[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := fsm.DecodeEnvelope(raw, &fe[i], fsm.DecodeOptions{Ingest: true}); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	// The query service shows the effective timeouts: the session's own,
	// else the service defaults (devstack keeps fsm.DefaultTimeouts).
	ref := snapshot.Snapshot{Session: loadgen.Expected(fe), TimeoutDefaults: fsm.DefaultTimeouts()}
	b, err := ref.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var s client.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sameEffect compares a served snapshot with the reference fold, leaving
// out what a resend may legitimately change: counters.events and
// counters.duplicates (Kafka holds the resent copies) and the positions.
func sameEffect(t testing.TB, got *client.Snapshot, want client.Snapshot) {
	t.Helper()
	g := *got
	for _, s := range []*client.Snapshot{&g, &want} {
		s.Counters.Events, s.Counters.Duplicates = 0, 0
		s.Position, s.FirstOffset = client.Position{}, 0
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("%s differs from the reference fold\n got %s\nwant %s", got.SessionID, gb, wb)
	}
}
