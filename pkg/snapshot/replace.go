package snapshot

import (
	"context"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/redis/go-redis/v9"
)

// Replace stores e fenced like PutBatch, except that it also replaces a
// stored snapshot at the same position: it loses only to a later one. It
// reports whether e was stored. An archived session (its tombstone) is
// never stored again.
//
// It is for a snapshot rebuilt from the log up to its position: the fold is
// deterministic, so that snapshot is what any writer that folded the log
// to the same position stores, and replacing an equal position repairs a
// stored snapshot that differs from it (damaged, or written by a faulty
// build) without ever moving the session backwards.
func (s *Store) Replace(ctx context.Context, e Entry) (bool, error) {
	if len(e.Data) < headerLen || e.Data[0] != FormatBinary {
		return false, &StoreError{Op: "put", Key: e.SessionID, Err: corrupt("entry is not a binary snapshot")}
	}
	b := Bucket(e.SessionID)
	keys := []string{s.keys.Index(b), s.keys.Epochs(b), s.keys.Snapshot(e.SessionID), s.keys.Tombstones(e.SessionID)}
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		return []*redis.Cmd{redislayout.ReplaceScript.EvalSha(ctx, pipe, keys, 1, e.SessionID, e.Data, e.Epoch)}
	})
	if err != nil {
		return false, &StoreError{Op: "put", Key: e.SessionID, Err: err}
	}
	flags, err := cmds[0].Int64Slice()
	if err != nil || len(flags) != 1 {
		return false, &StoreError{Op: "put", Key: e.SessionID, Err: corrupt("script answered %v, %v", flags, err)}
	}
	return flags[0] == 1, nil
}
