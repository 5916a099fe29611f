package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

const topic = "events"

var ctx = context.Background()

type fixture struct {
	t     *testing.T
	store *snapshot.Store
	h     *query.Handler
	srv   *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	h := query.NewHandler(store, topic, nil, query.Options{MaxWaiting: 2, MaxWaitingPerPrincipal: 2, PollEvery: 5 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{t: t, store: store, h: h, srv: srv}
}

// put stores a session folded from the given event types at offsets
// first, first+1, ... of partition p.
func (f *fixture) put(id string, p int32, first int64, types ...fsm.EventType) *snapshot.Snapshot {
	f.t.Helper()
	var s snapshot.Snapshot
	var r fsm.Reducer
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for i, et := range types {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1), 7}, id, et, at.Add(time.Duration(i)*time.Second), fsm.Fields{})
		s.Fold(&r, &e, snapshot.Position{Partition: p, Offset: first + int64(i)})
	}
	if _, err := f.store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		f.t.Fatal(err)
	}
	return &s
}

// whenWaiting calls do, in a goroutine, once h has n reads waiting for a
// position (or after 10 s, and the test's read then fails), so that what do
// writes happens during a wait.
func whenWaiting(h *query.Handler, n int, do func()) {
	go func() {
		testwait.Eventually(10*time.Second, func() bool { return h.Waiting() >= n })
		do()
	}()
}

func (f *fixture) get(path string, header ...string) (*http.Response, []byte) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func wantProblem(t *testing.T, resp *http.Response, body []byte, status int, field string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q: %s", ct, body)
	}
	var p struct {
		Status int `json:"status"`
		Errors []struct {
			Field string `json:"field"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Status != status {
		t.Fatalf("not a problem: %s", body)
	}
	if field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != field) {
		t.Fatalf("problem does not name %q: %s", field, body)
	}
}

func TestGetSession(t *testing.T) {
	f := newFixture(t)
	s := f.put("s-1", 2, 10, fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused, fsm.SessionPaused)
	resp, body := f.get("/v1/sessions/s-1")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	want, _ := s.MarshalJSON()
	if string(body) != string(want)+"\n" {
		t.Fatalf("body\n%s\nwant\n%s", body, want)
	}
	etag := resp.Header.Get("ETag")
	if etag != `"3.4"` {
		t.Fatalf("ETag %q, want version 3 and 4 events", etag)
	}
	if resp, _ := f.get("/v1/sessions/s-1", "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", resp.StatusCode)
	}
	if resp, _ := f.get("/v1/sessions/s-1", "If-None-Match", `"2.3"`); resp.StatusCode != 200 {
		t.Fatalf("stale If-None-Match: %d", resp.StatusCode)
	}
	resp, body = f.get("/v1/sessions/nobody")
	wantProblem(t, resp, body, 404, "")
	resp, body = f.get("/v1/sessions/bad%20id")
	wantProblem(t, resp, body, 400, "id")
}

func TestReadYourWrites(t *testing.T) {
	f := newFixture(t)
	f.put("s-1", 1, 100, fsm.SessionCreated, fsm.SessionStarted) // at 1:101

	// The snapshot itself is at the position.
	if resp, body := f.get("/v1/sessions/s-1?minPosition=1:101&wait=1s"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// Not reached: 504 after the wait, and at once with no wait.
	start := time.Now()
	resp, body := f.get("/v1/sessions/s-1?minPosition=1:150&wait=200ms")
	wantProblem(t, resp, body, 504, "")
	if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
		t.Fatalf("answered after %v", d)
	}
	resp, body = f.get("/v1/sessions/s-1?minPosition=1:150")
	wantProblem(t, resp, body, 504, "")
	// Reached while waiting: the snapshot moves, or the checkpoint passes
	// an offset that belongs to another session.
	whenWaiting(f.h, 1, func() {
		f.put("s-1", 1, 100, fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused) // at 1:102
	})
	if resp, body := f.get("/v1/sessions/s-1?minPosition=1:102&wait=5s"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	whenWaiting(f.h, 1, func() {
		_, _ = f.store.SaveCheckpoints(ctx, topic, []snapshot.Checkpoint{{Partition: 1, Offset: 301}}, time.Now())
	})
	resp, body = f.get("/v1/sessions/s-1?minPosition=1:300&wait=5s")
	if resp.StatusCode != 200 {
		t.Fatalf("checkpoint past the position: %d %s", resp.StatusCode, body)
	}
	// A session that does not exist once the position is reached: 404.
	resp, body = f.get("/v1/sessions/nobody?minPosition=1:300&wait=1s")
	wantProblem(t, resp, body, 404, "")

	for _, bad := range []struct{ q, field string }{
		{"minPosition=x", "minPosition"}, {"minPosition=1:-1", "minPosition"},
		{"minPosition=1:1&wait=11s", "wait"}, {"minPosition=1:1&wait=soon", "wait"}, {"wait=1s", "wait"},
	} {
		resp, body := f.get("/v1/sessions/s-1?" + bad.q)
		wantProblem(t, resp, body, 400, bad.field)
	}
}

func TestWaitingReadsAreBounded(t *testing.T) {
	f := newFixture(t)
	f.put("s-1", 0, 0, fsm.SessionCreated)
	done := make(chan int, 2)
	for range 2 { // MaxWaiting is 2
		go func() {
			resp, _ := f.get("/v1/sessions/s-1?minPosition=0:99&wait=1s")
			done <- resp.StatusCode
		}()
	}
	testwait.Until(t, "both reads wait", 10*time.Second, func() bool { return f.h.Waiting() == 2 })
	resp, body := f.get("/v1/sessions/s-1?minPosition=0:99&wait=1s")
	wantProblem(t, resp, body, 503, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	for range 2 {
		if code := <-done; code != 504 {
			t.Errorf("waiting read answered %d, want 504", code)
		}
	}
}

func TestList(t *testing.T) {
	f := newFixture(t)
	for i := range 25 {
		types := []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted}
		if i%5 == 0 {
			types = append(types, fsm.SessionCompleted)
		}
		f.put(fmt.Sprintf("l-%02d", i), 0, int64(i*10), types...)
	}
	var seen []string
	next := ""
	for pages := 0; pages < 10; pages++ {
		path := "/v1/sessions?state=ACTIVE&limit=7"
		if next != "" {
			path += "&cursor=" + next
		}
		resp, body := f.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var page struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
				State     string `json:"state"`
			} `json:"sessions"`
			Next *string `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Sessions {
			if s.State != "ACTIVE" {
				t.Fatalf("listing ACTIVE returned %s", s.State)
			}
			seen = append(seen, s.SessionID)
		}
		if page.Next == nil {
			break
		}
		next = *page.Next
	}
	if len(seen) != 20 {
		t.Fatalf("listed %d ACTIVE sessions, want 20", len(seen))
	}
	if resp, body := f.get("/v1/sessions"); resp.StatusCode != 200 || !json.Valid(body) {
		t.Fatalf("unfiltered: %d", resp.StatusCode)
	}
	if resp, body := f.get("/v1/sessions?state=FAILED"); resp.StatusCode != 200 || string(body) != `{"sessions":[],"next":null}`+"\n" {
		t.Fatalf("empty listing: %s", body)
	}
	for _, bad := range []struct{ q, field string }{{"state=BORED", "state"}, {"limit=0", "limit"},
		{"limit=1001", "limit"}, {"limit=x", "limit"}, {"cursor=zzz", "cursor"}} {
		resp, body := f.get("/v1/sessions?" + bad.q)
		wantProblem(t, resp, body, 400, bad.field)
	}
}

func TestStats(t *testing.T) {
	f := newFixture(t)
	f.put("a", 0, 0, fsm.SessionCreated)
	f.put("b", 0, 1, fsm.SessionCreated, fsm.SessionStarted)
	when := time.UnixMilli(1_800_000_000_000).UTC()
	if _, err := f.store.SaveCheckpoints(ctx, topic, []snapshot.Checkpoint{{Partition: 0, Offset: 3, HighWatermark: 10},
		{Partition: 1, Offset: 0, HighWatermark: -1}}, when); err != nil {
		t.Fatal(err)
	}
	resp, body := f.get("/v1/stats")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var st query.Stats
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Sessions.Total != 2 || st.Sessions.ByState["CREATED"] != 1 || st.Sessions.ByState["ACTIVE"] != 1 || len(st.Sessions.ByState) != 10 {
		t.Fatalf("sessions %+v", st.Sessions)
	}
	if len(st.Partitions) != 2 {
		t.Fatalf("partitions %+v", st.Partitions)
	}
	p0, p1 := st.Partitions[0], st.Partitions[1]
	if p0.Checkpoint != 3 || *p0.Lag != 7 || *p0.HighWatermark != 10 || !p0.CheckpointAt.Equal(when) {
		t.Fatalf("partition 0 %+v", p0)
	}
	if p1.Lag != nil || p1.HighWatermark != nil {
		t.Fatalf("partition 1 lag should be unknown: %+v", p1)
	}
}

func TestMethodsAndReplayWithoutKafka(t *testing.T) {
	f := newFixture(t)
	f.put("s-1", 0, 0, fsm.SessionCreated)
	resp, _ := http.Post(f.srv.URL+"/v1/sessions/s-1", "application/json", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantProblem(t, resp, body, 405, "")
	if resp.Header.Get("Allow") == "" {
		t.Error("405 without Allow")
	}
	resp, body = f.get("/v1/sessions/s-1/replay")
	wantProblem(t, resp, body, 503, "")
}

// blockingReplayer holds every replay until release is closed. It stands
// for the Kafka replayer, whose only property that matters here is taking
// time; the bound under test is the handler's.
type blockingReplayer struct {
	started chan struct{}
	release chan struct{}
}

func (b *blockingReplayer) Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return stored, nil
}

// TestReplaysAreBounded: with MaxReplays running, the next replay answers
// 503 with Retry-After at once, and a slot frees when one finishes.
func TestReplaysAreBounded(t *testing.T) {
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, store: store}
	f.put("s-1", 0, 1, fsm.SessionCreated)
	rep := &blockingReplayer{started: make(chan struct{}, 4), release: make(chan struct{})}
	f.srv = httptest.NewServer(query.NewHandler(store, topic, rep, query.Options{MaxReplays: 2}))
	t.Cleanup(f.srv.Close)
	done := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(f.srv.URL + "/v1/sessions/s-1/replay")
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	<-rep.started
	<-rep.started
	resp, body := f.get("/v1/sessions/s-1/replay")
	wantProblem(t, resp, body, 503, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	close(rep.release)
	for range 2 {
		if code := <-done; code != 200 {
			t.Fatalf("a held replay answered %d", code)
		}
	}
	if resp, body := f.get("/v1/sessions/s-1/replay"); resp.StatusCode != 200 {
		t.Fatalf("after the others finished: %d %s", resp.StatusCode, body)
	}
}

// TestWaitReturnsWhatTheCheckpointCovers races the projector's two writes
// (the newer snapshot, then the checkpoint past it) against waiting reads:
// a read that learns from the checkpoint that the position is reached must
// answer the snapshot written before that checkpoint, never the older one it
// read first.
func TestWaitReturnsWhatTheCheckpointCovers(t *testing.T) {
	f := newFixture(t)
	types := []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted}
	for round := range 150 {
		id := fmt.Sprintf("race-%d", round)
		base := int64(round * 100)   // each round past the previous rounds' checkpoints
		f.put(id, 2, base, types...) // at 2:base+1, version 2
		done := make(chan struct{})
		go func() {
			defer close(done)
			// A different delay each round, so that the writes land at
			// different points of the waiting read's loop.
			time.Sleep(time.Duration(round%7) * time.Millisecond) // the scenario: the race's timing
			// The newer snapshot first, then a checkpoint past it (another
			// session's later event moved it), as the projector writes them.
			f.put(id, 2, base, fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused) // at 2:base+2, version 3
			if _, err := f.store.SaveCheckpoints(ctx, topic, []snapshot.Checkpoint{{Partition: 2, Offset: base + 10}}, time.Now()); err != nil {
				t.Error(err)
			}
		}()
		resp, body := f.get(fmt.Sprintf("/v1/sessions/%s?minPosition=2:%d&wait=5s", id, base+2))
		<-done
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		var got struct{ Version int }
		_ = json.Unmarshal(body, &got)
		if got.Version != 3 {
			t.Fatalf("round %d: answered version %d although the position was reached", round, got.Version)
		}
	}
}

// deadlineReplayer reports the deadline of the context a replay is given.
type deadlineReplayer struct{ deadline chan time.Duration }

func (d *deadlineReplayer) Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		d.deadline <- -1
	} else {
		d.deadline <- time.Until(dl)
	}
	return stored, nil
}

// TestReplayLimitBoundsAReplay: Options.ReplayLimit is the deadline a
// replay (and a rebuild) gets, 30s when unset.
func TestReplayLimitBoundsAReplay(t *testing.T) {
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit, want time.Duration
	}{{3 * time.Second, 3 * time.Second}, {0, 30 * time.Second}} {
		f := &fixture{t: t, store: store}
		f.put("s-1", 0, 1, fsm.SessionCreated)
		rep := &deadlineReplayer{deadline: make(chan time.Duration, 1)}
		f.srv = httptest.NewServer(query.NewHandler(store, topic, rep, query.Options{ReplayLimit: tc.limit}))
		if resp, body := f.get("/v1/sessions/s-1/replay"); resp.StatusCode != 200 {
			t.Fatalf("replay: %d %s", resp.StatusCode, body)
		}
		f.srv.Close()
		// The deadline was read a moment after it was set: within a second.
		if got := <-rep.deadline; got > tc.want || got < tc.want-time.Second {
			t.Errorf("ReplayLimit %v: the replay's deadline was %v away, want %v", tc.limit, got, tc.want)
		}
	}
}

// TestHandlerIsConfiguredByOptions: the handler has no exported field, so
// that each setting has one place, Options.
func TestHandlerIsConfiguredByOptions(t *testing.T) {
	ht := reflect.TypeFor[query.Handler]()
	for i := range ht.NumField() {
		if f := ht.Field(i); f.IsExported() {
			t.Errorf("query.Handler.%s is exported: set it through Options", f.Name)
		}
	}
}
