package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
)

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

// ev is an event at minute m of 2026-11-29 10:00 UTC, with an optional
// payload.
func ev(session, typ string, m int, payload string) string {
	if payload == "" {
		payload = "{}"
	}
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(m) * time.Minute).Format(time.RFC3339)
	return fmt.Sprintf(`{"sessionId":%q,"type":%q,"occurredAt":%q,"payload":%s}`, session, typ, at, payload)
}

// The same fixture as TestProjectionServesTheFeed, sent through ingest and
// folded by the projector.
func TestProjectionOverThePipeline(t *testing.T) {
	red := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: red.URL()}, Partitions: 3,
		Log: slog.New(slog.DiscardHandler),
		Projector: func(c *projector.Config) {
			c.FlushInterval = 20 * time.Millisecond
			// The events are dated 2026-11-29: the default inactivity timeout
			// (24h after the last event) would have passed, and end the sessions.
			c.Timeouts[fsm.TimeoutInactivity] = 0
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	teamA, teamB, prod := `{"labels":{"team":"a"}}`, `{"labels":{"team":"b"}}`, `{"labels":{"team":"b","env":"prod"}}`
	send(t, st.IngestURL,
		ev("s1", "SessionCreated", 0, teamA), ev("s1", "SessionStarted", 1, ""),
		ev("s1", "ApprovalRequested", 10, ""), ev("s1", "ApprovalGranted", 12, ""),
		ev("s2", "SessionCreated", 0, teamA), ev("s2", "SessionStarted", 1, ""), ev("s2", "SessionCompleted", 5, ""),
		ev("s2", "SessionResumed", 6, ""),
		ev("s3", "SessionCreated", 0, teamB), ev("s3", "SessionStarted", 1, ""),
		ev("s3", "ApprovalRequested", 60, ""), ev("s3", "ApprovalGranted", 64, ""),
		ev("s4", "SessionCreated", 24*60, prod), ev("s4", "SessionStarted", 24*60+1, ""),
		ev("s4", "ApprovalRequested", 24*60+2, ""), ev("s4", "ApprovalGranted", 24*60+3, ""))

	cfg, err := parseConfig([]string{"-brokers", strings.Join(st.Brokers, ","), "-topic", st.Topic, "-redis", red.URL()},
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, ln, slog.New(slog.DiscardHandler)) }()
	base := "http://" + ln.Addr().String()

	type views struct {
		Days   []ApprovalDay
		Active map[string]map[string]int64
	}
	want := views{Days: wantApprovals(), Active: wantActive()}
	var got views
	if !testwait.Eventually(30*time.Second, func() bool {
		got = views{Active: map[string]map[string]int64{}}
		getJSON(t, base+"/approval-times", &got)
		for key := range want.Active {
			var a struct{ Active map[string]int64 }
			getJSON(t, base+"/active?label="+key, &a)
			got.Active[key] = a.Active
		}
		return reflect.DeepEqual(got, want)
	}) {
		t.Errorf("views %+v, want %+v", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
