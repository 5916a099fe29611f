package snapshot

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/redis/go-redis/v9"
)

// Store keeps snapshots and checkpoints in Redis, on a single server or on a
// Redis Cluster: no command or script touches keys of two hash slots.
//
// Every method is safe for concurrent use. Writes are idempotent: running a
// batch again, after a dropped connection or from a zombie projector, leaves
// the same state, because positions fence snapshots and checkpoints only move
// forward.
type Store struct {
	rdb  redis.UniversalClient
	keys *redislayout.Keys
	// waitReplicas and waitTimeout: see WaitReplicas.
	waitReplicas int
	waitTimeout  time.Duration
	// defaults are the service's timeout defaults, given to every snapshot
	// read (Snapshot.TimeoutDefaults); see WithTimeoutDefaults.
	defaults fsm.Timeouts
}

// WithTimeoutDefaults returns a store over the same client whose snapshots
// read (Get, GetMany and the listings) carry the service's timeout defaults
// (CORREX_TIMEOUT_*) in TimeoutDefaults, so that their JSON form shows the
// effective timeouts and the armed deadline. The query service and the
// projector use the same settings.
func (s *Store) WithTimeoutDefaults(d fsm.Timeouts) *Store {
	c := *s
	c.defaults = d
	return &c
}

// NewStore returns a store over rdb whose keys start with prefix (the
// services' CORREX_REDIS_PREFIX, default "correx"). rdb may be a
// *redis.Client or a *redis.ClusterClient.
func NewStore(rdb redis.UniversalClient, prefix string) (*Store, error) {
	if err := redislayout.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, keys: redislayout.NewKeys(prefix)}, nil
}

// WaitReplicas makes the store's writes count only once n replicas have
// acknowledged them (Redis WAIT), waiting at most timeout each time; n = 0
// (the default) does not wait. Call it before the store is used.
//
// On a single server (or Sentinel), every PutBatch waits, in the same
// round trip as its writes, and fails with ErrNotReplicated when fewer
// replicas acknowledged them in time. A projector writes a partition's
// checkpoint only after its snapshots are stored, so with n >= 1 a
// checkpoint never advances past snapshot writes that a failover to an
// acknowledging replica would lose.
//
// On Redis Cluster a batch spans one connection per master and WAIT
// covers one connection's writes, so PutBatch does not wait: the writer
// waits for every master's replicas itself, before the checkpoint that
// passes its writes (the projector does, with
// internal/projector/projstore's MarkReplication and WaitReplicated).
//
// WAIT counts the replicas that received the writes, not that wrote them to
// disk: with persistence, a replica restarted from an old file can still go
// back in time (docs/guarantees.md).
func (s *Store) WaitReplicas(n int, timeout time.Duration) error {
	if n < 0 || (n > 0 && timeout <= 0) {
		return fmt.Errorf("snapshot store: waiting for %d replicas for %v: want n >= 0 and a positive timeout", n, timeout)
	}
	s.waitReplicas, s.waitTimeout = n, timeout
	return nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return &StoreError{Op: "ping", Err: err}
	}
	return nil
}

// Get returns the stored snapshot of a session, or ErrNotFound.
func (s *Store) Get(ctx context.Context, sessionID string) (*Snapshot, error) {
	key := s.keys.Snapshot(sessionID)
	b, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, &StoreError{Op: "get", Key: key, Err: err}
	}
	snap := new(Snapshot)
	if err := Decode(b, snap); err != nil {
		return nil, &StoreError{Op: "get", Key: key, Err: err}
	}
	snap.TimeoutDefaults = s.defaults // after Decode, which resets the whole snapshot
	return snap, nil
}

// GetMany returns the stored snapshots of sessions in one pipelined round
// trip, in the order of ids, with nil where none is stored.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*Snapshot, error) {
	out := make([]*Snapshot, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, s.keys.Snapshot(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, &StoreError{Op: "get", Err: err}
	}
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, &StoreError{Op: "get", Key: s.keys.Snapshot(ids[i]), Err: err}
		}
		snap := new(Snapshot)
		if err := Decode(b, snap); err != nil {
			return nil, &StoreError{Op: "get", Key: s.keys.Snapshot(ids[i]), Err: err}
		}
		snap.TimeoutDefaults = s.defaults
		out[i] = snap
	}
	return out, nil
}

// Entry is an encoded snapshot ready to be stored. Encoding happens where the
// snapshot is owned (NewEntry), so the write can proceed while the owner
// keeps folding.
type Entry struct {
	SessionID string
	Data      []byte // AppendBinary output
	// Epoch is the writer's ownership epoch of the snapshot's partition
	// (the projector's, internal/projector/projstore), or 0 for a writer
	// that owns nothing (the query service's rebuild). An entry whose
	// epoch is lower than the partition's is not written
	// (PutResult.NotOwned).
	Epoch uint64
}

// partition is the partition of the entry's position, from its header.
func (e Entry) partition() int32 {
	return int32(uint32(e.Data[1])<<24 | uint32(e.Data[2])<<16 | uint32(e.Data[3])<<8 | uint32(e.Data[4]))
}

// NewEntry encodes snap for PutBatch.
func NewEntry(snap *Snapshot) Entry {
	return Entry{SessionID: snap.ID, Data: snap.AppendBinary(nil)}
}

// PutResult reports what a batch did.
type PutResult struct {
	Written int // snapshots that replaced an older one or were new
	Fenced  int // snapshots that lost to a stored one at an equal or later position
	// Tombstoned counts snapshots of archived sessions, which are never
	// written again (a session's tombstone, docs/retention.md).
	Tombstoned int
	// TombstonedIDs are the session ids of those entries, in order: a
	// writer that folded one of them held a copy of a session archived
	// meanwhile, and must not publish what it folded (the projector's
	// changelog record would bring the session back in a restore).
	TombstonedIDs []string
	// NotOwned lists the partitions, in order of first appearance, whose
	// entries were not written because a newer owner took the partition
	// over (Entry.Epoch is lower than the partition's).
	NotOwned []int32
}

// maxCall is about how many entries one script call carries on a single
// server (measured by BenchmarkStorePut: 512 to 1000 is best).
const maxCall = redislayout.MaxCall

// PutBatch stores entries with offset fencing: each replaces the stored
// snapshot of its session only if its position is greater, its writer
// still owns its partition (Entry.Epoch) and the session has no tombstone. The decision is
// made inside Redis by putScript, all in one pipelined round trip: one script
// call for the whole batch on a single server, one per bucket on Redis
// Cluster (where a script may only touch one slot). Two entries for the same
// session in one batch are allowed; the later position wins.
func (s *Store) PutBatch(ctx context.Context, entries []Entry) (PutResult, error) {
	var res PutResult
	if len(entries) == 0 {
		return res, nil
	}
	var groups [Buckets]*group
	order := make([]int, 0, 64)
	for _, e := range entries {
		if len(e.Data) < headerLen || e.Data[0] != FormatBinary {
			return res, &StoreError{Op: "put", Key: e.SessionID, Err: corrupt("entry is not a binary snapshot")}
		}
		b := Bucket(e.SessionID)
		g := groups[b]
		if g == nil {
			g = &group{keys: []string{s.keys.Index(b), s.keys.Epochs(b)}}
			groups[b] = g
			order = append(order, b)
		}
		g.keys = append(g.keys, s.keys.Snapshot(e.SessionID), s.keys.Tombstones(e.SessionID))
		g.args = append(g.args, e.SessionID, e.Data, e.Epoch)
	}
	var callBuckets [][]int // the buckets of each call, in order
	call := func(pipe redis.Pipeliner, buckets []int) *redis.Cmd {
		callBuckets = append(callBuckets, buckets)
		var keys []string
		var args []any
		for _, b := range buckets {
			g := groups[b]
			keys = append(keys, g.keys...)
			args = append(args, len(g.args)/3)
			args = append(args, g.args...)
		}
		return redislayout.PutScript.EvalSha(ctx, pipe, keys, args...)
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	var wait *redis.Cmd
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		var cmds []*redis.Cmd
		callBuckets = callBuckets[:0]
		if cluster {
			for _, b := range order {
				cmds = append(cmds, call(pipe, []int{b}))
			}
			return cmds
		}
		// A single server takes several buckets per call, up to about
		// maxCall entries: fewer calls cost less, but one huge call makes
		// Lua collect megabytes of argument strings at once.
		for start, n := 0, 0; start < len(order); {
			end := start
			for n = 0; end < len(order) && (n == 0 || n+len(groups[order[end]].args)/3 <= maxCall); end++ {
				n += len(groups[order[end]].args) / 3
			}
			cmds = append(cmds, call(pipe, order[start:end]))
			start = end
		}
		if s.waitReplicas > 0 {
			// On the connection that carried the writes, so that WAIT
			// covers them (on Redis Cluster, WaitReplicated does).
			wait = pipe.Do(ctx, "WAIT", s.waitReplicas, s.waitTimeout.Milliseconds())
		}
		return cmds
	})
	if err != nil {
		return res, &StoreError{Op: "put", Err: err}
	}
	if wait != nil {
		if n, err := wait.Int(); err != nil {
			return res, &StoreError{Op: "put", Err: err}
		} else if n < s.waitReplicas {
			return res, &StoreError{Op: "put", Err: fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.waitReplicas, s.waitTimeout)}
		}
	}
	answered := 0
	for ci, cmd := range cmds {
		flags, err := cmd.Int64Slice()
		if err != nil {
			return res, &StoreError{Op: "put", Err: err}
		}
		for j, f := range flags {
			answered++
			switch f {
			case 1:
				res.Written++
			case 0:
				res.Fenced++
			case -2:
				res.Tombstoned++
				res.TombstonedIDs = append(res.TombstonedIDs, entryOfCall(&groups, callBuckets[ci], j).SessionID)
			default:
				// The entry's partition is read back from the call's
				// arguments: the j-th entry of the call.
				part := entryOfCall(&groups, callBuckets[ci], j).partition()
				if !slices.Contains(res.NotOwned, part) {
					res.NotOwned = append(res.NotOwned, part)
				}
			}
		}
	}
	if answered != len(entries) {
		return res, &StoreError{Op: "put", Err: fmt.Errorf("script answered for %d of %d entries", answered, len(entries))}
	}
	return res, nil
}

// entryOfCall returns the j-th entry of a PutScript call over buckets.
func entryOfCall(groups *[Buckets]*group, buckets []int, j int) Entry {
	for _, b := range buckets {
		g := groups[b]
		if n := len(g.args) / 3; j >= n {
			j -= n
			continue
		}
		return Entry{SessionID: g.args[3*j].(string), Data: g.args[3*j+1].([]byte)}
	}
	return Entry{Data: make([]byte, headerLen)}
}

// group is one bucket's part of a PutScript call.
type group struct {
	keys []string // the index, the epochs, then snapshot and tombstone keys
	args []any    // id, data, epoch triples
}

// run executes the commands build adds in one pipeline, loading the
// scripts again where Redis lost them (redislayout.Run).
func (s *Store) run(ctx context.Context, build func(redis.Pipeliner) []*redis.Cmd) ([]*redis.Cmd, error) {
	return redislayout.Run(ctx, s.rdb, build)
}

// Checkpoint is where a partition's projection stands: every record before
// Offset is reflected in the stored snapshots.
type Checkpoint struct {
	Partition int32
	Offset    int64 // the next offset to fold
	// HighWatermark is the partition's end offset as the writer last saw
	// it, or -1 if it saw none, as Kafka clients report it (kgo's
	// FetchPartition.HighWatermark is copied in unchanged). Read it with
	// Lag, which says whether it is known.
	HighWatermark int64
	Time          time.Time // when the writer stored it (the writer's clock)
	// Expected tells SaveCheckpoints that the writer knows a checkpoint is
	// stored for the partition (it loaded or wrote one). If none is, the
	// store has lost it: nothing is written, and the PriorCheckpoint
	// returned says none was stored, so the writer can rebuild instead of
	// recording progress over a hole.
	Expected bool
	// Known, with Expected, is the offset the writer knows is stored (the
	// checkpoint it loaded or last wrote). A stored offset lower than Known
	// means Redis went back in time (a promoted replica that lagged, a
	// restart from an older file): nothing is written either, and the
	// lower offset is returned, so the writer can rebuild. 0 checks only
	// that a checkpoint is stored.
	Known int64
	// Epoch is the writer's ownership epoch of the partition (the
	// projector's, internal/projector/projstore), or 0 for none: a
	// checkpoint whose epoch is lower than the partition's is not written
	// (PriorCheckpoint.NotOwner).
	Epoch uint64
	// RebuildUntil, when positive, says that the partition's read model is
	// being rebuilt from the earliest offset (ResetCheckpoint) and is not
	// whole until the checkpoint reaches this offset. Read by Checkpoints;
	// SaveCheckpoints ignores it and clears the mark once it writes an
	// offset at or past it.
	RebuildUntil int64
}

// Lag returns HighWatermark-Offset, the partition's lag when the writer
// stored the checkpoint (never negative), and false when the writer knew no
// high watermark.
func (c Checkpoint) Lag() (lag int64, known bool) {
	if c.HighWatermark < 0 {
		return 0, false
	}
	return max(0, c.HighWatermark-c.Offset), true
}

// PriorCheckpoint is what a partition's checkpoint was before a
// SaveCheckpoints call.
type PriorCheckpoint struct {
	Stored bool  // whether a checkpoint was stored at all
	Offset int64 // the stored offset; 0 when none was stored
	// NotOwner says that nothing was written, or read: the checkpoint's
	// Epoch is lower than the partition's (a newer owner took it over).
	NotOwner bool
}

// Lost reports whether the store refused cp because it lost the
// checkpoint the writer expected: cp is Expected, and none is stored, or
// the stored one is lower than cp.Known. Nothing was written for cp then.
func (p PriorCheckpoint) Lost(cp Checkpoint) bool {
	return !p.NotOwner && cp.Expected && (!p.Stored || p.Offset < cp.Known)
}

// SaveCheckpoints advances the checkpoints of a topic's partitions. A lower
// offset never replaces a stored higher one, a writer that no longer owns
// the partition (Checkpoint.Epoch) writes nothing, and a checkpoint marked Expected
// is not written where none is stored, or where the stored one is lower
// than Known (PriorCheckpoint.Lost). It returns, per checkpoint, the one
// stored before the call.
func (s *Store) SaveCheckpoints(ctx context.Context, topic string, cps []Checkpoint, now time.Time) ([]PriorCheckpoint, error) {
	if len(cps) == 0 {
		return nil, nil
	}
	key := s.keys.Checkpoints(topic)
	args := make([]any, 0, 1+6*len(cps))
	args = append(args, now.UnixMilli())
	for _, cp := range cps {
		expected := 0
		if cp.Expected {
			expected = 1
		}
		args = append(args, cp.Partition, cp.Offset, cp.HighWatermark, expected, cp.Known, cp.Epoch)
	}
	parts := make([]byte, 0, 4*len(cps))
	for i, cp := range cps {
		if i > 0 {
			parts = append(parts, ',')
		}
		parts = strconv.AppendInt(parts, int64(cp.Partition), 10)
	}
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		return []*redis.Cmd{redislayout.CheckpointScript.EvalSha(ctx, pipe, []string{key}, args...)}
	})
	if err != nil {
		return nil, &StoreError{Op: "checkpoint", Key: key, Err: err}
	}
	// Announced once written (Progress), whatever the script kept: a reader
	// woken reads the checkpoints and decides. The announcement may fail
	// (a Redis user without the channel, &<prefix>:*): readers then find
	// the checkpoint by polling, and the checkpoint stands.
	_ = s.rdb.Publish(ctx, s.keys.Progress(topic), parts).Err()
	prev, err := cmds[0].Int64Slice()
	if err == nil && len(prev) != len(cps) {
		err = corrupt("script answered for %d of %d checkpoints", len(prev), len(cps))
	}
	if err != nil {
		return nil, &StoreError{Op: "checkpoint", Key: key, Err: err}
	}
	out := make([]PriorCheckpoint, len(prev))
	for i, off := range prev {
		switch {
		case off >= 0: // the script answers -1 where none was stored
			out[i] = PriorCheckpoint{Stored: true, Offset: off}
		case off == -2: // and -2 to a writer that no longer owns the partition
			out[i] = PriorCheckpoint{NotOwner: true}
		}
	}
	return out, nil
}

// Progress reports the partitions of topic whose checkpoints a writer
// saved: SaveCheckpoints announces them on a Redis channel, and a reader
// waiting for a position (the query service's ?minPosition=&wait=) wakes
// on them instead of polling the checkpoints. Redis pub/sub delivers at
// most once, and nothing while the subscription reconnects, and a
// partition is dropped when the channel is full: a reader must still
// check on its own now and then. It returns an error when Redis refuses
// the subscription (a Redis 7 user needs the channel: &<prefix>:*). The
// channel is closed once ctx ends.
func (s *Store) Progress(ctx context.Context, topic string) (<-chan int32, error) {
	name := s.keys.Progress(topic)
	ps := s.rdb.Subscribe(ctx, name)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, &StoreError{Op: "subscribe", Key: name, Err: err}
	}
	out := make(chan int32, 256)
	go func() {
		defer close(out)
		defer func() { _ = ps.Close() }()
		msgs := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				for p := range strings.SplitSeq(m.Payload, ",") {
					if n, err := strconv.ParseInt(p, 10, 32); err == nil {
						select {
						case out <- int32(n):
						default:
						}
					}
				}
			}
		}
	}()
	return out, nil
}

// Checkpoints returns the stored checkpoints of a topic by partition.
func (s *Store) Checkpoints(ctx context.Context, topic string) (map[int32]Checkpoint, error) {
	key := s.keys.Checkpoints(topic)
	m, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, &StoreError{Op: "checkpoint", Key: key, Err: err}
	}
	out := make(map[int32]Checkpoint)
	for field, v := range m {
		if strings.Contains(field, ":") {
			continue
		}
		p, err1 := strconv.ParseInt(field, 10, 32)
		off, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, &StoreError{Op: "checkpoint", Key: key, Err: corrupt("field %q=%q", field, v)}
		}
		cp := Checkpoint{Partition: int32(p), Offset: off, HighWatermark: -1}
		if ms, err := strconv.ParseInt(m[field+":t"], 10, 64); err == nil {
			cp.Time = time.UnixMilli(ms).UTC()
		}
		if hw, err := strconv.ParseInt(m[field+":hw"], 10, 64); err == nil {
			cp.HighWatermark = hw
		}
		if rb, err := strconv.ParseInt(m[field+":rb"], 10, 64); err == nil && rb > 0 {
			cp.RebuildUntil = rb
		}
		out[int32(p)] = cp
	}
	return out, nil
}

// DeleteCheckpoints removes every checkpoint of a topic, so that the next
// projector assigned its partitions rebuilds from the earliest offset. The
// snapshots stay: replayed events at or below a snapshot's position are
// recognised as already folded.
func (s *Store) DeleteCheckpoints(ctx context.Context, topic string) error {
	key := s.keys.Checkpoints(topic)
	if err := s.rdb.Del(ctx, key).Err(); err != nil {
		return &StoreError{Op: "checkpoint", Key: key, Err: err}
	}
	return nil
}

// Page is one page of a listing. Next is the cursor of the following page, or
// "" when this is the last one. After[i] is the cursor that continues right
// after Snapshots[i], for a reader that stops within the page.
type Page struct {
	Snapshots []*Snapshot
	Next      string
	After     []string
}

// listChunk is how many buckets List asks for in one round trip.
const listChunk = 32

// List returns up to limit snapshots in state (fsm.StateNone for every
// state), starting after cursor ("" for the first page). The order is stable
// (by bucket, then session id) but not meaningful. A session that changes
// state between the index read and the snapshot read is left out of the page
// rather than shown under the wrong state.
func (s *Store) List(ctx context.Context, state fsm.State, cursor string, limit int) (Page, error) {
	return s.ListPrefix(ctx, state, "", cursor, limit)
}

// ListPrefix is List restricted to the sessions whose id starts with
// idPrefix (a tenant's namespace; "" for all). The restriction is part of
// the index scan (the members of a bucket's index are "STATE:id", sorted,
// so the range "STATE:idPrefix" to "STATE:idPrefix\xff" holds exactly the
// tenant's sessions): pages are as full as an unrestricted listing's, the
// cost is the same (every bucket's range is read once, 8 round trips at
// most), and no other tenant's id is ever read. A cursor whose id lies
// outside idPrefix is refused with ErrBadCursor.
func (s *Store) ListPrefix(ctx context.Context, state fsm.State, idPrefix, cursor string, limit int) (Page, error) {
	return s.ListFiltered(ctx, state, idPrefix, Filter{}, cursor, limit)
}

// Filter selects snapshots by what only the snapshot holds: every label in
// Labels (key and value) and, when Parent is set, the parentSessionId.
type Filter struct {
	Labels []fsm.Label
	Parent string
}

// Match reports whether snap satisfies every condition of f.
func (f Filter) Match(snap *Snapshot) bool {
	if f.Parent != "" && snap.ParentSessionID != f.Parent {
		return false
	}
	for _, want := range f.Labels {
		found := false
		for _, l := range snap.Labels {
			if l.Key == want.Key {
				found = l.Value == want.Value
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ListFiltered is ListPrefix that also leaves out the snapshots f does not
// match. There is no index by label or parent: the filter is applied to the
// snapshots of the scanned index entries, so limit bounds the sessions
// examined, not the sessions returned. A page may hold fewer than limit
// snapshots, or none, and still carry a Next cursor; a reader follows Next
// until it is "" (the cost of a full listing is one read of every session in
// the state and prefix, whatever f selects).
func (s *Store) ListFiltered(ctx context.Context, state fsm.State, idPrefix string, f Filter, cursor string, limit int) (Page, error) {
	if limit <= 0 {
		return Page{}, fmt.Errorf("snapshot: limit %d must be positive", limit)
	}
	prefix := "*:"
	if state != fsm.StateNone {
		prefix = state.String() + ":"
	}
	bucket, after := 0, ""
	if cursor != "" {
		var err error
		if bucket, after, err = decodeCursor(cursor); err != nil {
			return Page{}, err
		}
		if !strings.HasPrefix(after, idPrefix) {
			return Page{}, ErrBadCursor
		}
	}
	type hit struct {
		bucket int
		id     string
	}
	var hits []hit
	for b := bucket; b < Buckets && len(hits) <= limit; b += listChunk {
		pipe := s.rdb.Pipeline()
		var cmds []*redis.StringSliceCmd
		for i := b; i < min(b+listChunk, Buckets); i++ {
			lo := "[" + prefix + idPrefix
			if i == bucket && after != "" {
				lo = "(" + prefix + after
			}
			cmds = append(cmds, pipe.ZRangeByLex(ctx, s.keys.Index(i), &redis.ZRangeBy{
				Min: lo, Max: "[" + prefix + idPrefix + "\xff", Count: int64(limit + 1 - len(hits))}))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return Page{}, &StoreError{Op: "list", Err: err}
		}
		for j, cmd := range cmds {
			for _, m := range cmd.Val() {
				if len(hits) <= limit {
					hits = append(hits, hit{b + j, strings.TrimPrefix(m, prefix)})
				}
			}
		}
	}
	var page Page
	if len(hits) > limit {
		last := hits[limit-1]
		page.Next = encodeCursor(last.bucket, last.id)
		hits = hits[:limit]
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.id
	}
	snaps, err := s.GetMany(ctx, ids)
	if err != nil {
		return Page{}, err
	}
	for i, snap := range snaps {
		if snap != nil && (state == fsm.StateNone || snap.State == state) && f.Match(snap) {
			page.Snapshots = append(page.Snapshots, snap)
			page.After = append(page.After, encodeCursor(hits[i].bucket, hits[i].id))
		}
	}
	return page, nil
}

func encodeCursor(bucket int, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(bucket) + "/" + id))
}

func decodeCursor(c string) (int, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	bs, id, ok := strings.Cut(string(raw), "/")
	b, err := strconv.Atoi(bs)
	if !ok || err != nil || b < 0 || b >= Buckets || !fsm.ValidSessionID(id) {
		return 0, "", ErrBadCursor
	}
	return b, id, nil
}

// Counts are the numbers of stored sessions, per state and in all.
type Counts struct {
	ByState map[fsm.State]int64
	Total   int64
}

// Count counts the stored sessions per state, exactly, from the state
// indexes (one script call per bucket, pipelined).
func (s *Store) Count(ctx context.Context) (Counts, error) {
	return s.CountPrefix(ctx, "")
}

// CountPrefix is Count restricted to the sessions whose id starts with
// idPrefix ("" for all): ZLEXCOUNT over the prefix's range in each state, so
// it costs what Count costs, whatever the number of tenants.
func (s *Store) CountPrefix(ctx context.Context, idPrefix string) (Counts, error) {
	cmds, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		cmds := make([]*redis.Cmd, Buckets)
		for b := range cmds {
			cmds[b] = redislayout.CountScript.EvalSha(ctx, pipe, []string{s.keys.Index(b)}, idPrefix)
		}
		return cmds
	})
	if err != nil {
		return Counts{}, &StoreError{Op: "count", Err: err}
	}
	c := Counts{ByState: make(map[fsm.State]int64)}
	for _, cmd := range cmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != fsm.NumStates {
			return Counts{}, &StoreError{Op: "count", Err: fmt.Errorf("unexpected reply %v: %v", vals, err)}
		}
		for i, st := range fsm.States() {
			c.ByState[st] += vals[i]
		}
		c.Total += vals[len(vals)-1]
	}
	return c, nil
}

// Reset deletes the store's keys (snapshots, state indexes, checkpoints,
// and the projector's children, outbox, deadlines and replication markers
// beside them: see internal/redislayout's keys.go) and
// nothing else under its prefix: a pkg/feed consumer's checkpoints, under
// "<prefix>:feed:" with the default prefixes, are kept. It is the recovery
// for a read model that belongs to another log (a topic deleted and
// recreated): after it, projectors rebuild from the earliest offset. It
// returns how many keys it deleted.
func (s *Store) Reset(ctx context.Context) (int, error) {
	pattern := s.keys.Pattern()
	deleted := 0
	scan := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			// One UNLINK per key: keys of a batch may lie in different
			// slots of a cluster node.
			pipe := c.Pipeline()
			for _, k := range batch {
				pipe.Unlink(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			deleted += len(batch)
			batch = batch[:0]
			return nil
		}
		for iter.Next(ctx) {
			if k := iter.Val(); s.keys.Owns(k) {
				batch = append(batch, k)
			}
			if len(batch) == 1000 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock() // serialise the counting; each master is scanned once
			defer mu.Unlock()
			return scan(ctx, node)
		})
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return deleted, &StoreError{Op: "reset", Key: pattern, Err: err}
	}
	return deleted, nil
}
