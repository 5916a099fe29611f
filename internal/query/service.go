package query

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/console"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/service/redisstore"
	"github.com/correx/sessions/pkg/fsm"
)

// Config configures the query service. Each setting's doc names its
// variable and has one "default:" line; DefaultConfig holds the defaults
// and Bind registers them.
type Config struct {
	// Kafka is the brokers (CORREX_KAFKA_BROKERS) and the client's TLS and
	// SASL settings (off by default), for /replay, /rebuild, /history and the watches; no brokers
	// turns those off (503).
	// default: 127.0.0.1:9092 (config.DefaultBroker)
	Kafka kafka.Config
	// Topic is the topic of session events (CORREX_TOPIC).
	// default: correx.session-events (config.DefaultTopic)
	Topic string
	// Redis is the read model's connection and key prefix
	// (CORREX_REDIS_URL, _CLUSTER, _PREFIX, _PASSWORD_FILE, _TLS_CA_FILE;
	// redisconn.Config holds their defaults).
	Redis redisconn.Config
	// HTTPAddr is the listen address (CORREX_HTTP_ADDR).
	// default: :8082
	HTTPAddr string
	// Auth is the bearer-token authentication and the rate limit
	// (CORREX_AUTH_*, CORREX_RATE_*; auth.Config holds their defaults).
	Auth auth.Config
	// TLS serves HTTPS (CORREX_TLS_*; off by default).
	TLS httpx.TLSConfig
	// Timeouts are the service defaults of the session timeouts
	// (CORREX_TIMEOUT_*, the projector's settings): a snapshot's
	// "timeouts" and "deadline" show the effective values with them.
	// default: inactivity 24h, approval 24h, cancellation 5m, others unset (fsm.DefaultTimeouts)
	Timeouts fsm.Timeouts
	// WatchCursorKeyFile holds the secret the watch cursors (and, under
	// keys derived apart, the history's and the archive listing's
	// cursors) are sealed
	// with (CORREX_WATCH_CURSOR_KEY_FILE; at least 16 bytes, surrounding
	// whitespace ignored). The same file on every replica keeps cursors
	// valid across restarts and replicas; without it the key is a random
	// one shared in Redis (sharedCursorKey).
	// default: none
	WatchCursorKeyFile string
	// WatchMaxLifetime ends each watch stream after this long
	// (CORREX_WATCH_MAX_LIFETIME); the client resumes with its last id.
	// default: 1h (DefaultWatchMaxLifetime)
	WatchMaxLifetime time.Duration
	// IngestURL is the ingest service's base URL (CORREX_INGEST_URL), to
	// which POST /v1/sessions/{id}/actions forwards the console's actions
	// with the caller's Authorization header; unset, actions answer 503
	// and the console shows no action buttons.
	// default: none
	IngestURL string
	// ArchiveURL is the archive of closed sessions that left Redis
	// (CORREX_ARCHIVE_URL: file://, s3://, gs://; internal/archive), from
	// which GET /v1/sessions/{id} and its history answer them and GET
	// /v1/archive lists them; unset, there is no archive. An unknown
	// scheme stops the service at start. The bucket is opened in the
	// background: while it cannot be reached the service serves live
	// sessions, /readyz stays ready and lists the archive under
	// "degraded", and reads that need the archive answer 503 at once.
	// default: none
	ArchiveURL string
	// ArchiveTimeout bounds each call to the archive (CORREX_ARCHIVE_TIMEOUT);
	// past it the archive counts as unreachable until a probe answers.
	// default: 5s
	ArchiveTimeout time.Duration
	// ArchiveReads bounds the archived reads (a snapshot or a history page
	// read from the archive) running at once (CORREX_ARCHIVE_READS), apart
	// from the replays and live histories; past it they answer 503.
	// default: 16 (DefaultArchiveReads)
	ArchiveReads int
	// ArchiveReadsPerPrincipal bounds those of one token, or one client
	// address without authentication (CORREX_ARCHIVE_READS_PER_PRINCIPAL).
	// default: 4 (DefaultArchiveReadsPerPrincipal)
	ArchiveReadsPerPrincipal int
	// ArchiveHeadCache bounds, in bytes, the archived sessions' heads
	// (snapshot and chunk index) kept for the next reads
	// (CORREX_ARCHIVE_HEAD_CACHE); 0 keeps none.
	// default: 16777216, 16 MiB (DefaultArchiveHeadCache)
	ArchiveHeadCache int
}

// minCursorKey is the shortest secret CORREX_WATCH_CURSOR_KEY_FILE may hold.
const minCursorKey = 16

// cursorKey reads WatchCursorKeyFile; nil when it is not set.
func (c *Config) cursorKey() ([]byte, error) {
	if c.WatchCursorKeyFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.WatchCursorKeyFile)
	if err != nil {
		return nil, fmt.Errorf("CORREX_WATCH_CURSOR_KEY_FILE: %w", err)
	}
	if b = bytes.TrimSpace(b); len(b) < minCursorKey {
		return nil, fmt.Errorf("CORREX_WATCH_CURSOR_KEY_FILE: must hold at least %d bytes of secret, it holds %d", minCursorKey, len(b))
	}
	return b, nil
}

// cursorKeyTTL keeps the cursor key shared in Redis alive: each query
// process renews it at start, so it expires only when no replica started for
// that long.
const cursorKeyTTL = 30 * 24 * time.Hour

// sharedCursorKey returns the secret the watch cursors are sealed with when
// no CORREX_WATCH_CURSOR_KEY_FILE is given: a random one kept in Redis at
// <prefix>:watch:cursor-key, created by the first query process and read by
// every other, so that cursors survive restarts and move between replicas
// without configuration. When Redis does not answer within 5 s, the process
// draws a key of its own (cursors then get 410 from other processes) and
// says so.
func sharedCursorKey(ctx context.Context, cfg Config, log *slog.Logger) []byte {
	fallback := func(err error) []byte {
		log.Warn("watch cursors are sealed with a key of this process: a cursor does not survive a restart nor move to another replica (410); set CORREX_WATCH_CURSOR_KEY_FILE, the same on every replica, to keep them",
			"err", err)
		return nil
	}
	rdb, err := redisclient.Open(cfg.Redis)
	if err != nil {
		return fallback(err)
	}
	defer func() { _ = rdb.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fresh := make([]byte, 32)
	_, _ = rand.Read(fresh) // never fails (crypto/rand)
	key := cfg.Redis.Prefix + ":watch:cursor-key"
	if err := rdb.SetNX(ctx, key, hex.EncodeToString(fresh), cursorKeyTTL).Err(); err != nil {
		return fallback(err)
	}
	secret, err := rdb.GetEx(ctx, key, cursorKeyTTL).Bytes()
	if err != nil {
		return fallback(err)
	}
	return secret
}

// DefaultConfig returns the service's defaults, apart from authentication
// and TLS (auth.Config and httpx.TLSConfig bind their own).
func DefaultConfig() Config {
	return Config{
		Kafka:    kafka.Config{Brokers: []string{config.DefaultBroker}, ClientID: "correx-query"},
		Topic:    config.DefaultTopic,
		Redis:    redisconn.DefaultConfig(),
		HTTPAddr: ":8082",
		Timeouts: fsm.DefaultTimeouts(),

		WatchMaxLifetime: DefaultWatchMaxLifetime,
		ArchiveTimeout:   archive.DefaultTimeout,

		ArchiveReads:             DefaultArchiveReads,
		ArchiveReadsPerPrincipal: DefaultArchiveReadsPerPrincipal,
		ArchiveHeadCache:         DefaultArchiveHeadCache,
	}
}

// Bind registers the flags and environment variables, with DefaultConfig's
// values as their defaults.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	c.Kafka.ClientID = d.Kafka.ClientID
	b.Strings(&c.Kafka.Brokers, "kafka-brokers", "CORREX_KAFKA_BROKERS", d.Kafka.Brokers, "Kafka bootstrap brokers (for /replay, /rebuild and the watches)")
	b.String(&c.Topic, "topic", "CORREX_TOPIC", d.Topic, "topic of session events")
	c.Redis.Bind(b)
	b.String(&c.HTTPAddr, "http-addr", "CORREX_HTTP_ADDR", d.HTTPAddr, "listen address")
	b.String(&c.WatchCursorKeyFile, "watch-cursor-key-file", "CORREX_WATCH_CURSOR_KEY_FILE", d.WatchCursorKeyFile, "file holding the secret that seals watch cursors (the same on every replica; without it cursors do not survive a restart)")
	b.String(&c.IngestURL, "ingest-url", "CORREX_INGEST_URL", d.IngestURL, "base URL of the ingest service, to which the console's actions are forwarded (unset: no actions)")
	b.Secret(&c.ArchiveURL, "archive-url", "CORREX_ARCHIVE_URL", d.ArchiveURL, "archive of closed sessions that left Redis (file://, s3://, gs://; unset: none)")
	b.Duration(&c.ArchiveTimeout, "archive-timeout", "CORREX_ARCHIVE_TIMEOUT", d.ArchiveTimeout,
		"longest call to the archive; past it the archive counts as unreachable, and reads that need it answer 503 at once")
	b.Int(&c.ArchiveReads, "archive-reads", "CORREX_ARCHIVE_READS", d.ArchiveReads,
		"archived reads (snapshots and history pages read from the archive) running at once; past it they answer 503")
	b.Int(&c.ArchiveReadsPerPrincipal, "archive-reads-per-principal", "CORREX_ARCHIVE_READS_PER_PRINCIPAL", d.ArchiveReadsPerPrincipal,
		"archived reads one token (or client address) may have running at once")
	b.Int(&c.ArchiveHeadCache, "archive-head-cache", "CORREX_ARCHIVE_HEAD_CACHE", d.ArchiveHeadCache,
		"bytes of archived sessions' heads kept for the next reads (0: none)")
	b.Duration(&c.WatchMaxLifetime, "watch-max-lifetime", "CORREX_WATCH_MAX_LIFETIME", d.WatchMaxLifetime, "longest a watch stream lasts before the client must resume")
	c.Kafka.BindSecurity(b)
	c.Auth.Bind(b)
	c.TLS.Bind(b)
	b.Timeouts(&c.Timeouts)
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var p config.Problems
	if c.Topic == "" {
		p.Addf("CORREX_TOPIC: must not be empty")
	}
	problems := redisclient.Validate(c.Redis)
	if len(c.Kafka.Brokers) > 0 {
		problems = append(problems, c.Kafka.Validate()...)
	}
	problems = append(append(problems, c.Auth.Validate()...), c.TLS.Validate()...)
	for _, s := range problems {
		p.Addf("%s", s)
	}
	if c.WatchMaxLifetime <= 0 {
		p.Addf("CORREX_WATCH_MAX_LIFETIME: must be positive")
	}
	if err := ValidateIngestURL(c.IngestURL); err != nil {
		p.Addf("%s", err)
	}
	if err := archive.CheckURL(c.ArchiveURL); c.ArchiveURL != "" && err != nil {
		p.Addf("CORREX_ARCHIVE_URL: %v", err)
	}
	if c.ArchiveTimeout <= 0 {
		p.Addf("CORREX_ARCHIVE_TIMEOUT: %v, must be positive", c.ArchiveTimeout)
	}
	if c.ArchiveReads <= 0 {
		p.Addf("CORREX_ARCHIVE_READS: %d, must be positive", c.ArchiveReads)
	}
	if c.ArchiveReadsPerPrincipal <= 0 || c.ArchiveReadsPerPrincipal > c.ArchiveReads {
		p.Addf("CORREX_ARCHIVE_READS_PER_PRINCIPAL: %d, must be from 1 to CORREX_ARCHIVE_READS (%d)", c.ArchiveReadsPerPrincipal, c.ArchiveReads)
	}
	if c.ArchiveHeadCache < 0 {
		p.Addf("CORREX_ARCHIVE_HEAD_CACHE: %d, must be 0 (none) or a number of bytes", c.ArchiveHeadCache)
	}
	if _, err := c.cursorKey(); err != nil {
		p.Addf("%s", err)
	}
	p.AddTimeouts(c.Timeouts)
	return p.Err()
}

// Serve runs the query service until ctx is done.
func Serve(ctx context.Context, cfg Config, rt service.Runtime) error {
	guard, err := auth.New(cfg.Auth, rt.Logger())
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	guard.Watch(ctx)
	config.WarnUnbounded(rt.Logger(), cfg.Timeouts)
	store, closeStore, err := redisstore.Open(rt, cfg.Redis)
	if err != nil {
		return err
	}
	defer closeStore()
	store = store.WithTimeoutDefaults(cfg.Timeouts)
	opts := Options{Log: rt.Logger(), Guard: guard, IngestURL: cfg.IngestURL}
	if rt.Telemetry != nil {
		opts.Meter = rt.Telemetry.MeterProvider
	}
	var replayer Replayer
	if len(cfg.Kafka.Brokers) > 0 {
		if cfg.Kafka.Log == nil {
			cfg.Kafka.Log = rt.Logger()
		}
		replayer = &KafkaReplayer{Kafka: cfg.Kafka, Topic: cfg.Topic, Opts: append(rt.KafkaOpts, rt.KafkaTracing()...)}
		parts, err := NewKafkaPartitions(cfg.Kafka, cfg.Topic, rt.KafkaOpts...)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer parts.Close()
		opts.Partitions, opts.LogStarts = parts, parts
		// The watcher stops with ctx, which ends every stream, so the HTTP
		// server's shutdown below does not wait on them.
		key, err := cfg.cursorKey()
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		if key == nil {
			key = sharedCursorKey(ctx, cfg, rt.Logger())
		}
		opts.CursorKey = key // the history's cursors, under a key of their own
		opts.Watch = NewWatcher(cfg.Kafka, cfg.Topic, WatchOptions{Log: rt.Logger(), Opts: rt.KafkaOpts,
			MaxLifetime: cfg.WatchMaxLifetime, CursorKey: key})
		wctx, stopWatching := context.WithCancel(ctx)
		watching := make(chan error, 1)
		go func() { watching <- opts.Watch.Run(wctx) }()
		defer func() {
			stopWatching() // when the server failed to start, ctx is still live
			if werr := <-watching; werr != nil {
				rt.Logger().Error("watch", "err", werr)
			}
		}()
	}
	var degraded func() []string
	if cfg.ArchiveURL != "" {
		// In the background: an unreachable archive makes archived reads
		// answer 503, nothing else (archived.go).
		arch, err := archive.StartRemote(ctx, cfg.ArchiveURL, archive.RemoteOptions{Timeout: cfg.ArchiveTimeout, Log: rt.Logger()})
		if err != nil {
			return fmt.Errorf("query: CORREX_ARCHIVE_URL: %w", err)
		}
		defer func() { _ = arch.Close() }()
		opts.Archive = arch
		opts.MaxArchiveReads, opts.MaxArchiveReadsPerPrincipal = cfg.ArchiveReads, cfg.ArchiveReadsPerPrincipal
		opts.ArchiveHeadCache = int64(cfg.ArchiveHeadCache)
		if cfg.ArchiveHeadCache == 0 {
			opts.ArchiveHeadCache = -1 // none
		}
		degraded = func() []string {
			if err := arch.Status(); err != nil {
				return []string{err.Error() + "; archived sessions answer 503 until it answers"}
			}
			return nil
		}
	}
	// Waiting reads wake at each checkpoint write rather than polling
	// Redis; without the channel (a Redis user not granted it) they poll.
	if progress, err := store.Progress(ctx, cfg.Topic); err != nil {
		rt.Logger().Warn("reads waiting for a position poll Redis every 20ms: the checkpoint writes cannot be subscribed to (a Redis 7 user needs the channel: &<prefix>:*)", "err", err)
	} else {
		opts.Progress = progress
	}
	h := NewHandler(store, cfg.Topic, replayer, opts)
	err = rt.HTTP(ctx, service.Endpoint{Addr: cfg.HTTPAddr, API: h, UI: console.New(), Ready: store.Ping, Degraded: degraded, TLS: cfg.TLS})
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("query: %w", err)
	}
	return nil
}
