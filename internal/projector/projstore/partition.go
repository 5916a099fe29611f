package projstore

import (
	"context"
	"fmt"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// ResetCheckpoint starts a partition's rebuild from the earliest offset:
// it stores the partition's checkpoint as 0, whatever is stored, with the
// mark RebuildUntil = until (the log's end when the rebuild began). The
// writer calls it before it deletes anything of the partition (see
// DeletePartition), so that the rebuild is durable: a writer that stops
// before the rebuild's own checkpoints pass the old one finds the
// checkpoint at 0 when it starts again, not the old one over deleted
// snapshots, and the mark tells it that the partition's deletes may be
// unfinished. until must be positive.
func (s *Store) ResetCheckpoint(ctx context.Context, topic string, partition int32, until int64, now time.Time) error {
	if until <= 0 {
		return fmt.Errorf("snapshot store: a rebuild to offset %d: want a positive offset", until)
	}
	key := s.keys.Checkpoints(topic)
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		return []*redis.Cmd{redislayout.ResetCheckpointScript.EvalSha(ctx, pipe, []string{key}, now.UnixMilli(), partition, until, s.epochs.get(partition))}
	})
	if err != nil {
		return &snapshot.StoreError{Op: "checkpoint", Key: key, Err: err}
	}
	if v, _ := cmds[0].Int(); v == -2 {
		return s.notOwner("checkpoint", partition)
	}
	return nil
}

// DeletePartition deletes every stored snapshot whose position is on
// partition, with its index entries, and returns how many it deleted. A
// projector that finds its partition's checkpoint gone (Redis emptied) calls
// it, after ResetCheckpoint, before folding the partition again from the
// earliest offset: snapshots
// written after the loss may have been folded without the history Redis
// lost, and the skip rule would otherwise protect them from the rebuild. It
// reads every bucket (one script call each, pipelined); it is for that rare
// recovery, not for routine use. A Store that no longer owns the
// partition (epoch.go) deletes nothing (ErrNotOwner). The partition's
// tombstones stay: what was archived stays archived.
func (s *Store) DeletePartition(ctx context.Context, partition int32) (int, error) {
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, redislayout.Buckets)
		for b := range cmds {
			cmds[b] = redislayout.DeletePartitionScript.EvalSha(ctx, pipe, []string{s.keys.Index(b), s.keys.Epochs(b)}, s.keys.SnapshotBase(b), partition, s.epochs.get(partition))
		}
		return cmds
	})
	if err != nil {
		return 0, &snapshot.StoreError{Op: "delete", Err: err}
	}
	n := 0
	for _, cmd := range cmds {
		v, err := cmd.Int()
		if err != nil {
			return n, &snapshot.StoreError{Op: "delete", Err: err}
		}
		if v < 0 {
			return n, s.notOwner("delete", partition)
		}
		n += v
	}
	return n, nil
}
