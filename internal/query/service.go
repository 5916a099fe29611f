package query

import (
	"context"
	"errors"
	"fmt"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/snapshot"
)

// Config configures the query service.
type Config struct {
	Kafka        kafka.Config // only for /replay
	Topic        string       // CORREX_TOPIC; default correx.session-events
	RedisURL     string       // CORREX_REDIS_URL; default redis://127.0.0.1:6379/0
	RedisCluster bool         // CORREX_REDIS_CLUSTER; default false
	RedisPrefix  string       // CORREX_REDIS_PREFIX; default correx
	HTTPAddr     string       // CORREX_HTTP_ADDR; default :8082
}

// Bind registers the flags and environment variables.
func (c *Config) Bind(b *config.Binder) {
	c.Kafka.ClientID = "correx-query"
	b.Strings(&c.Kafka.Brokers, "kafka-brokers", "CORREX_KAFKA_BROKERS", []string{"127.0.0.1:9092"}, "Kafka bootstrap brokers (for /replay only)")
	b.String(&c.Topic, "topic", "CORREX_TOPIC", "correx.session-events", "topic of session events")
	b.Secret(&c.RedisURL, "redis-url", "CORREX_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL (rediss:// for TLS)")
	b.Bool(&c.RedisCluster, "redis-cluster", "CORREX_REDIS_CLUSTER", false, "the Redis URL names a Redis Cluster")
	b.String(&c.RedisPrefix, "redis-prefix", "CORREX_REDIS_PREFIX", "correx", "prefix of every Redis key")
	b.String(&c.HTTPAddr, "http-addr", "CORREX_HTTP_ADDR", ":8082", "listen address")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var p config.Problems
	if c.Topic == "" {
		p.Addf("CORREX_TOPIC: must not be empty")
	}
	if c.RedisURL == "" {
		p.Addf("CORREX_REDIS_URL: must not be empty")
	}
	if _, err := redisconn.Open(c.RedisURL, c.RedisCluster); c.RedisURL != "" && err != nil {
		p.Addf("%v", err)
	}
	if c.RedisPrefix == "" {
		p.Addf("CORREX_REDIS_PREFIX: must not be empty")
	}
	return p.Err()
}

// Serve runs the query service until ctx is done.
func Serve(ctx context.Context, cfg Config, rt service.Runtime) error {
	rdb, err := redisconn.Open(cfg.RedisURL, cfg.RedisCluster)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rt.InstrumentRedis(rdb); err != nil {
		return err
	}
	store, err := snapshot.NewStore(rdb, cfg.RedisPrefix)
	if err != nil {
		return err
	}
	var replayer Replayer
	if len(cfg.Kafka.Brokers) > 0 {
		replayer = &KafkaReplayer{Kafka: cfg.Kafka, Topic: cfg.Topic, Opts: append(rt.KafkaOpts, rt.KafkaTracing()...)}
	}
	h := NewHandler(store, cfg.Topic, replayer, Options{Log: rt.Logger()})
	err = rt.HTTP(ctx, cfg.HTTPAddr, h, store.Ping)
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("query: %w", err)
	}
	return nil
}
