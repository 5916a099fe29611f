package query_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestCursorKeySharedThroughRedis: without a key file, two query processes
// on one Redis seal cursors with the same key, so a cursor one issued
// resumes on the other (a restart, another replica); a process on another
// Redis has another key, and its cursors get 410 here.
func TestCursorKeySharedThroughRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := query.DefaultConfig()
	cfg.Redis.URL = srv.URL()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := query.SharedCursorKey(context.Background(), cfg, log)
	b := query.SharedCursorKey(context.Background(), cfg, log)
	if len(a) < 32 || !bytes.Equal(a, b) {
		t.Fatalf("keys %q and %q: want one shared key of at least 32 bytes", a, b)
	}
	other := redistest.Start(t)
	cfg.Redis.URL = other.URL()
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
	cfg.Redis.URL = "redis://127.0.0.1:1/0"
	if k := query.SharedCursorKey(context.Background(), cfg, log); k != nil {
		t.Fatalf("key %q with Redis unreachable, want none (a key of the process)", k)
	}
}

// TestBadWatchCursor: a string that is no cursor is snapshot.ErrBadCursor,
// the listings' error for a cursor the service did not issue (400); one
// sealed with another key is not (410).
func TestBadWatchCursor(t *testing.T) {
	cfg := query.DefaultConfig()
	w := query.NewWatcher(cfg.Kafka, "events", query.WatchOptions{CursorKey: bytes.Repeat([]byte("k"), 32)})
	for _, c := range []string{"", "!", "AA", "not a cursor"} {
		if _, err := w.DecodeCursor(c); !errors.Is(err, snapshot.ErrBadCursor) {
			t.Errorf("DecodeCursor(%q): %v, want snapshot.ErrBadCursor", c, err)
		}
	}
	other := query.NewWatcher(cfg.Kafka, "events", query.WatchOptions{CursorKey: bytes.Repeat([]byte("o"), 32)})
	if _, err := w.DecodeCursor(other.EncodeCursor([]int64{1})); err == nil || errors.Is(err, snapshot.ErrBadCursor) {
		t.Errorf("a cursor of another key: %v, want an error other than ErrBadCursor", err)
	}
}
