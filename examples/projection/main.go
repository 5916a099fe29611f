// Command projection is a custom projection of the change feed: active
// sessions per label value and the mean time to approval per day, kept in
// Redis under its own keys and served over HTTP (GET /active?label=team,
// GET /approval-times). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/correx/sessions/pkg/feed"
	"github.com/redis/go-redis/v9"
)

// Config is the program's configuration; flags, with environment defaults.
type Config struct {
	Brokers  []string // -brokers, CORREX_KAFKA_BROKERS; default localhost:9092
	Topic    string   // -topic, CORREX_TOPIC (the events topic); default correx.session-events
	Group    string   // -group, PROJECTION_GROUP; default correx-projection (also the keys' {name})
	RedisURL string   // -redis, CORREX_REDIS_URL; default redis://localhost:6379/0
	Prefix   string   // -prefix, CORREX_REDIS_PREFIX; default correx
	Addr     string   // -addr, PROJECTION_ADDR; default :8090
}

func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("projection", flag.ContinueOnError)
	brokers := fs.String("brokers", env("CORREX_KAFKA_BROKERS", "localhost:9092"), "Kafka brokers, comma-separated")
	var c Config
	fs.StringVar(&c.Topic, "topic", env("CORREX_TOPIC", "correx.session-events"), "the events topic (the feed is <topic>.changes)")
	fs.StringVar(&c.Group, "group", env("PROJECTION_GROUP", "correx-projection"), "consumer group, and the name in the projection's keys")
	fs.StringVar(&c.RedisURL, "redis", env("CORREX_REDIS_URL", "redis://localhost:6379/0"), "Redis of the projection and its checkpoint")
	fs.StringVar(&c.Prefix, "prefix", env("CORREX_REDIS_PREFIX", "correx"), "prefix of the keys")
	fs.StringVar(&c.Addr, "addr", env("PROJECTION_ADDR", ":8090"), "HTTP listen address")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.Brokers = strings.Split(*brokers, ",")
	return c, nil
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	if err := run(ctx, cfg, ln, log); err != nil {
		log.Error("projection stopped", "err", err)
		os.Exit(1)
	}
}

// run folds the feed into the projection and serves it on ln until ctx
// ends (nil) or folding fails.
func run(ctx context.Context, cfg Config, ln net.Listener, log *slog.Logger) error {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	p := NewProjection(rdb, cfg.Prefix, cfg.Group)
	c, err := feed.NewConsumer(feed.Brokers(cfg.Brokers...), feed.EventsTopic(cfg.Topic), feed.Group(cfg.Group),
		feed.Redis(rdb), feed.KeyPrefix(cfg.Prefix), feed.Logger(log))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("projection serving", "addr", ln.Addr().String(), "topic", feed.Topic(cfg.Topic), "group", cfg.Group)

	runErr := c.Run(ctx, p.Apply)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		runErr = errors.Join(runErr, err)
	}
	return runErr
}
