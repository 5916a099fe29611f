package query_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// A Redis that stops answering (SIGSTOP: connections stay open, nothing
// comes back) gets every request a 503 with Retry-After in time, /readyz
// too, and the service answers again once Redis resumes.
func TestHungRedisAnswers503InTime(t *testing.T) {
	r := redistest.Start(t)
	rdb, err := redisclient.Open(redisconn.Config{URL: r.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := snapshot.NewStore(rdb, "q")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	(&httpx.Health{Ready: store.Ping}).Register(mux)
	mux.Handle("/", query.NewHandler(store, topic, nil, query.Options{PollEvery: 5 * time.Millisecond}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, store: store, srv: srv}
	f.put("s-1", 0, 0, fsm.SessionCreated)
	f.get("/v1/sessions/s-1") // the client has a pooled connection

	info, err := r.Client(t).Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "process_id:")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("no process_id in INFO: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	client := &http.Client{Timeout: 30 * time.Second}
	for _, path := range []string{"/v1/sessions/s-1", "/v1/sessions/s-1?minPosition=0:99&wait=1s",
		"/v1/sessions?limit=10", "/v1/stats", "/readyz"} {
		start := time.Now()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		_ = resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d with Retry-After %q, want 503 with Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if d > 5*time.Second {
			t.Errorf("%s answered after %v with Redis hung, want well under 5s", path, d)
		}
	}

	resume()
	testwait.Until(t, "reads answer after SIGCONT", 10*time.Second, func() bool {
		resp, _ := f.get("/v1/sessions/s-1")
		return resp.StatusCode == http.StatusOK
	})
}
