package projstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Ownership epochs fence a projector that no longer owns a partition (one
// that stalled, SIGSTOP or a long pause, while the group gave its
// partitions to another) out of everything it would write there. Each
// partition has an epoch, a number that only grows:
//
//	<prefix>:{dl:<topic>:<partition>}:epoch   the partition's epoch (string): the
//	                                          deadlines', closed sessions' and claim's
//	<prefix>:{bNNN}:ep                        hash: partition -> epoch, one per bucket,
//	                                          for the snapshots and tombstones
//	<prefix>:ckpt:<topic>, field "<p>:ep"     for the checkpoints
//	<prefix>:outbox:<topic>, field "<p>:ep"   for the change feed's outbox
//
// A projector that is assigned a partition claims it (Claim) before it
// writes anything there: the epoch becomes one more than the stored one, or
// the Kafka group's generation when that is higher, and is copied, never
// lowered, beside every key the partition's writes touch, so that every
// write script (each runs on one Redis Cluster slot) reads it there. Every
// write of the partition then carries the claimed epoch, and a script that
// finds a higher one stored writes nothing and says so: PutBatch reports
// the partition in PutResult.NotOwned, SaveCheckpoints in
// PriorCheckpoint.NotOwner, and the other writes fail with ErrNotOwner.
// The projector then drops the partition's state: its new owner folds it.
//
// The claims are held by the Store (one Store per projector): its writes
// of a partition carry the epoch it claimed last, or 0 (unfenced) for a
// partition it never claimed. Where Redis lost the epochs (emptied), the
// next claim starts again from the group's generation, which keeps growing
// with every rebalance: a writer that claimed before the loss loses to
// one that claims after it.

// ErrNotOwner is the error of a write refused because a newer owner took
// its partition over (see above); errors.Is finds it in a StoreError.
var ErrNotOwner = snapshot.ErrNotOwner

// epochs are a Store's claims, by partition.
type epochs struct {
	mu sync.Mutex
	m  map[int32]uint64
}

func (e *epochs) get(partition int32) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[partition]
}

func (e *epochs) set(partition int32, epoch uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[int32]uint64{}
	}
	e.m[partition] = epoch
}

// Epoch returns the epoch of the last claim of partition, or 0.
func (s *Store) Epoch(partition int32) uint64 { return s.epochs.get(partition) }

// Claim takes partition of topic over for this Store's writes, given the
// Kafka group's generation, and returns the new epoch (see above). Call it
// when the partition is assigned, before anything of it is written.
func (s *Store) Claim(ctx context.Context, topic string, partition int32, generation int32) (uint64, error) {
	key := s.keys.Epoch(topic, partition)
	e, err := redislayout.ClaimScript.Run(ctx, s.rdb, []string{key}, generation).Uint64()
	if err != nil {
		return 0, &snapshot.StoreError{Op: "claim", Key: key, Err: err}
	}
	field := strconv.FormatInt(int64(partition), 10)
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, 0, redislayout.Buckets+1)
		for b := range redislayout.Buckets {
			cmds = append(cmds, redislayout.RaiseEpochScript.EvalSha(ctx, pipe, []string{s.keys.Epochs(b)}, field, e))
		}
		return append(cmds, redislayout.RaiseEpochScript.EvalSha(ctx, pipe, []string{s.keys.Checkpoints(topic)}, field+epochField, e))
	})
	if err == nil {
		err = raised(cmds, partition, e)
	}
	if err != nil {
		return 0, &snapshot.StoreError{Op: "claim", Key: key, Err: err}
	}
	// The outbox's epoch last, once the snapshots' are raised: an outbox
	// batch refused is then a batch whose snapshots are refused too, so a
	// stalled writer never stores snapshots without the outcomes their
	// change feed records are produced from after a crash.
	cmds, err = s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		return []*redis.Cmd{redislayout.RaiseEpochScript.EvalSha(ctx, pipe, []string{s.keys.Outbox(topic)}, field+epochField, e)}
	})
	if err == nil {
		err = raised(cmds, partition, e)
	}
	if err != nil {
		return 0, &snapshot.StoreError{Op: "claim", Key: key, Err: err}
	}
	s.epochs.set(partition, e)
	return e, nil
}

// epochField ends the field of a partition's epoch in the checkpoints'
// and the outbox's hashes ("<partition>:ep").
const epochField = ":ep"

// raised checks the answers of RaiseEpochScript calls of a claim of
// partition at epoch e: an error, or a higher epoch stored (a newer claim
// came first), fails the claim.
func raised(cmds []*redis.Cmd, partition int32, e uint64) error {
	for _, c := range cmds {
		stored, err := c.Uint64()
		if err != nil {
			return err
		}
		if stored > e {
			return fmt.Errorf("%w: partition %d claimed at epoch %d, and %d is stored", ErrNotOwner, partition, e, stored)
		}
	}
	return nil
}

// notOwner is the error of a write of partition refused at epoch.
func (s *Store) notOwner(op string, partition int32) error {
	return &snapshot.StoreError{Op: op, Err: fmt.Errorf("%w: partition %d, epoch %d", ErrNotOwner, partition, s.epochs.get(partition))}
}

// PutBatch is snapshot.Store.PutBatch with each entry's Epoch set to this
// Store's claim of its partition (Claim).
func (s *Store) PutBatch(ctx context.Context, entries []snapshot.Entry) (snapshot.PutResult, error) {
	for i := range entries {
		if e := &entries[i]; e.Epoch == 0 && len(e.Data) >= 5 {
			e.Epoch = s.epochs.get(entryPartition(e.Data))
		}
	}
	return s.Store.PutBatch(ctx, entries)
}

// SaveCheckpoints is snapshot.Store.SaveCheckpoints with each checkpoint's
// Epoch set to this Store's claim of its partition (Claim).
func (s *Store) SaveCheckpoints(ctx context.Context, topic string, cps []snapshot.Checkpoint, now time.Time) ([]snapshot.PriorCheckpoint, error) {
	for i := range cps {
		if cps[i].Epoch == 0 {
			cps[i].Epoch = s.epochs.get(cps[i].Partition)
		}
	}
	return s.Store.SaveCheckpoints(ctx, topic, cps, now)
}

// entryPartition reads the partition of an encoded snapshot's position
// (pkg/snapshot's binary.go: bytes 1 to 4).
func entryPartition(data []byte) int32 {
	return int32(uint32(data[1])<<24 | uint32(data[2])<<16 | uint32(data[3])<<8 | uint32(data[4]))
}

// NotOwnerError is the error of a write over several partitions (ArmDeadlines)
// of which some were refused: the others were written.
type NotOwnerError struct {
	Partitions []int32
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("%v: partitions %v", ErrNotOwner, e.Partitions)
}

func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }
