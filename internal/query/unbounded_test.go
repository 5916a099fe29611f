package query_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/fsm"
)

// lockedBuffer is a bytes.Buffer a logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeWarnsWhenSessionsAreUnbounded: the service defaults of the
// inactivity and approval timeouts are 24h, so that every non-terminal
// state is bounded; with them the query service starts without a warning, and
// with inactivity, approval or cancellation 0 (disabled) it warns at
// start, naming the setting, that sessions may run for ever.
func TestServeWarnsWhenSessionsAreUnbounded(t *testing.T) {
	if d := query.DefaultConfig().Timeouts; d[fsm.TimeoutInactivity] != 24*time.Hour || d[fsm.TimeoutApproval] != 24*time.Hour {
		t.Fatalf("default inactivity and approval timeouts %v, %v, want 24h each", d[fsm.TimeoutInactivity], d[fsm.TimeoutApproval])
	}
	srv := redistest.Start(t)
	for _, tt := range []struct {
		kind fsm.TimeoutKind
		d    time.Duration
		warn string
	}{{fsm.TimeoutInactivity, 24 * time.Hour, ""}, {fsm.TimeoutInactivity, 0, "CORREX_TIMEOUT_INACTIVITY is 0"},
		{fsm.TimeoutApproval, 0, "CORREX_TIMEOUT_APPROVAL is 0"}, {fsm.TimeoutCancellation, 0, "CORREX_TIMEOUT_CANCELLATION is 0"}} {
		cfg := query.DefaultConfig()
		cfg.Redis.URL, cfg.Kafka.Brokers, cfg.Auth.Disabled = srv.URL(), nil, true
		cfg.Timeouts[tt.kind] = tt.d
		var log lockedBuffer
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		rt := service.Runtime{Log: slog.New(slog.NewTextHandler(&log, nil)), Listener: ln, Ready: func(string) { cancel() }}
		err = query.Serve(ctx, cfg, rt)
		cancel()
		if err != nil {
			t.Fatalf("%s %v: Serve: %v", tt.kind, tt.d, err)
		}
		warned := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "may run for ever")
		if warned != (tt.warn != "") || !strings.Contains(log.String(), tt.warn) {
			t.Errorf("%s %v: warned %v, want %q; log:\n%s", tt.kind, tt.d, warned, tt.warn, log.String())
		}
	}
}
