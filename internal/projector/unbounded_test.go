package projector

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/fsm"
)

// syncBuffer is a bytes.Buffer a logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeWarnsWhenSessionsAreUnbounded: the service default of the
// inactivity timeout is 24h; with it the projector starts without a
// warning, and with 0 (disabled) it warns at start that sessions may run
// for ever.
func TestServeWarnsWhenSessionsAreUnbounded(t *testing.T) {
	if got := DefaultConfig().Timeouts[fsm.TimeoutInactivity]; got != 24*time.Hour {
		t.Fatalf("default inactivity timeout %v, want 24h", got)
	}
	e := newEnv(t, 1)
	for _, tt := range []struct {
		inactivity time.Duration
		warn       bool
	}{{24 * time.Hour, false}, {0, true}} {
		cfg := e.config("w")
		cfg.Redis.Prefix = "warn"
		cfg.Timeouts = fsm.DefaultTimeouts()
		cfg.Timeouts[fsm.TimeoutInactivity] = tt.inactivity
		var log syncBuffer
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(ctx)
		rt := service.Runtime{Log: slog.New(slog.NewTextHandler(&log, nil)), Listener: ln,
			Ready: func(string) { cancel() }}
		err = Serve(c, cfg, rt)
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
