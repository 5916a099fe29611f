package projstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Armed deadlines (docs/timeouts.md) are stored per partition of the events
// topic, like the sessions they belong to, in two keys that share one hash
// tag (so every script touches one Redis Cluster slot):
//
//	<prefix>:{dl:<topic>:<partition>}:due     sorted set: member sessionId,
//	                                          score the deadline in Unix ms (rounded up)
//	<prefix>:{dl:<topic>:<partition>}:armed   hash: sessionId -> "V:kind:atNanos",
//	                                          or "V:kind:atNanos:fired" once fired
//
// A session has at most one entry: its earliest armed deadline, with the
// version V it was armed at. Writes are fenced by V: an entry is replaced or
// removed only by a write of the same or a newer version, so a stale writer
// (a zombie projector, a replay) cannot re-arm an older version over a
// newer one. An older version written after the entry was disarmed can
// appear (nothing remembers a disarmed entry); it is harmless, because the
// fold supersedes a TimeoutExpired whose armedVersion is not the session's
// version.
//
// A fired entry leaves the due set but stays in the hash, marked fired,
// until a newer version re-arms or disarms the session: arming exactly
// what was fired again (same version, kind and time) does nothing. A
// TimeoutExpired that the fold applies moves the session to a newer
// version, which replaces the mark; one it does not apply (a duplicate,
// a rejection) leaves the session at V, and every later write of the
// session at V arms the same deadline again. Without the mark each of
// those writes would make it due again at once, and the firer would fire
// it, in a loop, for as long as the session stays at V.

// ArmedDeadline is one session's entry in the deadline store.
type ArmedDeadline struct {
	SessionID string
	// Kind is the timeout that expires first; fsm.TimeoutNone, given to
	// ArmDeadlines, disarms the session (terminal, or nothing armed).
	Kind    fsm.TimeoutKind
	At      int64  // the deadline, nanoseconds since the Unix epoch
	Version uint64 // the session's version when it was armed
	// Ended is when a terminal session ended, nanoseconds since the Unix
	// epoch, or 0: ArmDeadlines records it in the partition's closed
	// sessions (closed.go). DueDeadlines leaves it 0.
	Ended int64
}

// Due returns the deadline as a time.
func (d ArmedDeadline) Due() time.Time { return time.Unix(0, d.At).UTC() }

func (d ArmedDeadline) value() string {
	return strconv.FormatUint(d.Version, 10) + ":" + d.Kind.String() + ":" + strconv.FormatInt(d.At, 10)
}

// scoreMs is the score of a deadline: Unix milliseconds, rounded up, so an
// entry is never due before its deadline.
func scoreMs(at int64) int64 {
	ms := at / int64(time.Millisecond)
	if at%int64(time.Millisecond) > 0 {
		ms++
	}
	return ms
}

func parseArmed(sessionID, v string) (ArmedDeadline, error) {
	ver, rest, ok1 := strings.Cut(v, ":")
	kind, at, ok2 := strings.Cut(rest, ":")
	d := ArmedDeadline{SessionID: sessionID}
	var err1, err2 error
	d.Version, err1 = strconv.ParseUint(ver, 10, 64)
	d.At, err2 = strconv.ParseInt(at, 10, 64)
	k, ok3 := fsm.ParseTimeoutKind([]byte(kind))
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil {
		return d, fmt.Errorf("%w: deadline entry %q of %s", snapshot.ErrCorrupt, v, sessionID)
	}
	d.Kind = k
	return d, nil
}

// ArmDeadlines writes the entries of sessions of a topic, by partition:
// an entry with a kind arms (or re-arms) the session's deadline, one with
// fsm.TimeoutNone removes it; each only if the stored entry's version is
// not newer. An entry with Ended records the session in the partition's
// closed sessions (closed.go), in the same call. All partitions are written in one pipelined round trip (one
// script call per partition and chunk: each touches one hash slot). It
// returns each partition's earliest deadline afterwards (Unix ms
// precision), or the zero time when none is armed. The partitions this
// Store no longer owns (epoch.go) are written nothing, and returned in a
// *NotOwnerError after the others are written. Idempotent.
func (s *Store) ArmDeadlines(ctx context.Context, topic string, byPartition map[int32][]ArmedDeadline) (map[int32]time.Time, error) {
	type call struct {
		partition int32
		cmd       *redis.Cmd
	}
	var calls []call
	_, err := s.run(ctx, func(pipe redis.Pipeliner) []*redis.Cmd {
		calls = calls[:0]
		for p, entries := range byPartition {
			due, armed := s.keys.Deadlines(topic, p)
			closed, epoch := s.keys.Closed(topic, p), s.keys.Epoch(topic, p)
			for start := 0; start < len(entries) || start == 0; start += redislayout.MaxCall {
				chunk := entries[start:min(start+redislayout.MaxCall, len(entries))]
				args := make([]any, 0, 1+5*len(chunk))
				args = append(args, s.epochs.get(p))
				for _, d := range chunk {
					if d.Kind == fsm.TimeoutNone {
						args = append(args, d.SessionID, d.Version, "", 0)
					} else {
						args = append(args, d.SessionID, d.Version, d.value(), scoreMs(d.At))
					}
					if d.Ended > 0 {
						args = append(args, scoreMs(d.Ended))
					} else {
						args = append(args, 0)
					}
				}
				calls = append(calls, call{p, redislayout.ArmScript.EvalSha(ctx, pipe, []string{due, armed, closed, epoch}, args...)})
			}
		}
		return nil
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "arm deadlines", Err: err}
	}
	out := make(map[int32]time.Time, len(byPartition))
	var stale []int32
	for _, c := range calls { // the last call of a partition answers last
		if v, ok := c.cmd.Val().(int64); ok && v == -1 {
			if !slices.Contains(stale, c.partition) {
				stale = append(stale, c.partition)
			}
			continue
		}
		next, err := nextFrom(c.cmd.Val())
		if err != nil {
			return nil, &snapshot.StoreError{Op: "arm deadlines", Err: err}
		}
		out[c.partition] = next
	}
	if len(stale) > 0 {
		return out, &NotOwnerError{Partitions: stale}
	}
	return out, nil
}

func nextFrom(v any) (time.Time, error) {
	str, _ := v.(string)
	if str == "" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: deadline score %q", snapshot.ErrCorrupt, str)
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

// DueDeadlines returns at most limit entries of one partition due at now
// (their deadline, in Unix ms, not after now), earliest first, and the
// earliest deadline after them, or the zero time.
func (s *Store) DueDeadlines(ctx context.Context, topic string, partition int32, now time.Time, limit int) ([]ArmedDeadline, time.Time, error) {
	due, armed := s.keys.Deadlines(topic, partition)
	res, err := redislayout.DueScript.Run(ctx, s.rdb, []string{due, armed}, now.UnixMilli(), limit).StringSlice()
	if err == nil && len(res) == 0 {
		err = fmt.Errorf("%w: empty answer", snapshot.ErrCorrupt)
	}
	if err != nil {
		return nil, time.Time{}, &snapshot.StoreError{Op: "due", Key: due, Err: err}
	}
	out := make([]ArmedDeadline, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		d, err := parseArmed(res[i], res[i+1])
		if err != nil {
			return nil, time.Time{}, &snapshot.StoreError{Op: "due", Key: due, Err: err}
		}
		out = append(out, d)
	}
	next, err := nextFrom(res[len(res)-1])
	return out, next, err
}

// NextDeadline returns the earliest deadline armed on a partition, or
// the zero time.
func (s *Store) NextDeadline(ctx context.Context, topic string, partition int32) (time.Time, error) {
	due, _ := s.keys.Deadlines(topic, partition)
	zs, err := s.rdb.ZRangeWithScores(ctx, due, 0, 0).Result()
	if err != nil {
		return time.Time{}, &snapshot.StoreError{Op: "next deadline", Key: due, Err: err}
	}
	if len(zs) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(zs[0].Score)).UTC(), nil
}

// RemoveFired takes the entries fired out of what is due, each only if the
// store still holds exactly what was fired (same version, kind and time):
// an entry re-armed since by a newer version stays. The session keeps a
// mark of what was fired until a newer version re-arms or disarms it, so
// that arming the same deadline at the same version again does not make it
// due again (see the top of this file). It returns how many it took out.
func (s *Store) RemoveFired(ctx context.Context, topic string, partition int32, fired []ArmedDeadline) (int, error) {
	if len(fired) == 0 {
		return 0, nil
	}
	due, armed := s.keys.Deadlines(topic, partition)
	args := make([]any, 0, 1+2*len(fired))
	args = append(args, s.epochs.get(partition))
	for _, d := range fired {
		args = append(args, d.SessionID, d.value())
	}
	n, err := redislayout.FiredScript.Run(ctx, s.rdb, []string{due, armed, s.keys.Epoch(topic, partition)}, args...).Int()
	if err != nil {
		return n, &snapshot.StoreError{Op: "remove fired", Key: due, Err: err}
	}
	if n < 0 {
		return 0, s.notOwner("remove fired", partition)
	}
	return n, nil
}

// DeleteDeadlines deletes every armed deadline of a partition, and its
// closed sessions (before the partition is rebuilt from the earliest
// offset, which writes them again).
func (s *Store) DeleteDeadlines(ctx context.Context, topic string, partition int32) error {
	due, armed := s.keys.Deadlines(topic, partition)
	keys := []string{due, armed, s.keys.Closed(topic, partition), s.keys.Epoch(topic, partition)}
	n, err := redislayout.DeleteDeadlinesScript.Run(ctx, s.rdb, keys, s.epochs.get(partition)).Int()
	if err != nil {
		return &snapshot.StoreError{Op: "delete deadlines", Key: due, Err: err}
	}
	if n < 0 {
		return s.notOwner("delete deadlines", partition)
	}
	return nil
}
