package projector

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReadyDoesNotWaitForTheFold holds the fold's lock (held across Redis
// calls while folding and flushing) and asks for readiness: the answer must
// come without that lock, and name a partition stalled meanwhile. The bound
// is only "answers, does not hang".
func TestReadyDoesNotWaitForTheFold(t *testing.T) {
	e := newEnv(t, 1)
	p := New(e.config("x"), e.store("ready"), WithLogger(testLog()))
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ready := func() error {
		done := make(chan error, 1)
		go func() { done <- p.Ready(c) }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Ready waited for the fold's lock")
			return nil
		}
	}
	if err := ready(); err != nil {
		t.Fatalf("Ready: %v, want nil", err)
	}
	p.st.stalls.stall(3, "checkpoint beyond the log")
	if err := ready(); err == nil || !strings.Contains(err.Error(), "partition 3: checkpoint beyond the log") {
		t.Fatalf("Ready: %v, want partition 3 stalled", err)
	}
	p.st.stalls.clear(3)
	if err := ready(); err != nil {
		t.Fatalf("Ready after the stall cleared: %v, want nil", err)
	}
}
