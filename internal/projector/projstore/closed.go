package projstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// The closed sessions (docs/retention.md) are the sessions of a partition
// that ended, by end time, kept beside its deadlines under the same hash
// tag:
//
//	<prefix>:{dl:<topic>:<partition>}:closed   sorted set: member sessionId,
//	                                           score its end in Unix ms (rounded up)
//
// The deadlines step of every batch writes them (ArmDeadlines, an entry
// with Ended); the archive sweep reads those that ended long enough ago
// (DueClosed), archives them, and removes them from Redis (Forget).

// ClosedSession is one entry of a partition's closed sessions.
type ClosedSession struct {
	SessionID string
	Ended     time.Time // Unix ms precision, rounded up
}

// DueClosed returns at most limit sessions of a partition that ended at or
// before before, earliest first, and how many ended at or before it in
// all.
func (s *Store) DueClosed(ctx context.Context, topic string, partition int32, before time.Time, limit int) ([]ClosedSession, int64, error) {
	key := s.keys.Closed(topic, partition)
	max := strconv.FormatInt(before.UnixMilli(), 10)
	pipe := s.rdb.Pipeline()
	zs := pipe.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: max, Count: int64(limit)})
	n := pipe.ZCount(ctx, key, "-inf", max)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, &snapshot.StoreError{Op: "closed", Key: key, Err: err}
	}
	out := make([]ClosedSession, 0, len(zs.Val()))
	for _, z := range zs.Val() {
		id, _ := z.Member.(string)
		out = append(out, ClosedSession{SessionID: id, Ended: time.UnixMilli(int64(z.Score)).UTC()})
	}
	return out, n.Val(), nil
}

// IsClosed reports whether session id is in its partition's closed
// sessions (the background verifier's check of a stored session that
// ended).
func (s *Store) IsClosed(ctx context.Context, topic string, partition int32, id string) (bool, error) {
	key := s.keys.Closed(topic, partition)
	err := s.rdb.ZScore(ctx, key, id).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, &snapshot.StoreError{Op: "closed", Key: key, Err: err}
	}
	return true, nil
}

// Archived is a session written to the archive at a position: Forget
// removes it from Redis only if it is still there.
type Archived struct {
	SessionID string
	Position  snapshot.Position
	// Tombstone is what Forget leaves of the session (tombstones.go);
	// its SessionID and Partition are taken from the fields above.
	Tombstone Tombstone
}

// Forget outcomes, per session.
const (
	ForgetRemoved = 1  // removed
	ForgetKept    = 0  // kept: its stored position moved since it was archived
	ForgetMissing = -1 // it had no snapshot (already removed)
)

// Forget removes archived sessions of a partition from Redis: each
// session's snapshot, its state index entries and its children index,
// fenced (only if the stored snapshot is still at the archived position:
// an event folded since keeps it, and the next sweep archives it again);
// then, for those removed or already gone, their closed entries and
// whatever their deadline store still holds. A session removed leaves its
// tombstone (tombstones.go), written by the script that deletes its
// snapshot. It returns the outcome of each, in order. A Store that no
// longer owns the partition (epoch.go) removes nothing: ErrNotOwner.
// Idempotent.
func (s *Store) Forget(ctx context.Context, topic string, partition int32, archived []Archived) ([]int, error) {
	if len(archived) == 0 {
		return nil, nil
	}
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, len(archived))
		for i, a := range archived {
			b := redislayout.Bucket(a.SessionID)
			keys := []string{s.keys.Index(b), s.keys.Snapshot(a.SessionID), s.keys.Children(a.SessionID), s.keys.Epochs(b), s.keys.Tombstones(a.SessionID)}
			t := a.Tombstone
			t.SessionID, t.Partition = a.SessionID, partition
			cmds[i] = redislayout.ForgetScript.EvalSha(ctx, pipe, keys, a.SessionID, a.Position.Partition, a.Position.Offset,
				s.epochs.get(partition), t.Encode(), partition)
		}
		return cmds
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "forget", Err: err}
	}
	out := make([]int, len(archived))
	var gone []any
	for i, c := range cmds {
		v, err := c.Int()
		if err != nil {
			return nil, &snapshot.StoreError{Op: "forget", Key: s.keys.Snapshot(archived[i].SessionID), Err: err}
		}
		if v == -2 {
			return nil, s.notOwner("forget", partition)
		}
		out[i] = v
		if v != ForgetKept {
			gone = append(gone, archived[i].SessionID)
		}
	}
	if len(gone) == 0 {
		return out, nil
	}
	due, armed := s.keys.Deadlines(topic, partition)
	closed := s.keys.Closed(topic, partition)
	cmds, err = s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		keys := []string{closed, due, armed, s.keys.Epoch(topic, partition)}
		return []*redis.Cmd{redislayout.ForgetClosedScript.EvalSha(ctx, pipe, keys, append([]any{s.epochs.get(partition)}, gone...)...)}
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "forget", Key: closed, Err: err}
	}
	if v, _ := cmds[0].Int(); v < 0 {
		return nil, s.notOwner("forget", partition)
	}
	return out, nil
}
