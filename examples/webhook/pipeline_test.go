package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
)

// send posts events through ingest.
func send(t *testing.T, ingestURL string, events ...string) {
	t.Helper()
	body := `{"events":[` + strings.Join(events, ",") + `]}`
	resp, err := http.Post(ingestURL+"/v1/events", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingest answered %d", resp.StatusCode)
	}
}

func ev(session, typ string, minute int) string {
	at := time.Date(2026, 11, 29, 10, minute, 0, 0, time.UTC).Format(time.RFC3339)
	return fmt.Sprintf(`{"sessionId":%q,"type":%q,"occurredAt":%q,"payload":{}}`, session, typ, at)
}

// Events sent through ingest, folded by the projector, written to the feed
// and posted by the program, which is restarted between two batches: each
// transition is posted at least once, in order per session; the rejection is not.
func TestWebhookOverThePipeline(t *testing.T) {
	red := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: red.URL()}, Partitions: 3,
		Log: slog.New(slog.DiscardHandler),
		Projector: func(c *projector.Config) {
			c.FlushInterval = 20 * time.Millisecond
			// The events are dated 2026-11-29: the default inactivity and
			// approval timeouts (24h after the last event, after the request)
			// would have passed, and end the sessions.
			c.Timeouts[fsm.TimeoutInactivity] = 0
			c.Timeouts[fsm.TimeoutApproval] = 0
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	rcv := &receiver{t: t, secret: []byte("k"), stopNow: make(chan struct{}), accepted: map[string]int{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cfg, err := parseConfig([]string{"-brokers", strings.Join(st.Brokers, ","), "-topic", st.Topic, "-redis", red.URL(),
		"-url", srv.URL, "-min-backoff", "5ms", "-max-backoff", "50ms"}, func(k string) string {
		if k == "WEBHOOK_SECRET" {
			return "k"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	start := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	sessions := []string{"p:1", "p:2", "p:3", "p:4"}
	stop := start()
	for _, s := range sessions {
		send(t, st.IngestURL, ev(s, "SessionCreated", 0), ev(s, "SessionStarted", 1), ev(s, "ApprovalRequested", 2))
	}
	testwait.Until(t, "the first batch", 30*time.Second, func() bool { return rcv.count() >= 3*len(sessions) })
	stop()
	for _, s := range sessions {
		send(t, st.IngestURL, ev(s, "ApprovalGranted", 5), ev(s, "SessionCompleted", 6), ev(s, "SessionResumed", 7))
	}
	stop = start()
	testwait.Until(t, "every transition", 30*time.Second, func() bool { return rcv.count() >= 5*len(sessions) })
	// The feed holds 6 records per session (the rejections too): wait
	// until the checkpoints have passed them all, so a posted rejection
	// would be seen below.
	rdb := red.Client(t)
	testwait.Until(t, "the checkpoints at the end of the feed", 30*time.Second, func() bool {
		var sum int64
		for p := range 3 {
			n, _ := rdb.HGet(context.Background(), fmt.Sprintf("correx:feed:correx-webhook:%s.changes:%d", st.Topic, p), "~next").Int64()
			sum += n
		}
		return sum >= 6*int64(len(sessions))
	})
	stop()

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	want := []string{"SessionCreated", "SessionStarted", "ApprovalRequested", "ApprovalGranted", "SessionCompleted"}
	// Delivery is at least once: a change being posted when the program
	// stops is posted again after its restart (the receiver deduplicates by
	// Correx-Delivery). Each change counts once here, at its first post.
	got := map[string][]string{}
	seen := map[feed.Key]bool{}
	for _, c := range rcv.order {
		if !seen[c.Key()] {
			seen[c.Key()] = true
			got[c.SessionID] = append(got[c.SessionID], c.Type)
		}
	}
	for _, s := range sessions {
		if fmt.Sprint(got[s]) != fmt.Sprint(want) {
			t.Errorf("%s: posted %v, want %v", s, got[s], want)
		}
	}
	again := 0
	for _, n := range rcv.accepted {
		again += n - 1
	}
	t.Logf("%d changes posted again after the restart", again)
}
