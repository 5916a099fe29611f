package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
)

func TestParse(t *testing.T) {
	if _, _, err := parse([]string{"-log-level", "loud", "-partitions", "0"}, func(string) string { return "" }, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "log-level") || !strings.Contains(err.Error(), "CORREX_PARTITIONS") {
		t.Fatalf("%v", err)
	}
}

// TestRun starts the devstack on free ports against a real redis-server,
// lets the demo run, and stops it as Ctrl-C would.
func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var out, errs bytes.Buffer
	err := run(ctx, []string{"-data-dir", t.TempDir(), "-kafka-port", "0", "-ingest-addr", "127.0.0.1:0",
		"-query-addr", "127.0.0.1:0", "-projector-addr", "127.0.0.1:0", "-progress", "500ms", "-demo-rate", "500"},
		func(k string) string { return map[string]string{"CORREX_REDIS_URL": srv.URL()}[k] }, &out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	o := out.String()
	for _, want := range []string{"/v1/events", "/ui/", "authentication is OFF", "stopped"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if !regexp.MustCompile(`ingested [1-9][0-9]* .* sessions [1-9]`).MatchString(o) {
		t.Errorf("no progress line with events and sessions:\n%s", o)
	}
}
