package projstore

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// OutboxBatch is what a writer must be able to produce again after a crash,
// kept in Redis before the snapshots it derives from are stored: the
// records of one flush for one partition of a topic, encoded by the writer
// (the store never reads Data). Last is the highest source offset among
// them.
//
// The projector's change feed uses it: its records are derived from the
// fold, and once the snapshots are stored a replay skips the events they
// reflect, so the records of a flush that crashed between storing its
// snapshots and producing its records could not be derived again.
type OutboxBatch struct {
	Partition int32
	Last      int64
	Data      []byte
	// Below, when writing, drops the partition's batches whose Last is
	// below it (the partition's stored checkpoint: a replay never reaches
	// them). Zero keeps them all.
	Below int64
}

// PutOutbox stores batches in the topic's outbox (one key, so one slot on
// Redis Cluster), replacing a batch of the same partition and Last, and
// dropping each partition's batches below its Below. It is idempotent.
//
// It is fenced like the snapshots (epoch.go): a batch of a partition a
// newer owner claimed is not written, and PutOutbox returns a
// *NotOwnerError naming those partitions (the others' batches are
// written). A stalled writer's outbox batch would otherwise replace the
// new owner's batch of the same Last, or add outcomes of a fold that read
// what the new owner was rebuilding, and a later owner would produce the
// change feed from them.
func (s *Store) PutOutbox(ctx context.Context, topic string, batches []OutboxBatch) error {
	if len(batches) == 0 {
		return nil
	}
	key := s.keys.Outbox(topic)
	args := make([]any, 0, 1+5*len(batches))
	args = append(args, len(batches))
	for _, b := range batches {
		args = append(args, b.Partition, b.Last, b.Data, b.Below, s.epochs.get(b.Partition))
	}
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		return []*redis.Cmd{redislayout.OutboxScript.EvalSha(ctx, pipe, []string{key}, args...)}
	})
	if err != nil {
		return &snapshot.StoreError{Op: "outbox", Key: key, Err: err}
	}
	refused, err := cmds[0].Int64Slice()
	if err != nil {
		return &snapshot.StoreError{Op: "outbox", Key: key, Err: err}
	}
	if len(refused) > 0 {
		no := &NotOwnerError{}
		for _, p := range refused {
			if !slices.Contains(no.Partitions, int32(p)) {
				no.Partitions = append(no.Partitions, int32(p))
			}
		}
		return no
	}
	return nil
}

// Outbox returns the topic's outbox batches, ordered by partition and Last.
func (s *Store) Outbox(ctx context.Context, topic string) ([]OutboxBatch, error) {
	key := s.keys.Outbox(topic)
	m, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, &snapshot.StoreError{Op: "outbox", Key: key, Err: err}
	}
	out := make([]OutboxBatch, 0, len(m))
	for field, v := range m {
		if strings.HasSuffix(field, epochField) {
			continue // the partition's epoch, not a batch
		}
		ps, ls, ok := strings.Cut(field, ":")
		p, err1 := strconv.ParseInt(ps, 10, 32)
		last, err2 := strconv.ParseInt(ls, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, &snapshot.StoreError{Op: "outbox", Key: key, Err: corrupt("field %q", field)}
		}
		out = append(out, OutboxBatch{Partition: int32(p), Last: last, Data: []byte(v)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Last < out[j].Last
	})
	return out, nil
}
