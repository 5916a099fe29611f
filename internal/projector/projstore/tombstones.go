package projstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Tombstones (docs/retention.md, "An archived id stays archived") are what the read model keeps of an archived
// session, so that its id is never used by a new session: the archive
// sweep's Forget writes one in the same script that deletes the snapshot,
// fenced like it, and a restore writes them again from the changelog's
// archived records (PutTombstones). They live in the session's bucket
// (the slot of its snapshot, whose write they fence: pkg/snapshot's
// PutScript never writes a session that has one), in small hashes:
//
//	<prefix>:{bNNN}:t:<x>   hash: sessionId -> tombstone (x: one hex digit
//	                        of the id's hash, redislayout.TombstoneShards)
//
// A tombstone's value is binary, about 10 bytes: the final state (one
// byte), then uvarints of the version, the end in Unix milliseconds and
// the partition.
//
// They are kept for ever unless the projector is given a retention
// (CORREX_TOMBSTONE_RETENTION): the archive sweep then removes those whose
// session ended longer ago than that (ExpireTombstones), and an id whose
// tombstone is gone may be used again. Reset deletes them with the rest of the store; DeletePartition
// (a rebuild) keeps them.

// Tombstone is an archived session's tombstone.
type Tombstone struct {
	SessionID string
	State     fsm.State // the final state; fsm.StateNone when not known (an older changelog record)
	Version   uint64
	Ended     time.Time // Unix ms precision; zero when not known
	Partition int32
}

// Encode returns the tombstone's stored value.
func (t Tombstone) Encode() []byte {
	b := make([]byte, 1, 1+3*binary.MaxVarintLen64)
	b[0] = byte(t.State)
	b = binary.AppendUvarint(b, t.Version)
	var ms uint64
	if !t.Ended.IsZero() && t.Ended.UnixMilli() > 0 {
		ms = uint64(t.Ended.UnixMilli())
	}
	b = binary.AppendUvarint(b, ms)
	return binary.AppendUvarint(b, uint64(uint32(t.Partition)))
}

// DecodeTombstone reads a stored tombstone of sessionID.
func DecodeTombstone(sessionID string, b []byte) (Tombstone, error) {
	t := Tombstone{SessionID: sessionID}
	if len(b) < 4 || int(b[0]) >= fsm.NumStates {
		return t, fmt.Errorf("%w: tombstone of %s", snapshot.ErrCorrupt, sessionID)
	}
	t.State = fsm.State(b[0])
	rest := b[1:]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return t, fmt.Errorf("%w: tombstone of %s", snapshot.ErrCorrupt, sessionID)
		}
		vals[i], rest = v, rest[n:]
	}
	t.Version = vals[0]
	if vals[1] > 0 {
		t.Ended = time.UnixMilli(int64(vals[1])).UTC()
	}
	t.Partition = int32(uint32(vals[2]))
	return t, nil
}

// Tombstones returns the tombstones of sessions, nil where a session has
// none, in one pipelined round trip.
func (s *Store) Tombstones(ctx context.Context, ids []string) ([]*Tombstone, error) {
	out := make([]*Tombstone, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, s.keys.Tombstones(id), id)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, &snapshot.StoreError{Op: "tombstones", Err: err}
	}
	for i, c := range cmds {
		b, err := c.Bytes()
		if err == redis.Nil {
			continue
		}
		if err == nil {
			var t Tombstone
			if t, err = DecodeTombstone(ids[i], b); err == nil {
				out[i] = &t
				continue
			}
		}
		return nil, &snapshot.StoreError{Op: "tombstones", Key: s.keys.Tombstones(ids[i]), Err: err}
	}
	return out, nil
}

// PutTombstones writes tombstones of sessions of partition (a restore's),
// fenced by ownership (epoch.go: ErrNotOwner, nothing written in the
// buckets refused). Idempotent.
func (s *Store) PutTombstones(ctx context.Context, partition int32, ts []Tombstone) error {
	if len(ts) == 0 {
		return nil
	}
	byBucket := map[int][]Tombstone{}
	for _, t := range ts {
		b := redislayout.Bucket(t.SessionID)
		byBucket[b] = append(byBucket[b], t)
	}
	field := strconv.FormatInt(int64(partition), 10)
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		var cmds []*redis.Cmd
		for b, group := range byBucket {
			keys := []string{s.keys.Epochs(b)}
			args := []any{field, s.epochs.get(partition)}
			for _, t := range group {
				t.Partition = partition
				keys = append(keys, s.keys.Tombstones(t.SessionID))
				args = append(args, t.SessionID, t.Encode())
			}
			cmds = append(cmds, redislayout.TombstoneScript.EvalSha(ctx, pipe, keys, args...))
		}
		return cmds
	})
	if err != nil {
		return &snapshot.StoreError{Op: "tombstones", Err: err}
	}
	for _, c := range cmds {
		if v, err := c.Int(); err != nil {
			return &snapshot.StoreError{Op: "tombstones", Err: err}
		} else if v < 0 {
			return s.notOwner("tombstones", partition)
		}
	}
	return nil
}

// ExpireTombstones removes the tombstones of partition whose session
// ended at or before before (CORREX_TOMBSTONE_RETENTION: their ids may be
// used again), fenced by ownership (ErrNotOwner, nothing removed in the
// buckets refused), and returns those it found expired (each removed
// unless it was written again meanwhile). A tombstone without
// an end (from an older changelog record) is kept. It reads every
// tombstone hash (redislayout.TombstoneShards per bucket, in pipelines),
// so it costs a pass over all tombstones: the archive sweep runs it far
// less often than it sweeps.
func (s *Store) ExpireTombstones(ctx context.Context, partition int32, before time.Time) ([]Tombstone, error) {
	type old struct {
		key, id string
		value   string
	}
	var found []Tombstone
	byBucket := map[int][]old{}
	const chunk = 32 // buckets per round trip
	for first := 0; first < redislayout.Buckets; first += chunk {
		pipe := s.rdb.Pipeline()
		var cmds []*redis.MapStringStringCmd
		var keys []string
		var buckets []int
		for b := first; b < min(first+chunk, redislayout.Buckets); b++ {
			for _, k := range s.keys.TombstoneKeys(b) {
				cmds = append(cmds, pipe.HGetAll(ctx, k))
				keys, buckets = append(keys, k), append(buckets, b)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, &snapshot.StoreError{Op: "tombstones", Err: err}
		}
		for i, c := range cmds {
			for id, v := range c.Val() {
				t, err := DecodeTombstone(id, []byte(v))
				if err != nil || t.Partition != partition || t.Ended.IsZero() || t.Ended.After(before) {
					continue
				}
				byBucket[buckets[i]] = append(byBucket[buckets[i]], old{key: keys[i], id: id, value: v})
				found = append(found, t)
			}
		}
	}
	if len(byBucket) == 0 {
		return nil, nil
	}
	field := strconv.FormatInt(int64(partition), 10)
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		var cmds []*redis.Cmd
		for b, group := range byBucket {
			keys := []string{s.keys.Epochs(b)}
			args := []any{field, s.epochs.get(partition)}
			for _, o := range group {
				keys = append(keys, o.key)
				args = append(args, o.id, o.value)
			}
			cmds = append(cmds, redislayout.ExpireTombstoneScript.EvalSha(ctx, pipe, keys, args...))
		}
		return cmds
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "tombstones", Err: err}
	}
	for _, c := range cmds {
		v, err := c.Int()
		if err != nil {
			return nil, &snapshot.StoreError{Op: "tombstones", Err: err}
		}
		if v < 0 {
			return nil, s.notOwner("tombstones", partition)
		}
	}
	return found, nil
}
