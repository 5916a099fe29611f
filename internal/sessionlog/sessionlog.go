// Package sessionlog owns reading sessions' records back from the events
// log, outside any consumer group: one session's records (the query
// service's replay and history), every session's records of a partition
// range in one read (the projector's archive sweep), and the history
// entry that says what the fold did with each (GET
// /v1/sessions/{id}/history, and the archive's objects).
package sessionlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Reader reads the events topic's partitions directly (no consumer group).
type Reader struct {
	Kafka kafka.Config
	Topic string
	Opts  []kgo.Opt // extra client options (telemetry)
}

// Scan calls fn with each record of session id in partition p from offset
// from to offset end (both included), in order, decoded as the projector
// decodes them: another session's records, and those the projector sets
// aside, are skipped. fn returns false to stop early.
func (r *Reader) Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	return r.Read(ctx, p, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
		if e.SessionID != id {
			return true
		}
		return fn(e, pos)
	})
}

// Read calls fn with every record of partition p from offset from to
// offset end (both included), in order, decoded as the projector decodes
// them: a record whose key is not its event's sessionId, or that does not
// decode, is skipped. fn returns false to stop early.
func (r *Reader) Read(ctx context.Context, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	if from > end {
		return nil
	}
	opts := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.Topic: {p: kgo.NewOffset().At(from)}})}, r.Opts...)
	cl, err := kafka.NewClient(r.Kafka, opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var e fsm.Event
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading the log stopped before offset %d: %w", end, cl.Explain(err))
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return cl.Explain(ferr)
		}
		done := false
		fetches.EachRecord(func(rec *kgo.Record) {
			if done || rec.Offset > end {
				done = true
				return
			}
			if rec.Offset == end {
				done = true
			}
			if kafka.DecodeEvent(rec, &e) != nil || string(rec.Key) != e.SessionID {
				return // a record the projector set aside
			}
			if !fn(&e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset}) {
				done = true
			}
		})
		if done {
			return nil
		}
	}
}

// Entry is what the fold did with e at pos, s being the session after it.
func Entry(s *snapshot.Snapshot, e *fsm.Event, pos snapshot.Position, o fsm.Outcome) wire.HistoryEntry {
	en := wire.HistoryEntry{Version: s.Version, Position: pos, EventID: e.ID.String(), Type: e.TypeName(),
		OccurredAt: e.OccurredAt, Outcome: o.Result.String(), To: o.To.String()}
	if o.From != fsm.StateNone {
		en.From = o.From.String()
	}
	if o.Reason != fsm.ReasonNone {
		en.Reason = o.Reason.String()
	}
	return en
}

// Histories returns the whole history of each of the stored sessions, all
// on partition p, as GET /v1/sessions/{id}/history answers it: each
// session's records folded from its first offset to its stored position,
// an entry for each the fold took (Entry). The partition is read once,
// from the lowest first offset to the highest position.
func (r *Reader) Histories(ctx context.Context, p int32, stored []*snapshot.Snapshot) (map[string][]wire.HistoryEntry, error) {
	type folding struct {
		stored *snapshot.Snapshot
		s      snapshot.Snapshot
		red    fsm.Reducer
		out    []wire.HistoryEntry
	}
	byID := make(map[string]*folding, len(stored))
	from, end := int64(-1), int64(-1)
	for _, s := range stored {
		if s.Position.Partition != p {
			return nil, fmt.Errorf("sessionlog: session %s is on partition %d, not %d", s.ID, s.Position.Partition, p)
		}
		byID[s.ID] = &folding{stored: s, out: []wire.HistoryEntry{}}
		if from < 0 || s.FirstOffset < from {
			from = s.FirstOffset
		}
		end = max(end, s.Position.Offset)
	}
	out := make(map[string][]wire.HistoryEntry, len(stored))
	if len(stored) == 0 {
		return out, nil
	}
	err := r.Read(ctx, p, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
		f := byID[e.SessionID]
		if f == nil || pos.Offset < f.stored.FirstOffset || pos.Offset > f.stored.Position.Offset {
			return true
		}
		o, folded := f.s.Fold(&f.red, e, pos)
		if folded && o.Result != fsm.Orphan {
			f.out = append(f.out, Entry(&f.s, e, pos, o))
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for id, f := range byID {
		out[id] = f.out
	}
	return out, nil
}
