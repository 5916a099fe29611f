package query

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PartitionCounter reports how many partitions the topic has, so that a
// read waiting for a position on a partition that does not exist is refused
// at once instead of holding a waiting slot until its deadline.
type PartitionCounter interface {
	Partitions(ctx context.Context) (int32, error)
}

// KafkaPartitions asks the brokers for the topic's partition count. Create
// it with NewKafkaPartitions; Close releases its client. It is safe for
// concurrent use.
type KafkaPartitions struct {
	cl    *kafka.Client
	adm   *kadm.Client
	topic string
}

// NewKafkaPartitions returns a counter of topic's partitions; it does not
// contact the brokers.
func NewKafkaPartitions(cfg kafka.Config, topic string, opts ...kgo.Opt) (*KafkaPartitions, error) {
	// The client answers metadata from its cache for MetadataMinAge (5s by
	// default); 1s lets a grown topic be seen soon after.
	cl, err := kafka.NewClient(cfg, append([]kgo.Opt{kgo.MetadataMinAge(time.Second)}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &KafkaPartitions{cl: cl, adm: kadm.NewClient(cl.Client), topic: topic}, nil
}

// Partitions implements PartitionCounter.
func (k *KafkaPartitions) Partitions(ctx context.Context) (int32, error) {
	details, err := k.adm.ListTopics(ctx, k.topic)
	if err != nil {
		return 0, k.cl.Explain(err)
	}
	d, ok := details[k.topic]
	if !ok || d.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %v", k.topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}

// StartOffsets implements LogStarts: each partition's log start offset.
func (k *KafkaPartitions) StartOffsets(ctx context.Context) (map[int32]int64, error) {
	offs, err := k.adm.ListStartOffsets(ctx, k.topic)
	if err != nil {
		return nil, k.cl.Explain(err)
	}
	if err := offs.Error(); err != nil {
		return nil, k.cl.Explain(err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// Close closes the Kafka client.
func (k *KafkaPartitions) Close() { k.cl.Close() }

// partitionsTimeout bounds one question to Kafka about the partition count.
const partitionsTimeout = 2 * time.Second

// partitionCount caches the topic's partition count. Kafka topics only
// grow, so a partition below the known count exists without asking; one at
// or beyond it makes the cache ask again (at most once per every, so that a
// flood of bad positions costs one metadata request a period), which is how
// a topic grown after the start is seen.
type partitionCount struct {
	src   PartitionCounter // nil: unknown, every partition is accepted
	every time.Duration
	n     atomic.Int32 // 0 until the first answer
	mu    sync.Mutex   // held while asking src; guards asked
	asked time.Time
}

// exists reports whether partition p exists as far as the count is known,
// with that count (0 when unknown: then every partition is accepted, since
// refusing a real position would be worse than waiting on a wrong one).
func (c *partitionCount) exists(ctx context.Context, p int32) (bool, int32) {
	if c.src == nil || p < c.n.Load() {
		return true, c.n.Load()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.n.Load(); p < n {
		return true, n
	}
	if time.Since(c.asked) >= c.every {
		c.asked = time.Now()
		ctx, cancel := context.WithTimeout(ctx, partitionsTimeout)
		n, err := c.src.Partitions(ctx)
		cancel()
		if err == nil && n > 0 {
			c.n.Store(n)
		}
	}
	n := c.n.Load()
	return n == 0 || p < n, n
}
