package query_test

import (
	"context"
	"fmt"
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
// configuration error naming it. A bucket that cannot be reached neither
// stops the service nor makes it unready: the service starts, /readyz
// answers ready and lists the archive under "degraded", a session Redis
// does not hold answers 503 at once saying the archive is unreachable, and
// once the bucket is there the archive is read and the degraded entry
// goes; a bucket that goes away while the service runs is degraded again.
func TestArchiveURLAtStart(t *testing.T) {
	cfg := query.DefaultConfig()
	cfg.Auth.Disabled = true
	cfg.ArchiveURL = "ftp://bucket"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "CORREX_ARCHIVE_URL") || !strings.Contains(err.Error(), `unknown scheme "ftp"`) {
		t.Errorf("unknown scheme: %v", err)
	}

	r := redistest.Start(t)
	cfg.Redis.URL, cfg.Kafka.Brokers = r.URL(), nil
	dir := filepath.Join(t.TempDir(), "archive")
	cfg.ArchiveURL = "file://" + filepath.ToSlash(dir) // not there yet
	cfg.ArchiveTimeout = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- query.Serve(sctx, cfg, service.Runtime{Listener: ln}) }()
	defer func() { stop(); <-done }()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	degraded := func() bool {
		s, body := get("/readyz")
		return s == http.StatusOK && strings.Contains(body, `"degraded"`) && strings.Contains(body, "archive")
	}
	testwait.UntilSeen(t, "ready, degraded by the archive not there", 20*time.Second, func() (bool, string) {
		s, body := get("/readyz")
		return degraded(), fmt.Sprint(s, " ", body)
	})
	start := time.Now()
	if s, body := get("/v1/sessions/missing-1"); s != http.StatusServiceUnavailable || !strings.Contains(body, "archive") || !strings.Contains(body, "unreachable") {
		t.Errorf("a session Redis does not hold, with the archive unreachable: %d %s", s, body)
	}
	if d := time.Since(start); d >= cfg.ArchiveTimeout {
		t.Errorf("the answer took %v, as long as a call to the archive (%v): it waited for it", d, cfg.ArchiveTimeout)
	}
	if s, body := get("/v1/archive"); s != http.StatusServiceUnavailable || !strings.Contains(body, "unreachable") {
		t.Errorf("the archive's listing while it is unreachable: %d %s", s, body)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testwait.UntilSeen(t, "ready, no longer degraded, once the bucket is there", 20*time.Second, func() (bool, string) {
		s, body := get("/readyz")
		return s == http.StatusOK && !strings.Contains(body, "degraded"), fmt.Sprint(s, " ", body)
	})
	if s, body := get("/v1/sessions/missing-1"); s != http.StatusNotFound {
		t.Errorf("a session neither in Redis nor in the archive: %d %s", s, body)
	}
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	testwait.UntilSeen(t, "ready and degraded with the bucket gone", 20*time.Second, func() (bool, string) {
		s, body := get("/readyz")
		return degraded(), fmt.Sprint(s, " ", body)
	})
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	testwait.UntilSeen(t, "ready, no longer degraded, with the bucket back", 20*time.Second, func() (bool, string) {
		s, body := get("/readyz")
		return s == http.StatusOK && !strings.Contains(body, "degraded"), fmt.Sprint(s, " ", body)
	})
}
