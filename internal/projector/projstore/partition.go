package projstore

import (
	"context"
	"fmt"
	"slices"
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

// DeletePartition deletes every stored snapshot whose position is on one
// of partitions, with its index entries, and returns how many it deleted. A
// projector that finds a partition's checkpoint gone (Redis emptied) calls
// it, after ResetCheckpoint, before folding the partition again from the
// earliest offset: snapshots
// written after the loss may have been folded without the history Redis
// lost, and the skip rule would otherwise protect them from the rebuild. It
// reads every bucket once (one script call each, pipelined), whatever the
// number of partitions: a projector that lost several partitions at once
// deletes them in one call, rather than reading every stored snapshot once
// per partition. It is for that rare recovery, not for routine use. A
// Store that no longer owns one of the partitions (epoch.go) deletes
// nothing (ErrNotOwner). The partitions' tombstones stay: what was archived
// stays archived.
func (s *Store) DeletePartition(ctx context.Context, partitions ...int32) (int, error) {
	if len(partitions) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 1+2*len(partitions))
	args = append(args, "")
	for _, p := range partitions {
		args = append(args, p, s.epochs.get(p))
	}
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, redislayout.Buckets)
		for b := range cmds {
			bargs := slices.Clone(args)
			bargs[0] = s.keys.SnapshotBase(b)
			cmds[b] = redislayout.DeletePartitionScript.EvalSha(ctx, pipe, []string{s.keys.Index(b), s.keys.Epochs(b)}, bargs...)
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
			return n, s.notOwner("delete", partitions[-v-1])
		}
		n += v
	}
	return n, nil
}
