// Command webhook posts each transition of the change feed to an HTTP
// endpoint, signed with HMAC-SHA256, retrying with exponential backoff on
// network errors and 5xx (and 408, 429) answers. It checkpoints a change
// only after a 2xx answer, so nothing is lost across its own restart; a
// restart may post a change again (the receiver deduplicates on the
// Correx-Delivery header). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
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
	Brokers    []string      // -brokers, CORREX_KAFKA_BROKERS; default localhost:9092
	Topic      string        // -topic, CORREX_TOPIC (the events topic); default correx.session-events
	Group      string        // -group, WEBHOOK_GROUP; default correx-webhook
	RedisURL   string        // -redis, CORREX_REDIS_URL; default redis://localhost:6379/0
	Prefix     string        // -prefix, CORREX_REDIS_PREFIX; default correx
	URL        string        // -url, WEBHOOK_URL; required
	Secret     string        // WEBHOOK_SECRET only (not a flag: it would show in ps); required
	MinBackoff time.Duration // -min-backoff; default 500ms
	MaxBackoff time.Duration // -max-backoff; default 1m
	Timeout    time.Duration // -timeout, per request; default 10s
}

// parseConfig reads flags over the environment.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	brokers := fs.String("brokers", env("CORREX_KAFKA_BROKERS", "localhost:9092"), "Kafka brokers, comma-separated")
	var c Config
	fs.StringVar(&c.Topic, "topic", env("CORREX_TOPIC", "correx.session-events"), "the events topic (the feed is <topic>.changes)")
	fs.StringVar(&c.Group, "group", env("WEBHOOK_GROUP", "correx-webhook"), "consumer group; instances of one group share the work")
	fs.StringVar(&c.RedisURL, "redis", env("CORREX_REDIS_URL", "redis://localhost:6379/0"), "Redis of the checkpoint")
	fs.StringVar(&c.Prefix, "prefix", env("CORREX_REDIS_PREFIX", "correx"), "prefix of the checkpoint keys")
	fs.StringVar(&c.URL, "url", env("WEBHOOK_URL", ""), "endpoint to POST each transition to")
	fs.DurationVar(&c.MinBackoff, "min-backoff", 500*time.Millisecond, "first retry delay")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", time.Minute, "longest retry delay")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "timeout of one request")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	c.Brokers = strings.Split(*brokers, ",")
	c.Secret = getenv("WEBHOOK_SECRET")
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("-url (WEBHOOK_URL) is required"))
	}
	if c.Secret == "" {
		errs = append(errs, errors.New("WEBHOOK_SECRET is required"))
	}
	if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
		errs = append(errs, errors.New("backoffs must be positive, -max-backoff at least -min-backoff"))
	}
	return c, errors.Join(errs...)
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("webhook stopped", "err", err)
		os.Exit(1)
	}
}

// run posts transitions until ctx ends (nil) or a change cannot be
// delivered (a 4xx answer other than 408 and 429).
func run(ctx context.Context, cfg Config, log *slog.Logger) error {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c, err := feed.NewConsumer(feed.Brokers(cfg.Brokers...), feed.EventsTopic(cfg.Topic), feed.Group(cfg.Group),
		feed.Redis(rdb), feed.KeyPrefix(cfg.Prefix), feed.Logger(log), feed.Filter(isTransition))
	if err != nil {
		return err
	}
	s := &sender{url: cfg.URL, secret: []byte(cfg.Secret), client: &http.Client{Timeout: cfg.Timeout},
		min: cfg.MinBackoff, max: cfg.MaxBackoff, log: log, now: time.Now}
	log.Info("posting transitions", "url", cfg.URL, "topic", feed.Topic(cfg.Topic), "group", cfg.Group)
	return c.Run(ctx, s.post)
}

// isTransition keeps applied transitions: changes that moved the session to
// another state (the creation included) and the escalation of a graceful
// CANCELLING to forced (CANCELLING -> CANCELLING), not rejections or
// custom events.
func isTransition(c *feed.Change) bool { return c.Transition() }

// sender posts one change, retrying until a 2xx, a permanent failure or the
// end of ctx.
type sender struct {
	url      string
	secret   []byte
	client   *http.Client
	min, max time.Duration
	log      *slog.Logger
	now      func() time.Time
}

// permanentError is an answer that retrying will not change.
type permanentError struct{ status int }

func (e *permanentError) Error() string { return fmt.Sprintf("endpoint answered %d", e.status) }

func (s *sender) post(ctx context.Context, c feed.Change) error {
	body := c.AppendJSON(nil)
	delay := s.min
	for attempt := 1; ; attempt++ {
		err := s.attempt(ctx, c, body)
		if err == nil {
			return nil
		}
		var perm *permanentError
		if errors.As(err, &perm) || ctx.Err() != nil {
			return err
		}
		s.log.Warn("webhook delivery failed; retrying", "session", c.SessionID, "position", c.Position.String(),
			"attempt", attempt, "retryIn", delay, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, s.max)
	}
}

func (s *sender) attempt(ctx context.Context, c feed.Change, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(string(body)))
	if err != nil {
		return &permanentError{status: 0}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(s.secret, s.now(), body))
	req.Header.Set(DeliveryHeader, c.SessionID+"/"+c.Position.String())
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("endpoint answered %d", resp.StatusCode)
	default:
		return &permanentError{status: resp.StatusCode}
	}
}
