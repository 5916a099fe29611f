package testkit

import (
	"log/slog"
	"time"
)

// Option configures Start and Run.
type Option interface{ apply(*config) }

type config struct {
	partitions    int
	redisURL      string
	auth          bool
	log           *slog.Logger
	flushInterval time.Duration
}

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

func defaults() config {
	return config{partitions: 3, flushInterval: 20 * time.Millisecond}
}

// WithPartitions sets the topic's partition count. Default: 3.
func WithPartitions(n int) Option { return optFunc(func(c *config) { c.partitions = n }) }

// WithRedisURL uses a real Redis (redis://host:port/db) instead of the
// embedded miniredis. The stack writes keys under the prefix "correx" and
// does not flush the database: give each test its own database or server.
// Default: an embedded miniredis on a free port.
func WithRedisURL(url string) Option { return optFunc(func(c *config) { c.redisURL = url }) }

// WithAuth turns authentication on: ingest and query then require bearer
// tokens, and Stack.Tokens holds them. Default: off (every request is
// allowed, as with CORREX_AUTH_DISABLED=true). There is no rate limit either
// way.
func WithAuth() Option { return optFunc(func(c *config) { c.auth = true }) }

// WithLogger sends the services' logs to l. Default: errors go to the
// test's log (t.Log) with Start, and nothing is logged with Run.
func WithLogger(l *slog.Logger) Option { return optFunc(func(c *config) { c.log = l }) }

// WithFlushInterval sets how often the projector writes folded snapshots to
// Redis, which bounds how long WaitSession waits after an event is sent.
// Default: 20ms; the projector's own default (projector.DefaultConfig's
// FlushInterval) is longer.
func WithFlushInterval(d time.Duration) Option {
	return optFunc(func(c *config) { c.flushInterval = d })
}
