package projector

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/pkg/fsm"
)

// TestTimeoutSettings: CORREX_TIMEOUT_* bind with cancellation 5m and the
// others unset, and a value outside 1s..720h is reported by name.
func TestTimeoutSettings(t *testing.T) {
	var c Config
	b := config.NewBinder(flag.NewFlagSet("projector", flag.ContinueOnError), func(k string) string {
		return map[string]string{"CORREX_TIMEOUT_INACTIVITY": "90s"}[k]
	})
	c.Bind(b)
	if err := b.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := fsm.DefaultTimeouts()
	want[fsm.TimeoutInactivity] = 90 * time.Second
	if c.Timeouts != want {
		t.Fatalf("got %v, want %v", c.Timeouts, want)
	}
	c = DefaultConfig()
	c.Timeouts[fsm.TimeoutExecution] = 500 * time.Millisecond
	c.Timeouts[fsm.TimeoutApproval] = 721 * time.Hour
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "CORREX_TIMEOUT_EXECUTION") || !strings.Contains(err.Error(), "CORREX_TIMEOUT_APPROVAL") {
		t.Fatalf("got %v, want both bad timeouts named", err)
	}
}

// TestRedisWaitSettings: CORREX_REDIS_WAIT_REPLICAS and _TIMEOUT bind, and
// bad combinations are named.
func TestRedisWaitSettings(t *testing.T) {
	var c Config
	b := config.NewBinder(flag.NewFlagSet("projector", flag.ContinueOnError), func(k string) string {
		return map[string]string{"CORREX_REDIS_WAIT_REPLICAS": "1", "CORREX_REDIS_WAIT_TIMEOUT": "250ms"}[k]
	})
	c.Bind(b)
	if err := b.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.RedisWaitReplicas != 1 || c.RedisWaitTimeout != 250*time.Millisecond {
		t.Fatalf("got %d replicas, %v", c.RedisWaitReplicas, c.RedisWaitTimeout)
	}
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		wants string
	}{
		{"negative", func(c *Config) { c.RedisWaitReplicas = -1 }, "CORREX_REDIS_WAIT_REPLICAS"},
		{"no timeout", func(c *Config) { c.RedisWaitReplicas, c.RedisWaitTimeout = 1, 0 }, "CORREX_REDIS_WAIT_TIMEOUT"},
	} {
		c := DefaultConfig()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: %v, want %q named", tc.name, err, tc.wants)
		}
	}
	c = DefaultConfig()
	c.RedisWaitReplicas, c.Redis.Cluster, c.Redis.URL = 1, true, "redis://127.0.0.1:7000?addr=127.0.0.1:7001"
	if err := c.Validate(); err != nil {
		t.Errorf("waiting for replicas on Redis Cluster: %v", err)
	}
}

// TestRetentionSettings: CORREX_RETAIN_CLOSED and CORREX_ARCHIVE_URL bind;
// a negative or unparsable retention, and a retention without an archive,
// are reported by name.
func TestRetentionSettings(t *testing.T) {
	bind := func(env map[string]string) (Config, error) {
		var c Config
		b := config.NewBinder(flag.NewFlagSet("projector", flag.ContinueOnError), func(k string) string { return env[k] })
		c.Bind(b)
		return c, b.Parse(nil)
	}
	c, err := bind(map[string]string{"CORREX_RETAIN_CLOSED": "2m", "CORREX_ARCHIVE_URL": "file:///tmp/a"})
	if err != nil || c.RetainClosed != 2*time.Minute || c.ArchiveURL != "file:///tmp/a" || c.ArchiveSweep != defaultArchiveSweep {
		t.Fatalf("got %v %q sweep %v: %v", c.RetainClosed, c.ArchiveURL, c.ArchiveSweep, err)
	}
	if c, err := bind(nil); err != nil || c.RetainClosed != 0 || c.ArchiveURL != "" {
		t.Fatalf("defaults: %v %q %v", c.RetainClosed, c.ArchiveURL, err)
	}
	if _, err := bind(map[string]string{"CORREX_RETAIN_CLOSED": "two days"}); err == nil || !strings.Contains(err.Error(), "CORREX_RETAIN_CLOSED") {
		t.Fatalf("unparsable: %v, want CORREX_RETAIN_CLOSED named", err)
	}
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		wants []string
	}{
		{"negative", func(c *Config) { c.RetainClosed, c.ArchiveURL = -time.Second, "mem://" }, []string{"CORREX_RETAIN_CLOSED"}},
		{"no archive", func(c *Config) { c.RetainClosed = time.Hour }, []string{"CORREX_RETAIN_CLOSED", "CORREX_ARCHIVE_URL"}},
	} {
		c := DefaultConfig()
		tc.set(&c)
		err := c.Validate()
		for _, w := range tc.wants {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q named", tc.name, err, w)
			}
		}
	}
}

// TestFlushBytesRefusesNegative: a negative CORREX_FLUSH_BYTES is refused,
// naming the variable; 0 is a quarter of the cache's bytes.
func TestFlushBytesRefusesNegative(t *testing.T) {
	c := DefaultConfig()
	c.FlushBytes = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "CORREX_FLUSH_BYTES") {
		t.Fatalf("CORREX_FLUSH_BYTES=-1: %v, want it named", err)
	}
	c.FlushBytes, c.CacheBytes = 0, 1<<20
	if got := c.flushBytes(); got != 1<<18 {
		t.Fatalf("CORREX_FLUSH_BYTES=0 with a 1 MiB cache: %d, want a quarter of it", got)
	}
}
