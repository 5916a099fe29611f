package config

// Defaults that every service shares, so that the three services (and the
// devstack) find one another without any setting. Each service's
// DefaultConfig uses them; README's Configuration table lists them.
const (
	DefaultBroker      = "127.0.0.1:9092"           // CORREX_KAFKA_BROKERS
	DefaultTopic       = "correx.session-events"    // CORREX_TOPIC
	DefaultPartitions  = 12                         // CORREX_PARTITIONS, when the topic is created
	DefaultRedisURL    = "redis://127.0.0.1:6379/0" // CORREX_REDIS_URL
	DefaultRedisPrefix = "correx"                   // CORREX_REDIS_PREFIX
)
