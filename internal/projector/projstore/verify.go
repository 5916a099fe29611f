package projstore

import (
	"context"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// RawSnapshots returns the stored bytes of sessions' snapshots, nil where a
// session has none, in one pipelined round trip: what the background
// verifier compares byte for byte with the fold of the log, without the
// decoding that would hide, or fail on, a damaged one.
func (s *Store) RawSnapshots(ctx context.Context, ids []string) ([][]byte, error) {
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, s.keys.Snapshot(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, &snapshot.StoreError{Op: "get", Err: err}
	}
	for i, c := range cmds {
		b, err := c.Bytes()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, &snapshot.StoreError{Op: "get", Key: s.keys.Snapshot(ids[i]), Err: err}
		}
		out[i] = b
	}
	return out, nil
}

// SessionIDs calls fn with the id of every session the state indexes list
// ("*:<id>" in each bucket's index), a page of 1000 at a time: the
// sessions Redis holds, a snapshot key deleted by hand included (its index
// entry stays). On Redis Cluster each bucket's index is read from its own
// slot.
func (s *Store) SessionIDs(ctx context.Context, fn func(id string)) error {
	const page = 1000
	for b := 0; b < redislayout.Buckets; b++ {
		min := "[*:"
		for {
			ms, err := s.rdb.ZRangeByLex(ctx, s.keys.Index(b), &redis.ZRangeBy{Min: min, Max: "[*:\xff", Count: page}).Result()
			if err != nil {
				return &snapshot.StoreError{Op: "list", Key: s.keys.Index(b), Err: err}
			}
			for _, m := range ms {
				fn(m[2:])
			}
			if len(ms) < page {
				break
			}
			min = "(" + ms[len(ms)-1]
		}
	}
	return nil
}

// PublishVerify adds what the verifier found to the topic's report
// (redislayout.PublishVerify), which GET /v1/verify reads.
func (s *Store) PublishVerify(ctx context.Context, topic string, d redislayout.VerifyDelta) error {
	if err := redislayout.PublishVerify(ctx, s.rdb, s.keys, topic, d); err != nil {
		return &snapshot.StoreError{Op: "verify", Key: s.keys.Verify(topic), Err: err}
	}
	return nil
}
