package projector

import (
	"context"
	"log/slog"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partitionRefresh is how often, at most, a record that is not on its key's
// partition makes the projector read the topic's partition count again
// before setting the record aside (the topic may have grown).
const partitionRefresh = 10 * time.Second

// partitioning knows the topic's partition count, to tell whether a record
// is on its key's partition (Kafka's default partitioner: murmur2 of the
// key modulo the count). Part of the state, under state.mu.
type partitioning struct {
	n         int32 // the topic's partition count; 0 before it is known
	refreshed time.Time
	part      kgo.TopicPartitioner

	topic string
	log   *slog.Logger
	// adm reads the count from the brokers; nil until Run has a client
	// (set before the group's callbacks are let in), and in unit tests of
	// the fold.
	adm *kadm.Client
}

// set records the topic's partition count read at start.
func (pt *partitioning) set(n int32) {
	pt.n, pt.refreshed = max(pt.n, n), time.Now()
}

// refresh reads the topic's partition count from the brokers. A failure
// keeps the count known so far.
func (pt *partitioning) refresh(ctx context.Context) {
	pt.refreshed = time.Now()
	if pt.adm == nil {
		return // not running (unit tests of the fold)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	details, err := pt.adm.ListTopics(cctx, pt.topic)
	if err != nil {
		pt.log.Warn("reading the topic's partition count", "err", err)
		return
	}
	d, ok := details[pt.topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		pt.log.Warn("reading the topic's partition count", "err", d.Err)
		return
	}
	if n := int32(len(d.Partitions)); n != pt.n {
		pt.log.Info("the topic's partition count", "partitions", n, "was", pt.n)
		pt.n = n
	}
}

// onKeyPartition reports whether r is on the partition its key hashes to
// under the topic's current partition count. A record that is not is read
// again against a fresh count (at most every partitionRefresh, or every
// second while its partition is beyond the count known), since the topic
// may have grown.
func (pt *partitioning) onKeyPartition(ctx context.Context, r *kgo.Record) bool {
	if pt.part == nil {
		pt.part = kafka.Partitioner().ForTopic(pt.topic)
	}
	ok := func() bool {
		return r.Partition < pt.n && int32(pt.part.Partition(r, int(pt.n))) == r.Partition
	}
	if pt.n > 0 && ok() {
		return true
	}
	since := time.Since(pt.refreshed)
	if (r.Partition >= pt.n && since >= time.Second) || since >= partitionRefresh {
		pt.refresh(ctx)
	}
	if pt.n <= r.Partition {
		return true // the count is unknown or behind the log: no judgement
	}
	return ok()
}
