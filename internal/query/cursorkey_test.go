package query_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
)

// TestCursorKeySharedThroughRedis: without a key file, two query processes
// on one Redis seal cursors with the same key, so a cursor one issued
// resumes on the other (a restart, another replica); a process on another
// Redis has another key, and its cursors get 410 here.
func TestCursorKeySharedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := query.DefaultConfig()
	cfg.RedisURL = srv.URL()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := query.SharedCursorKey(context.Background(), cfg, log)
	b := query.SharedCursorKey(context.Background(), cfg, log)
	if len(a) < 32 || !bytes.Equal(a, b) {
		t.Fatalf("keys %q and %q: want one shared key of at least 32 bytes", a, b)
	}
	other := redistest.Start(t)
	cfg.RedisURL = other.URL()
	if c := query.SharedCursorKey(context.Background(), cfg, log); bytes.Equal(a, c) {
		t.Fatal("two Redis deployments gave the same key")
	}
	wa := query.NewWatcher(cfg.Kafka, "events", query.WatchOptions{CursorKey: a})
	wb := query.NewWatcher(cfg.Kafka, "events", query.WatchOptions{CursorKey: b})
	cursor := wa.EncodeCursor([]int64{3, 7})
	if got, err := wb.DecodeCursor(cursor); err != nil || len(got) != 2 || got[0] != 3 || got[1] != 7 {
		t.Fatalf("a cursor sealed by one process, opened by the other: %v, %v", got, err)
	}
	// Redis unreachable: the process draws a key of its own (nil here).
	cfg.RedisURL = "redis://127.0.0.1:1/0"
	if k := query.SharedCursorKey(context.Background(), cfg, log); k != nil {
		t.Fatalf("key %q with Redis unreachable, want none (a key of the process)", k)
	}
}
