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

// TestServeWarnsWhenSessionsAreUnbounded: the query service shows
// effective timeouts with the default inactivity of 24h and starts
// without a warning; with 0 (disabled) it warns at start that sessions
// may run for ever.
func TestServeWarnsWhenSessionsAreUnbounded(t *testing.T) {
	if got := query.DefaultConfig().Timeouts[fsm.TimeoutInactivity]; got != 24*time.Hour {
		t.Fatalf("default inactivity timeout %v, want 24h", got)
	}
	srv := redistest.Start(t)
	for _, tt := range []struct {
		inactivity time.Duration
		warn       bool
	}{{24 * time.Hour, false}, {0, true}} {
		cfg := query.DefaultConfig()
		cfg.Redis.URL, cfg.Kafka.Brokers, cfg.Auth.Disabled = srv.URL(), nil, true
		cfg.Timeouts[fsm.TimeoutInactivity] = tt.inactivity
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
			t.Fatalf("inactivity %v: Serve: %v", tt.inactivity, err)
		}
		warned := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "may run for ever")
		if warned != tt.warn {
			t.Errorf("inactivity %v: warned %v, want %v; log:\n%s", tt.inactivity, warned, tt.warn, log.String())
		}
	}
}
