package projector

import (
	"os"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/pkg/fsm"
)

// DefaultCacheBytes is the default of Config.CacheBytes: 256 MiB.
const DefaultCacheBytes = 256 << 20

// Config configures a projector. Each setting's doc names its variable
// and has one "default:" line; DefaultConfig holds the defaults and Bind
// registers them.
type Config struct {
	// Kafka is the brokers (CORREX_KAFKA_BROKERS) and the client's TLS
	// and SASL settings (off by default).
	// default: 127.0.0.1:9092 (config.DefaultBroker)
	Kafka kafka.Config
	// Topic is the topic of session events (CORREX_TOPIC).
	// default: correx.session-events (config.DefaultTopic)
	Topic string
	// Partitions is the events topic's partition count when the projector
	// creates it (CORREX_PARTITIONS).
	// default: 12 (config.DefaultPartitions)
	Partitions int
	// EventsRetention is the events topic's retention.ms when the projector creates
	// it (CORREX_EVENTS_RETENTION): a positive Go duration, or unlimited
	// (also -1), held as 0. Records older than it leave the log; the
	// histories, replays and rebuilds of sessions whose first events left
	// answer 409 history-truncated (docs/guarantees.md, "Settings").
	// default: unlimited
	EventsRetention time.Duration
	// Group is the consumer group (CORREX_GROUP).
	// default: correx-projector
	Group string
	// InstanceID is the stable group instance id (CORREX_INSTANCE_ID); ""
	// for dynamic membership.
	// default: the host name
	InstanceID string
	// Redis is the store's connection and key prefix (CORREX_REDIS_URL,
	// _CLUSTER, _PREFIX, _PASSWORD_FILE, _TLS_CA_FILE; redisconn.Config
	// holds their defaults).
	Redis redisconn.Config
	// HTTPAddr is the listen address of /healthz, /readyz and /metrics
	// (CORREX_HTTP_ADDR).
	// default: :8083
	HTTPAddr string
	// TLS serves /healthz, /readyz and /metrics over HTTPS when set
	// (CORREX_TLS_CERT_FILE, CORREX_TLS_KEY_FILE, CORREX_TLS_CLIENT_CA_FILE).
	TLS httpx.TLSConfig
	// FlushInterval is the longest a poll waits for records, so the longest
	// idle wait of the poll loop (CORREX_FLUSH_INTERVAL). It does not delay
	// writes: caught up, the projector writes as soon as a poll leaves
	// nothing more to fold and no write is in flight (group commit), and a
	// poll returns early when the write in flight completes.
	// default: 250ms
	FlushInterval time.Duration
	// MaxFlushInterval is the longest between two writes while catching up
	// (polls come back full, MaxPollRecords records), unless FlushSize
	// snapshots are dirty first (CORREX_MAX_FLUSH_INTERVAL).
	// default: 2s
	MaxFlushInterval time.Duration
	// FlushSize flushes as soon as this many snapshots are dirty
	// (CORREX_FLUSH_SIZE).
	// default: 20000
	FlushSize int
	// FlushBytes flushes as soon as the dirty snapshots' estimated
	// encodings reach this many bytes (each counted at the length of its
	// last encoding plus the records folded into it since), whatever
	// their count (CORREX_FLUSH_BYTES); zero means a quarter of
	// CacheBytes. A batch holds its snapshots' encodings, their changelog
	// records and Redis commands until written: with FlushSize alone,
	// 20,000 dirty 8 KB snapshots took 1.39 GB.
	// default: 0 (a quarter of CacheBytes: 64 MiB)
	FlushBytes int
	// CacheSize bounds the cached snapshots (CORREX_CACHE_SIZE).
	// default: 100000
	CacheSize int
	// CacheBytes bounds the memory of the cached snapshots, estimated per
	// snapshot as its encoded length plus a fixed 768 bytes (entry.estimate),
	// and of the encodings of the batch being written, which count against
	// it until written (CORREX_CACHE_BYTES); zero means the default.
	// Snapshots not yet stored (FlushSize of them, FlushBytes of
	// encodings at most) stay beyond it until written.
	// default: 268435456 (DefaultCacheBytes, 256 MiB)
	CacheBytes int
	// SessionTimeout is the group session timeout (CORREX_SESSION_TIMEOUT).
	// default: 30s
	SessionTimeout time.Duration
	// LeaveOnShutdown makes a replica with an instance id leave the group
	// after its final flush on a graceful shutdown (SIGTERM), so its
	// partitions move at once; static members otherwise keep them until the
	// session timeout. A crash does not leave: a replacement under the same
	// instance id takes the partitions back at once
	// (CORREX_LEAVE_ON_SHUTDOWN).
	// default: true
	LeaveOnShutdown bool
	// MaxPollRecords bounds the records folded between two flush decisions
	// (CORREX_MAX_POLL_RECORDS).
	// default: 10000
	MaxPollRecords int
	// RebalanceTimeout is how long the group waits for members to finish a
	// rebalance (flush what they revoke) before dropping them
	// (CORREX_REBALANCE_TIMEOUT).
	// default: 60s
	RebalanceTimeout time.Duration
	// Timeouts are the service defaults of the session timeouts
	// (docs/timeouts.md), used for a kind a session's SessionCreated leaves
	// out: CORREX_TIMEOUT_EXECUTION, _INACTIVITY, _APPROVAL, _RECOVERY and
	// _CANCELLATION, Go durations from 1s to 720h. The query service takes
	// the same settings to show effective timeouts.
	// default: inactivity 24h, approval 24h, cancellation 5m, others unset (fsm.DefaultTimeouts)
	Timeouts fsm.Timeouts
	// ForcedGrace is how long a forced cancellation waits before its
	// cancellation deadline fires, from the forced request's occurredAt
	// (CORREX_FORCED_GRACE, docs/timeouts.md), instead of the cancellation
	// timeout.
	// default: 0s (fsm.DefaultForcedGrace)
	ForcedGrace time.Duration
	// DeadlineResync is how often each owned partition's earliest deadline
	// is read again from Redis, besides what the flushes report. Not a
	// setting: tests shorten it.
	// default: 1s
	DeadlineResync time.Duration
	// ChangeFeed produces the change feed (docs/exactly-once.md) to
	// "<Topic>.changes", created with the events topic's partition count
	// (CORREX_CHANGE_FEED).
	// default: true
	ChangeFeed bool
	// ChangelogEnabled produces every flushed snapshot, and one checkpoint
	// record per partition after them, to the compacted
	// "<Topic>.snapshots" (the events topic's partition count), and
	// restores a partition whose read model Redis lost from it instead of
	// folding the events topic from its start (docs/exactly-once.md,
	// "The snapshot changelog") (CORREX_CHANGELOG).
	// default: true
	ChangelogEnabled bool
	// RedisWaitReplicas makes every batch wait until that many Redis
	// replicas acknowledged it (Redis WAIT) before its checkpoints are
	// written, so that no checkpoint passes writes a failover could lose
	// (docs/guarantees.md): on a single server or Sentinel the snapshot
	// writes wait, on Redis Cluster every master waits for all of the
	// batch's writes (CORREX_REDIS_WAIT_REPLICAS).
	// default: 0 (no wait)
	RedisWaitReplicas int
	// RedisWaitTimeout bounds that wait; a batch not acknowledged in time
	// waits again (its writes again after a Cluster master changed)
	// (CORREX_REDIS_WAIT_TIMEOUT).
	// default: 1s
	RedisWaitTimeout time.Duration
	// RetainClosed is how long a session that ended stays in Redis before
	// the archive sweep writes it to the archive (ArchiveURL) and removes
	// it (docs/retention.md); zero keeps every session for ever
	// (CORREX_RETAIN_CLOSED).
	// default: 0 (keep for ever)
	RetainClosed time.Duration
	// TombstoneRetention is how long an archived session's tombstone
	// (docs/retention.md) is kept after the session ended; the archive sweep
	// removes older ones, and their ids may then be used again by a new
	// session. Zero keeps tombstones for ever: an id is used once
	// (CORREX_TOMBSTONE_RETENTION).
	// default: 0 (keep for ever)
	TombstoneRetention time.Duration
	// ArchiveURL is the bucket closed sessions are archived into: file://,
	// s3://, gs:// (gocloud.dev/blob URLs); required when RetainClosed is
	// set (CORREX_ARCHIVE_URL).
	// default: unset
	ArchiveURL string
	// ArchiveTimeout bounds each call to the archive (opening it, a probe,
	// an object's write) (CORREX_ARCHIVE_TIMEOUT). The archive is opened
	// in the background: the projector folds while it is unreachable, and
	// archiving waits until it answers.
	// default: 5s
	ArchiveTimeout time.Duration
	// ArchiveRound bounds one round of a partition's sweep (reading the
	// sessions due, their histories from the log, writing their objects,
	// the changelog's records and the removal): a round that runs into it
	// fails, is counted, and its sessions stay in Redis for the next. Not
	// a setting: tests shorten it.
	// default: 2m
	ArchiveRound time.Duration
	// ArchiveSweep is how often each owned partition's closed sessions are
	// swept into the archive. Not a setting: tests shorten it.
	// default: 10s
	ArchiveSweep time.Duration
	// SystemKeyFile holds the keys that sign the records the system
	// derives (timeouts, cascaded cancellations, replacement events) and
	// the snapshot changelog's records, one per line: the first signs,
	// every one verifies (internal/systemkey, docs/security.md)
	// (CORREX_SYSTEM_KEY_FILE).
	// default: unset (a key kept in the compacted "<Topic>.system", created once)
	SystemKeyFile string
	// VerifyRate is how many sessions a second the background verifier
	// compares with the fold of their events from the log, over the
	// partitions this projector owns, each once per cycle; 0 turns it off
	// (CORREX_VERIFY_RATE, docs/verification.md).
	// default: 20
	VerifyRate float64
	// VerifyRepair makes the verifier write the fold of the log over a
	// missing, stale or corrupt snapshot, fenced as POST
	// /v1/sessions/{id}/rebuild writes (CORREX_VERIFY_REPAIR).
	// default: true
	VerifyRepair bool
	// ShutdownTimeout bounds a graceful stop: once Run's context is done,
	// the batch in flight and the final flush get this long, then writing
	// stops and Run returns ErrShutdownTimeout (what was not written is
	// folded again from the checkpoints); zero means the default. Not a
	// setting: tests shorten it, and the orchestrator's grace period
	// covers it.
	// default: 30s
	ShutdownTimeout time.Duration
}

// Defaults that a zero value in an in-process Config also falls back to.
const (
	defaultShutdownTimeout = 30 * time.Second
	defaultDeadlineResync  = time.Second
	defaultArchiveSweep    = 10 * time.Second
	defaultArchiveRound    = 2 * time.Minute
)

// cacheBytes is CacheBytes, or its default when unset.
func (c Config) cacheBytes() int {
	if c.CacheBytes <= 0 {
		return DefaultCacheBytes
	}
	return c.CacheBytes
}

// flushBytes is FlushBytes, or a quarter of the cache's bytes when unset.
func (c Config) flushBytes() int {
	if c.FlushBytes <= 0 {
		return c.cacheBytes() / 4
	}
	return c.FlushBytes
}

// shutdownTimeout is ShutdownTimeout, or its default when unset.
func (c Config) shutdownTimeout() time.Duration {
	if c.ShutdownTimeout <= 0 {
		return defaultShutdownTimeout
	}
	return c.ShutdownTimeout
}

// DefaultConfig returns the configuration with every default: the values
// the flags and environment variables start from (Bind), and the base of
// in-process stacks and benchmarks, which change only what they mean to.
// InstanceID defaults to the host name.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		Kafka:            kafka.Config{Brokers: []string{config.DefaultBroker}, ClientID: "correx-projector"},
		Topic:            config.DefaultTopic,
		Partitions:       config.DefaultPartitions,
		Group:            "correx-projector",
		InstanceID:       host,
		Redis:            redisconn.DefaultConfig(),
		HTTPAddr:         ":8083",
		FlushInterval:    250 * time.Millisecond,
		MaxFlushInterval: 2 * time.Second,
		FlushSize:        20000,
		CacheSize:        100000,
		CacheBytes:       DefaultCacheBytes,
		SessionTimeout:   30 * time.Second,
		LeaveOnShutdown:  true,
		MaxPollRecords:   10000,
		RebalanceTimeout: 60 * time.Second,
		Timeouts:         fsm.DefaultTimeouts(),
		DeadlineResync:   defaultDeadlineResync,
		ChangeFeed:       true,
		ChangelogEnabled: true,
		RedisWaitTimeout: time.Second,
		ArchiveSweep:     defaultArchiveSweep,
		ArchiveTimeout:   archive.DefaultTimeout,
		ArchiveRound:     defaultArchiveRound,
		ShutdownTimeout:  defaultShutdownTimeout,
		VerifyRate:       20,
		VerifyRepair:     true,
	}
}

// Bind registers the projector's flags and environment variables, with
// DefaultConfig's values as their defaults.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	c.Kafka.ClientID = d.Kafka.ClientID
	c.ShutdownTimeout = d.ShutdownTimeout // not a setting (see its doc)
	b.Strings(&c.Kafka.Brokers, "kafka-brokers", "CORREX_KAFKA_BROKERS", d.Kafka.Brokers, "Kafka bootstrap brokers")
	b.String(&c.Topic, "topic", "CORREX_TOPIC", d.Topic, "topic of session events")
	b.Int(&c.Partitions, "partitions", "CORREX_PARTITIONS", d.Partitions, "partitions when the topic is created")
	b.Retention(&c.EventsRetention, "events-retention", "CORREX_EVENTS_RETENTION", "retention of the events topic when it is created (Go duration, or unlimited)")
	b.String(&c.Group, "group", "CORREX_GROUP", d.Group, "consumer group")
	b.String(&c.InstanceID, "instance-id", "CORREX_INSTANCE_ID", d.InstanceID, "stable group instance id (static membership); empty for dynamic membership")
	c.Redis.Bind(b)
	b.String(&c.HTTPAddr, "http-addr", "CORREX_HTTP_ADDR", d.HTTPAddr, "listen address for /healthz, /readyz, /metrics")
	c.TLS.Bind(b)
	c.Kafka.BindSecurity(b)
	b.Duration(&c.FlushInterval, "flush-interval", "CORREX_FLUSH_INTERVAL", d.FlushInterval, "longest a poll waits for records (caught up, writes start as soon as nothing more is to be folded)")
	b.Duration(&c.MaxFlushInterval, "max-flush-interval", "CORREX_MAX_FLUSH_INTERVAL", d.MaxFlushInterval, "longest between two writes while catching up")
	b.Int(&c.FlushSize, "flush-size", "CORREX_FLUSH_SIZE", d.FlushSize, "dirty snapshots that trigger a flush")
	b.Int(&c.FlushBytes, "flush-bytes", "CORREX_FLUSH_BYTES", d.FlushBytes,
		"estimated bytes of dirty snapshots that trigger a flush (0: a quarter of CORREX_CACHE_BYTES)")
	b.Bool(&c.LeaveOnShutdown, "leave-on-shutdown", "CORREX_LEAVE_ON_SHUTDOWN", d.LeaveOnShutdown, "leave the group after the final flush on SIGTERM (static members keep their partitions otherwise)")
	b.Int(&c.MaxPollRecords, "max-poll-records", "CORREX_MAX_POLL_RECORDS", d.MaxPollRecords, "records folded between two flush decisions")
	b.Int(&c.CacheSize, "cache-size", "CORREX_CACHE_SIZE", d.CacheSize, "snapshots kept in memory")
	b.Int(&c.CacheBytes, "cache-bytes", "CORREX_CACHE_BYTES", d.CacheBytes, "estimated bytes of the snapshots kept in memory")
	b.Duration(&c.SessionTimeout, "session-timeout", "CORREX_SESSION_TIMEOUT", d.SessionTimeout, "consumer group session timeout")
	b.Duration(&c.RebalanceTimeout, "rebalance-timeout", "CORREX_REBALANCE_TIMEOUT", d.RebalanceTimeout, "how long a rebalance may take before slow members are dropped")
	c.DeadlineResync = d.DeadlineResync
	b.Timeouts(&c.Timeouts)
	b.ForcedGrace(&c.ForcedGrace)
	b.Bool(&c.ChangeFeed, "change-feed", "CORREX_CHANGE_FEED", d.ChangeFeed, "produce the change feed to <topic>.changes")
	b.Bool(&c.ChangelogEnabled, "changelog", "CORREX_CHANGELOG", d.ChangelogEnabled,
		"produce snapshots to the compacted <topic>.snapshots and restore a lost read model from it")
	b.Int(&c.RedisWaitReplicas, "redis-wait-replicas", "CORREX_REDIS_WAIT_REPLICAS", d.RedisWaitReplicas,
		"Redis replicas that must acknowledge each snapshot batch before its checkpoint is written (0: no wait)")
	b.Duration(&c.RedisWaitTimeout, "redis-wait-timeout", "CORREX_REDIS_WAIT_TIMEOUT", d.RedisWaitTimeout,
		"longest wait for those replicas; the batch is retried after it")
	b.Duration(&c.RetainClosed, "retain-closed", "CORREX_RETAIN_CLOSED", d.RetainClosed,
		"how long a session that ended stays in Redis before it is archived and removed (0: for ever)")
	b.Duration(&c.TombstoneRetention, "tombstone-retention", "CORREX_TOMBSTONE_RETENTION", d.TombstoneRetention,
		"how long an archived session's id stays reserved after it ended (0: for ever); older ids may be used again")
	b.String(&c.ArchiveURL, "archive-url", "CORREX_ARCHIVE_URL", d.ArchiveURL,
		"bucket closed sessions are archived into (file://, s3://, gs://); required with CORREX_RETAIN_CLOSED")
	b.Duration(&c.ArchiveTimeout, "archive-timeout", "CORREX_ARCHIVE_TIMEOUT", d.ArchiveTimeout,
		"longest call to the archive (open, probe, write); past it the archive counts as unreachable, and the projector folds on")
	b.String(&c.SystemKeyFile, "system-key-file", "CORREX_SYSTEM_KEY_FILE", d.SystemKeyFile,
		"file of the keys that sign the system's records, one per line, the first signing (unset: a key kept in <topic>.system)")
	b.Float(&c.VerifyRate, "verify-rate", "CORREX_VERIFY_RATE", d.VerifyRate,
		"sessions a second the background verifier compares with the fold of the log (0: off)")
	b.Bool(&c.VerifyRepair, "verify-repair", "CORREX_VERIFY_REPAIR", d.VerifyRepair,
		"write the fold of the log over a missing, stale or corrupt snapshot the verifier finds")
	c.ArchiveSweep = d.ArchiveSweep // not a setting (see its doc)
	c.ArchiveRound = d.ArchiveRound // not a setting (see its doc)
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var p config.Problems
	if c.RedisWaitReplicas < 0 || (c.RedisWaitReplicas > 0 && c.RedisWaitTimeout <= 0) {
		p.Addf("CORREX_REDIS_WAIT_REPLICAS (%d) must be at least 0, and CORREX_REDIS_WAIT_TIMEOUT (%v) positive when it is set",
			c.RedisWaitReplicas, c.RedisWaitTimeout)
	}
	for _, s := range c.Kafka.Validate() {
		p.Addf("%s", s)
	}
	if c.Topic == "" {
		p.Addf("CORREX_TOPIC: must not be empty")
	}
	if c.Partitions < 1 {
		p.Addf("CORREX_PARTITIONS: %d, must be at least 1", c.Partitions)
	}
	if c.Group == "" {
		p.Addf("CORREX_GROUP: must not be empty")
	}
	for _, s := range redisclient.Validate(c.Redis) {
		p.Addf("%s", s)
	}
	for _, s := range c.TLS.Validate() {
		p.Addf("%s", s)
	}
	if c.FlushInterval <= 0 || c.MaxFlushInterval < c.FlushInterval {
		p.Addf("CORREX_FLUSH_INTERVAL (%v) must be positive and at most CORREX_MAX_FLUSH_INTERVAL (%v)", c.FlushInterval, c.MaxFlushInterval)
	}
	if c.MaxPollRecords < 1 {
		p.Addf("CORREX_MAX_POLL_RECORDS: %d, must be at least 1", c.MaxPollRecords)
	}
	if c.FlushSize < 1 {
		p.Addf("CORREX_FLUSH_SIZE: %d, must be at least 1", c.FlushSize)
	}
	if c.CacheSize < c.FlushSize {
		p.Addf("CORREX_CACHE_SIZE (%d) must be at least CORREX_FLUSH_SIZE (%d)", c.CacheSize, c.FlushSize)
	}
	if c.FlushBytes < 0 {
		p.Addf("CORREX_FLUSH_BYTES: %d, must not be negative (0 is a quarter of CORREX_CACHE_BYTES)", c.FlushBytes)
	}
	if c.CacheBytes < 0 {
		p.Addf("CORREX_CACHE_BYTES: %d, must not be negative (0 is the default, %d)", c.CacheBytes, DefaultCacheBytes)
	}
	if c.SessionTimeout < 6*time.Second {
		p.Addf("CORREX_SESSION_TIMEOUT: %v, must be at least 6s", c.SessionTimeout)
	}
	p.AddTimeouts(c.Timeouts)
	p.AddForcedGrace(c.ForcedGrace)
	if c.RetainClosed < 0 {
		p.Addf("CORREX_RETAIN_CLOSED: %v, must not be negative (0 keeps sessions for ever)", c.RetainClosed)
	}
	if c.TombstoneRetention < 0 {
		p.Addf("CORREX_TOMBSTONE_RETENTION: %v, must not be negative (0 keeps tombstones for ever)", c.TombstoneRetention)
	}
	if c.RetainClosed > 0 && c.ArchiveURL == "" {
		p.Addf("CORREX_RETAIN_CLOSED (%v) needs CORREX_ARCHIVE_URL: where the sessions go when they leave Redis", c.RetainClosed)
	}
	if c.ArchiveTimeout <= 0 {
		p.Addf("CORREX_ARCHIVE_TIMEOUT: %v, must be positive", c.ArchiveTimeout)
	}
	if c.VerifyRate < 0 {
		p.Addf("CORREX_VERIFY_RATE: %v, must not be negative (0 turns the verifier off)", c.VerifyRate)
	}
	if c.RebalanceTimeout < time.Second {
		p.Addf("CORREX_REBALANCE_TIMEOUT: %v, must be at least 1s", c.RebalanceTimeout)
	}
	return p.Err()
}
