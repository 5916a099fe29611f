package config_test

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/correx/sessions/internal/config"
)

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content, want, err string
	}{
		{"s3cret\n", "s3cret", ""},
		{"s3cret\r\n", "s3cret", ""},
		{"  spaced pass \n\n", "  spaced pass \n", ""},
		{"", "", "empty"},
		{"\n", "", "empty"},
	}
	for i, tc := range tests {
		p := filepath.Join(dir, "f"+string(rune('a'+i)))
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := config.ReadSecretFile(p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error naming %q", tc.content, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.content, got, err, tc.want)
		}
	}
	if _, err := config.ReadSecretFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read")
	}
}

func TestSecretsAreMasked(t *testing.T) {
	env := map[string]string{"CORREX_REDIS_URL": "rediss://correx:hunter2@redis:6380/0", "TOKEN": "abc123"}
	b := config.NewBinder(flag.NewFlagSet("t", flag.ContinueOnError), func(k string) string { return env[k] })
	var url, tok, plain string
	b.Secret(&url, "redis-url", "CORREX_REDIS_URL", "", "")
	b.Secret(&tok, "token", "TOKEN", "", "")
	b.String(&plain, "plain", "", "visible", "")
	if err := b.Parse(nil); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(b.Effective(), "\n")
	for _, secret := range []string{"hunter2", "abc123"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q printed: %s", secret, out)
		}
	}
	for _, want := range []string{"redis-url=rediss://correx:xxxxx@redis:6380/0", "token=***", "plain=visible"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing: %s", want, out)
		}
	}
}

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

// TestFileWatchPolls: a changed file is reloaded without a signal; a failed
// reload is logged and retried only when the content changes again. It runs
// in a synctest bubble: the watcher's ticker is on the bubble's clock, so
// "six polls found nothing" is exact, not a hope about a real sleep.
func TestFileWatchPolls(t *testing.T) {
	// The runtime starts its signal-mask goroutine on the process's first
	// signal.Notify; started inside the bubble, that goroutine would select
	// on the bubble's channels from outside it. Start it here, outside.
	outside := make(chan os.Signal, 1)
	signal.Notify(outside, syscall.SIGHUP)
	defer signal.Stop(outside)
	synctest.Test(t, func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, []byte("v1"), 0o600); err != nil {
			t.Fatal(err)
		}
		var reloads, polls atomic.Int32
		var fail atomic.Bool
		logs := &syncBuffer{}
		const interval = 5 * time.Millisecond
		config.FileWatch{What: "things", Files: []string{p}, Interval: interval,
			Log: slog.New(slog.NewTextHandler(logs, nil)),
			Reload: func() error {
				reloads.Add(1)
				if fail.Load() {
					return os.ErrInvalid
				}
				return nil
			}}.Start(t.Context())
		// poll lets the bubble's clock pass n intervals and waits until the
		// watcher has handled each tick and is blocked again.
		poll := func(n int) {
			for range n {
				time.Sleep(interval)
				synctest.Wait()
				polls.Add(1)
			}
		}
		poll(6) // polls that must find nothing to do
		if n := reloads.Load(); n != 0 {
			t.Fatalf("%d reloads of an unchanged file after %d polls", n, polls.Load())
		}
		replaceFile(t, p, "v2")
		poll(1)
		if n := reloads.Load(); n != 1 {
			t.Fatalf("%d reloads one poll after the file changed, want 1", n)
		}
		fail.Store(true)
		replaceFile(t, p, "v3")
		poll(1)
		if !strings.Contains(logs.String(), "reload failed; keeping the previous things") {
			t.Fatalf("the failed reload was not logged: %s", logs.String())
		}
		poll(6) // polls that must not retry the failed reload
		if n := reloads.Load(); n != 2 {
			t.Fatalf("%d reloads, want 2 (a failed reload is not retried until the file changes)", n)
		}
	})
}

// replaceFile replaces the file at p in one step (a new file renamed over
// it), as Kubernetes updates a mounted Secret: writing in place truncates
// first, and a poll between the truncation and the write sees two changes.
func replaceFile(t *testing.T, p, content string) {
	t.Helper()
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// TestRetention: CORREX_EVENTS_RETENTION is unlimited by default, a
// positive duration, or unlimited/-1; 0, a negative duration and words are
// errors that name the variable, whether from the environment or the flag.
func TestRetention(t *testing.T) {
	bind := func(env string, args ...string) (time.Duration, string, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		b := config.NewBinder(fs, func(k string) string {
			if k == "CORREX_EVENTS_RETENTION" {
				return env
			}
			return ""
		})
		var d time.Duration
		b.Retention(&d, "events-retention", "CORREX_EVENTS_RETENTION", "retention")
		err := b.Parse(args)
		return d, b.Settings()[0].Default, err
	}
	for _, c := range []struct {
		env  string
		args []string
		want time.Duration
	}{
		{"", nil, 0}, {"unlimited", nil, 0}, {"-1", nil, 0}, {"168h", nil, 168 * time.Hour},
		{"", []string{"-events-retention", "2h"}, 2 * time.Hour}, {"1h", []string{"-events-retention", "unlimited"}, 0},
	} {
		d, _, err := bind(c.env, c.args...)
		if err != nil || d != c.want {
			t.Errorf("env %q args %q: %v %v, want %v", c.env, c.args, d, err, c.want)
		}
	}
	if _, def, _ := bind(""); def != "unlimited" {
		t.Errorf("default shown as %q, want unlimited", def)
	}
	for _, bad := range []string{"0", "0s", "-5m", "week", "1ns"} {
		if _, _, err := bind(bad); err == nil || !strings.Contains(err.Error(), "CORREX_EVENTS_RETENTION") {
			t.Errorf("env %q: %v, want an error naming CORREX_EVENTS_RETENTION", bad, err)
		}
		if _, _, err := bind("", "-events-retention", bad); err == nil || !strings.Contains(err.Error(), "CORREX_EVENTS_RETENTION") {
			t.Errorf("flag %q: %v, want an error naming CORREX_EVENTS_RETENTION", bad, err)
		}
	}
}
