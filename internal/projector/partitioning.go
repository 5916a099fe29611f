package projector

import (
	"context"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionRefresh is how often, at most, a record that is not on its key's
// partition makes the projector read the topic's partition count again
// before setting the record aside (the topic may have grown).
const partitionRefresh = 10 * time.Second

// partitioning knows the topic's partition count, to tell whether a record
// is on its key's partition (Kafka's default partitioner: murmur2 of the
// key modulo the count). Owned by the fold goroutine, under Projector.mu.
type partitioning struct {
	n         int32 // the topic's partition count; 0 before it is known
	refreshed time.Time
	part      kgo.TopicPartitioner
}

// setPartitions records the topic's partition count read at start.
func (p *Projector) setPartitions(n int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pt.n, p.pt.refreshed = max(p.pt.n, n), time.Now()
}

// refreshPartitions reads the topic's partition count from the brokers. A
// failure keeps the count known so far.
func (p *Projector) refreshPartitions(ctx context.Context) {
	p.pt.refreshed = time.Now()
	if p.adm == nil {
		return // not running (unit tests of the fold)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	details, err := p.adm.ListTopics(cctx, p.cfg.Topic)
	if err != nil {
		p.log.Warn("reading the topic's partition count", "err", err)
		return
	}
	d, ok := details[p.cfg.Topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		p.log.Warn("reading the topic's partition count", "err", d.Err)
		return
	}
	if n := int32(len(d.Partitions)); n != p.pt.n {
		p.log.Info("the topic's partition count", "partitions", n, "was", p.pt.n)
		p.pt.n = n
	}
}

// onKeyPartition reports whether r is on the partition its key hashes to
// under the topic's current partition count. A record that is not is read
// again against a fresh count (at most every partitionRefresh, or every
// second while its partition is beyond the count known), since the topic
// may have grown.
func (p *Projector) onKeyPartition(ctx context.Context, r *kgo.Record) bool {
	if p.pt.part == nil {
		p.pt.part = kafka.Partitioner().ForTopic(p.cfg.Topic)
	}
	ok := func() bool {
		return r.Partition < p.pt.n && int32(p.pt.part.Partition(r, int(p.pt.n))) == r.Partition
	}
	if p.pt.n > 0 && ok() {
		return true
	}
	since := time.Since(p.pt.refreshed)
	if (r.Partition >= p.pt.n && since >= time.Second) || since >= partitionRefresh {
		p.refreshPartitions(ctx)
	}
	if p.pt.n <= r.Partition {
		return true // the count is unknown or behind the log: no judgement
	}
	return ok()
}
