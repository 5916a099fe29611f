package feed

import (
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Option configures a Consumer. Each option's doc comment gives its default.
// A Consumer has one constructor, so its options are of one kind; pkg/client,
// whose calls take different options, has a family of kinds instead
// (client.Opt).
type Option interface{ apply(*config) }

// Opt is the former name of Option.
//
// Deprecated: use Option.
type Opt = Option

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

// StartPosition is where a partition with no checkpoint starts.
type StartPosition int

const (
	// Earliest starts at the first change the topic still holds.
	Earliest StartPosition = iota
	// Latest starts at the end of the partition when it is first assigned;
	// that position is stored as the checkpoint at once, so a restart
	// before the first change does not move it.
	Latest
)

type config struct {
	brokers     []string
	kafkaOpts   []kgo.Opt
	eventsTopic string
	group       string
	rdb         redis.UniversalClient
	prefix      string
	start       StartPosition
	filter      func(*Change) bool
	log         *slog.Logger
}

func defaults() config {
	return config{
		brokers:     []string{"localhost:9092"},
		eventsTopic: "correx.session-events",
		prefix:      "correx",
		start:       Earliest,
		log:         slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	switch {
	case c.rdb == nil:
		return ErrNoRedis
	case c.group == "":
		return ErrNoGroup
	case c.eventsTopic == "":
		return fmt.Errorf("%w: the events topic is empty", ErrInvalidOption)
	case len(c.brokers) == 0:
		return fmt.Errorf("%w: no brokers", ErrInvalidOption)
	case c.start != Earliest && c.start != Latest:
		return fmt.Errorf("%w: start position %d", ErrInvalidOption, c.start)
	case c.log == nil:
		return fmt.Errorf("%w: a nil logger", ErrInvalidOption)
	}
	return nil
}

// Brokers are the Kafka seed brokers, host:port each. Default:
// "localhost:9092" (CORREX_KAFKA_BROKERS of the services).
func Brokers(addrs ...string) Option { return optFunc(func(c *config) { c.brokers = addrs }) }

// KafkaOpts are passed to kgo.NewClient after the consumer's own options:
// TLS (kgo.DialTLSConfig), SASL (kgo.SASL), a client id, static membership
// (kgo.InstanceID), timeouts. Options that would change how the consumer
// reads (ConsumeTopics, ConsumerGroup, the rebalance callbacks,
// AdjustFetchOffsetsFn, auto commit) are its own: do not pass them. Default:
// none.
func KafkaOpts(opts ...kgo.Opt) Option {
	return optFunc(func(c *config) { c.kafkaOpts = append(c.kafkaOpts, opts...) })
}

// EventsTopic is the events topic of the deployment (CORREX_TOPIC); the
// consumer reads Topic(EventsTopic). Default: "correx.session-events".
func EventsTopic(topic string) Option { return optFunc(func(c *config) { c.eventsTopic = topic }) }

// Group is the consumer's own consumer group: instances with the same group
// share the partitions, and the checkpoint is kept per group. Required; it
// must not be the projector's group.
func Group(group string) Option { return optFunc(func(c *config) { c.group = group }) }

// Redis is the client that keeps the checkpoint: a single server, a
// cluster or a failover client (each partition's checkpoint is one key).
// The consumer does not close it. Required.
func Redis(client redis.UniversalClient) Option { return optFunc(func(c *config) { c.rdb = client }) }

// KeyPrefix prefixes the checkpoint keys:
// "<prefix>:feed:<group>:<changes topic>:<partition>". Default: "correx".
func KeyPrefix(prefix string) Option { return optFunc(func(c *config) { c.prefix = prefix }) }

// StartAt is where a partition with no checkpoint starts. Default: Earliest.
func StartAt(p StartPosition) Option { return optFunc(func(c *config) { c.start = p }) }

// Filter hands the handler only the changes for which keep returns true;
// the others count as handled (they move the checkpoint). keep runs on the
// handler's goroutine. Default: every change.
func Filter(keep func(*Change) bool) Option { return optFunc(func(c *config) { c.filter = keep }) }

// Logger receives the consumer's warnings (Redis or Kafka unavailable,
// records that are not changes) and assignment notices. Default: discarded.
func Logger(l *slog.Logger) Option { return optFunc(func(c *config) { c.log = l }) }
