package query_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/testwait"
)

// TestArchiveURLAtStart: CORREX_ARCHIVE_URL with an unknown scheme is a
// configuration error naming it; a bucket that cannot be reached stops the
// service at start; /readyz fails, saying why, while the bucket is gone.
func TestArchiveURLAtStart(t *testing.T) {
	cfg := query.DefaultConfig()
	cfg.Auth.Disabled = true
	cfg.ArchiveURL = "ftp://bucket"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "CORREX_ARCHIVE_URL") || !strings.Contains(err.Error(), `unknown scheme "ftp"`) {
		t.Errorf("unknown scheme: %v", err)
	}

	r := redistest.Start(t)
	cfg.Redis.URL, cfg.Kafka.Brokers = r.URL(), nil
	cfg.ArchiveURL = "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "missing"))
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := query.Serve(ctx, cfg, service.Runtime{Listener: ln}); err == nil || !strings.Contains(err.Error(), "CORREX_ARCHIVE_URL") {
		t.Errorf("an unreachable bucket at start: %v", err)
	}

	dir := filepath.Join(t.TempDir(), "archive")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.ArchiveURL = "file://" + filepath.ToSlash(dir)
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- query.Serve(sctx, cfg, service.Runtime{Listener: ln}) }()
	defer func() { stop(); <-done }()
	ready := func() (int, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testwait.Until(t, "ready with the archive", 10*time.Second, func() bool { s, _ := ready(); return s == http.StatusOK })
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	if s, body := ready(); s != http.StatusServiceUnavailable || !strings.Contains(body, "archive") {
		t.Errorf("readyz with the bucket gone: %d %s", s, body)
	}
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	if s, body := ready(); s != http.StatusOK {
		t.Errorf("readyz with the bucket back: %d %s", s, body)
	}
}
