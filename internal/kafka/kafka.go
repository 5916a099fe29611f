// Package kafka holds how the services talk to Kafka: client options built
// from the shared settings, and topic creation. Records are keyed by session
// id and partitioned with Kafka's default key hash (murmur2), so any Kafka
// producer (Java, librdkafka, kcat) puts a session on the same partition.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is what every service needs to reach Kafka.
type Config struct {
	Brokers  []string // CORREX_KAFKA_BROKERS
	ClientID string   // the service's name
}

// Validate reports every problem with the settings.
func (c Config) Validate() []string {
	var out []string
	if len(c.Brokers) == 0 {
		out = append(out, "CORREX_KAFKA_BROKERS: at least one broker address (host:port) is required")
	}
	return out
}

// Opts returns the client options shared by every service.
func (c Config) Opts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(time.Duration(tries)*100*time.Millisecond, 2*time.Second)
		}),
	}
}

// Partitioner is the partitioner every producer here uses: Kafka's default
// for keyed records (murmur2, high bit masked, modulo the partition count).
func Partitioner() kgo.Partitioner { return kgo.StickyKeyPartitioner(nil) }

// DLQTopic is the dead-letter topic of a topic.
func DLQTopic(topic string) string { return topic + ".dlq" }

// EnsureTopic creates topic with the given partitions and unlimited retention
// when it does not exist. An existing topic is left as it is (its partition
// count is reported back, since partitioning depends on it).
func EnsureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) (int32, error) {
	retention := "-1"
	// For one topic, kadm returns the topic's own error as err as well.
	_, err := adm.CreateTopic(ctx, partitions, -1, map[string]*string{"retention.ms": &retention}, topic)
	switch {
	case err == nil:
		return partitions, nil
	case !errors.Is(err, kerr.TopicAlreadyExists):
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %v", topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}

// HeaderEventType is the record header carrying the event type, so tools can
// filter without decoding values.
const HeaderEventType = "correx-event-type"

// DLQ record headers.
const (
	HeaderDLQReason = "correx-dlq-reason" // why the record was set aside
	HeaderDLQDetail = "correx-dlq-detail" // the decoder's or fold's message
	HeaderDLQSource = "correx-dlq-source" // topic/partition/offset of the original
)

// Source formats where a record came from, for HeaderDLQSource.
func Source(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}
