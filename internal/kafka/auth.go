package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AuthError is a Kafka operation that failed while the client could not
// authenticate: the brokers rejected the SASL credentials (or closed the
// connection during SASL, as some brokers do), so the client retried until
// the operation gave up. Err is the operation's own error.
type AuthError struct {
	Mechanism string
	User      string
	Broker    string // host:port of the broker that refused, when known
	Err       error
}

func (e *AuthError) Error() string {
	where := ""
	if e.Broker != "" {
		where = " at " + e.Broker
	}
	return fmt.Sprintf("kafka SASL authentication failed%s (mechanism %s, user %q): check CORREX_KAFKA_SASL_USERNAME and "+
		"CORREX_KAFKA_SASL_PASSWORD_FILE: %v", where, e.Mechanism, e.User, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }

// Request keys of the SASL exchange.
const (
	keySASLHandshake    = 17
	keyAPIVersions      = 18
	keySASLAuthenticate = 36
)

// authWatch is a client hook that notices SASL exchanges that fail. A broker
// that rejects credentials either answers SASL_AUTHENTICATION_FAILED, which
// franz-go reports as such, or closes the connection, which franz-go treats
// as a transient network error and retries until the request times out with
// only "context deadline exceeded" to show. The watch remembers the latest
// failure until an authenticated request succeeds, logs it (at most every
// 30 s), and lets Explain name it. Safe for concurrent use.
type authWatch struct {
	mechanism, user string
	log             *slog.Logger

	mu       sync.Mutex
	failing  bool
	broker   string
	loggedAt time.Time
}

var (
	_ kgo.HookBrokerRead  = (*authWatch)(nil)
	_ kgo.HookBrokerWrite = (*authWatch)(nil)
)

func (w *authWatch) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	w.observe(meta, key, err)
}

func (w *authWatch) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == keySASLAuthenticate && err != nil {
		w.observe(meta, key, err)
	}
}

func (w *authWatch) observe(meta kgo.BrokerMetadata, key int16, err error) {
	switch {
	case key == keySASLAuthenticate || key == keySASLHandshake:
		if err == nil {
			return
		}
		broker := fmt.Sprintf("%s:%d", meta.Host, meta.Port)
		w.mu.Lock()
		w.failing, w.broker = true, broker
		logNow := time.Since(w.loggedAt) > 30*time.Second
		if logNow {
			w.loggedAt = time.Now()
		}
		w.mu.Unlock()
		if logNow {
			w.logger().Error("kafka authentication failed: the broker closed the connection during SASL; "+
				"check CORREX_KAFKA_SASL_USERNAME and CORREX_KAFKA_SASL_PASSWORD_FILE",
				"broker", broker, "mechanism", w.mechanism, "user", w.user, "err", err)
		}
	case key != keyAPIVersions && err == nil:
		w.mu.Lock()
		w.failing = false
		w.mu.Unlock()
	}
}

func (w *authWatch) logger() *slog.Logger {
	if w.log != nil {
		return w.log
	}
	return slog.Default()
}

// explain turns err into an *AuthError when authentication is what failed.
func (w *authWatch) explain(err error) error {
	if err == nil {
		return nil
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		return err
	}
	w.mu.Lock()
	failing, broker := w.failing, w.broker
	w.mu.Unlock()
	if failing || errors.Is(err, kerr.SaslAuthenticationFailed) {
		return &AuthError{Mechanism: w.mechanism, User: w.user, Broker: broker, Err: err}
	}
	return err
}

// Client is a franz-go client built from a Config that can tell when an
// error comes from failed authentication (see Explain).
type Client struct {
	*kgo.Client
	watch *authWatch
}

// NewClient returns a client with c's options followed by extra.
func NewClient(c Config, extra ...kgo.Opt) (*Client, error) {
	opts, watch := c.opts()
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, err
	}
	return &Client{Client: cl, watch: watch}, nil
}

// Explain returns err as an *AuthError when the client's SASL
// authentication is failing, else err itself.
func (c *Client) Explain(err error) error {
	if c.watch == nil {
		return err
	}
	return c.watch.explain(err)
}

// Ping is kgo.Client.Ping with authentication failures explained.
func (c *Client) Ping(ctx context.Context) error { return c.Explain(c.Client.Ping(ctx)) }
