package devstack

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
)

// TestDemoTimeoutFires runs the devstack's demo until its quiet session is
// timed out by the projector (its inactivity timeout is 5 s), and checks
// that the query service shows the next deadline from the service defaults.
func TestDemoTimeoutFires(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs bytes.Buffer
	out := &watchBuffer{want: "timed out: CANCELLING", found: cancel}
	c := DefaultConfig()
	c.DataDir, c.KafkaPort, c.Redis.URL, c.Progress = t.TempDir(), 0, srv.URL(), time.Second
	c.IngestAddr, c.QueryAddr, c.ProjectorAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	err := Run(ctx, c, nil, func(string) string { return "" }, out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	if s := out.String(); !strings.Contains(s, "timed out: CANCELLING, timeout:inactivity") {
		t.Fatalf("the demo's quiet session did not time out:\n%s", s)
	}
	// The query service shows the deadline armed by the default
	// cancellation timeout (5m): it has the projector's defaults.
	if s := out.String(); !strings.Contains(s, "next deadline: cancellation at") {
		t.Fatalf("the query service did not show the default cancellation deadline:\n%s", s)
	}
}

// watchBuffer collects what is written to it, and calls found once it
// contains want.
type watchBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	want  string
	found func()
}

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.b.Write(p)
	done := strings.Contains(w.b.String(), w.want)
	w.mu.Unlock()
	if done {
		w.found()
	}
	return n, err
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
