package main

import (
	"bytes"
	"context"
	"strings"
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
	err := run(ctx, []string{"-data-dir", t.TempDir(), "-kafka-port", "0", "-ingest-addr", "127.0.0.1:0",
		"-query-addr", "127.0.0.1:0", "-projector-addr", "127.0.0.1:0", "-progress", "1s", "-demo-rate", "200"},
		func(k string) string { return map[string]string{"CORREX_REDIS_URL": srv.URL()}[k] }, out, &errs)
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

// watchBuffer calls found once what it collects contains want.
type watchBuffer struct {
	syncBuffer
	want  string
	found func()
}

func (w *watchBuffer) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.found()
	}
	return n, err
}
