package correx

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// Option configures Run. It is also a testcontainers.ContainerCustomizer
// whose Customize does nothing, so that Options and customizers can be
// passed to Run together.
type Option func(*options) error

// Customize is a no-op: it makes Option a testcontainers.ContainerCustomizer.
func (o Option) Customize(*testcontainers.GenericContainerRequest) error { return nil }

var _ testcontainers.ContainerCustomizer = Option(nil)

type options struct {
	partitions     int
	tokensFile     string
	otlpEndpoint   string
	brokers        string // external Kafka, comma-separated
	redisURL       string // external Redis
	imagePrefix    string
	imageTag       string
	kafkaImage     string
	redisImage     string
	kafkaFlavor    string
	startupTimeout time.Duration
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func defaultOptions() options {
	return options{
		partitions:     3,
		imagePrefix:    envOr("CORREX_IMAGE_PREFIX", "correx/"),
		imageTag:       envOr("CORREX_IMAGE_TAG", "dev"),
		kafkaImage:     os.Getenv("KAFKA_IMAGE"),
		redisImage:     os.Getenv("REDIS_IMAGE"),
		kafkaFlavor:    os.Getenv("KAFKA_FLAVOR"),
		startupTimeout: 90 * time.Second,
	}
}

func (o options) image(service string) string { return o.imagePrefix + service + ":" + o.imageTag }

// kafka returns the broker image and its kind.
func (o options) kafka() (image, flavor string, err error) {
	image = o.kafkaImage
	if image == "" {
		image = o.image("kafkabroker")
	}
	flavor = o.kafkaFlavor
	if flavor == "" {
		switch {
		case strings.Contains(image, "redpanda"):
			flavor = "redpanda"
		case strings.Contains(image, "kafkabroker"):
			flavor = "kfake"
		default:
			flavor = "apache"
		}
	}
	switch flavor {
	case "kfake", "apache", "redpanda":
		return image, flavor, nil
	}
	return "", "", fmt.Errorf("correx: Kafka flavor %q: want kfake, apache or redpanda", flavor)
}

func (o options) redis() string {
	if o.redisImage != "" {
		return o.redisImage
	}
	return o.image("redis")
}

// WithPartitions sets the topic's partition count (CORREX_PARTITIONS).
// Default: 3.
func WithPartitions(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("correx: WithPartitions(%d): want at least 1", n)
		}
		o.partitions = n
		return nil
	}
}

// WithTokensFile turns authentication on with a file of hashed bearer tokens
// on the host (the format of `go run ./cmd/tokens`; see docs/security.md): it
// is copied into the ingest and query containers, which then require a
// token. Default: authentication off (CORREX_AUTH_DISABLED=true). There is no
// rate limit either way (CORREX_RATE_LIMIT=0): one test process stands in
// for many clients.
func WithTokensFile(path string) Option {
	return func(o *options) error {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("correx: WithTokensFile: %w", err)
		}
		o.tokensFile = path
		return nil
	}
}

// WithTelemetry exports the services' traces and metrics over OTLP to
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, with OTEL_TRACES_EXPORTER and
// OTEL_METRICS_EXPORTER set to otlp). The endpoint is dialled from inside the
// containers: name a collector on the same network by its alias, or the host
// as the engine exposes it. Default: no export (Prometheus /metrics is
// always served).
func WithTelemetry(endpoint string) Option {
	return func(o *options) error {
		o.otlpEndpoint = endpoint
		return nil
	}
}

// WithKafka uses an external Kafka (comma-separated host:port, reachable
// from inside the containers) instead of starting a broker container; the
// services create the topic if it is missing. Default: a broker container.
func WithKafka(brokers string) Option {
	return func(o *options) error {
		o.brokers = brokers
		return nil
	}
}

// WithRedis uses an external Redis (redis://host:port/db, reachable from
// inside the containers) instead of starting a Redis container. Default: a
// Redis container with append-only persistence.
func WithRedis(url string) Option {
	return func(o *options) error {
		o.redisURL = url
		return nil
	}
}

// WithImages sets the image prefix and tag of the service images (and of
// the default broker and Redis images). Default: CORREX_IMAGE_PREFIX and
// CORREX_IMAGE_TAG, or "correx/" and "dev".
func WithImages(prefix, tag string) Option {
	return func(o *options) error {
		o.imagePrefix, o.imageTag = prefix, tag
		return nil
	}
}

// WithKafkaImage sets the broker image and its kind ("kfake", "apache",
// "redpanda"; "" guesses from the name). Default: KAFKA_IMAGE and
// KAFKA_FLAVOR, or the project's kfake broker image.
func WithKafkaImage(image, flavor string) Option {
	return func(o *options) error {
		o.kafkaImage, o.kafkaFlavor = image, flavor
		return nil
	}
}

// WithRedisImage sets the Redis image; it must take redis-server flags as
// its arguments, as the official image does. Default: REDIS_IMAGE, or the
// project's Redis image.
func WithRedisImage(image string) Option {
	return func(o *options) error {
		o.redisImage = image
		return nil
	}
}

// WithStartupTimeout bounds each container's wait strategy. Default: 90s.
func WithStartupTimeout(d time.Duration) Option {
	return func(o *options) error {
		o.startupTimeout = d
		return nil
	}
}
