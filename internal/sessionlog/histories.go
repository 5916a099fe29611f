package sessionlog

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// DefaultHistoryBudget is the bytes of history entries Histories holds at
// once unless told otherwise: 8 MiB, about 30,000 entries (doc.go says
// what was measured).
const DefaultHistoryBudget = 8 << 20

// ErrFirstRecordGone is returned, wrapped, by a history's read when the
// log no longer gave the session's first record, although the log's start
// had not passed it when the read was planned: the log's retention moved
// its start during the read. Nothing the read yielded is a whole history;
// a read started again finds the session's history incomplete.
var ErrFirstRecordGone = errors.New("sessionlog: the log's start passed the session's first record during the read")

// History is a session's history as the archive keeps it, handed to
// Histories' callback.
type History struct {
	// Entries are the session's entries when Histories held them (read in
	// a pass over the partition shared with other sessions); nil when the
	// history was too large for the byte budget, and Each reads it from
	// the log again, alone.
	Entries []wire.HistoryEntry
	// Complete is false when the log no longer held the session's first
	// events (its start had passed the session's first offset: a finite
	// retention, docs/retention.md). The history is then empty: an event's
	// outcome depends on every event before it, so the records the log
	// still holds cannot be folded without those it lost, and a fold of
	// them alone would take each for an event of an unknown session.
	Complete bool
	// EarliestOffset is where the partition's log started when it was
	// read (set when !Complete).
	EarliestOffset int64

	stream func(yield func(wire.HistoryEntry) error) error
}

// Each calls yield with each entry of the history, in order, and stops at
// yield's first error, which it returns. A history too large to hold is
// read from the log as it is yielded, in the memory of one fetch (a read
// error, or ErrFirstRecordGone, is returned then); such a history is valid
// only during the Histories callback that received it, and under that
// call's context.
func (h History) Each(yield func(wire.HistoryEntry) error) error {
	if h.stream != nil {
		return h.stream(yield)
	}
	for _, e := range h.Entries {
		if err := yield(e); err != nil {
			return err
		}
	}
	return nil
}

// Streamed reports whether Each reads the history from the log (it was too
// large to hold) rather than from Entries.
func (h History) Streamed() bool { return h.stream != nil }

// entrySize is what an entry costs held in a slice, besides its strings.
const entrySize = int64(unsafe.Sizeof(wire.HistoryEntry{}))

// entryEstimate is what an entry is expected to cost before it is read:
// its struct and about 64 bytes of strings (a 36-byte event id, a decision's
// by and sentBy; the type, outcome and states are constants).
const entryEstimate = entrySize + 64

// entryBytes is what a held entry costs: its struct and its strings.
func entryBytes(e *wire.HistoryEntry) int64 {
	return entrySize + int64(len(e.EventID)+len(e.Type)+len(e.Outcome)+len(e.Reason)+len(e.From)+len(e.To)+
		len(e.RequestID)+len(e.By)+len(e.SentBy))
}

// Histories calls fn with the whole history of each of the stored
// sessions, all on partition p, as GET /v1/sessions/{id}/history answers
// it: each session's records folded from its first offset to its stored
// position, an entry for each the fold took (Entry). fn's error stops the
// calls and is returned.
//
// It holds at most about budget bytes of entries at once (budget <= 0 is
// DefaultHistoryBudget; entryBytes counts a held entry). The sessions are
// packed, in order, into groups whose histories together are expected to
// fit (each session's Counters.Events entries of entryEstimate bytes); a
// group's sessions are read in one pass over the partition, from the
// lowest first offset to the highest position, and handed to fn, then
// dropped before the next group is read. A session expected to exceed the
// budget alone, or that a pass finds exceeding it (its estimate was
// wrong: the largest held history is let go then), is handed to fn
// last, with a History that reads it again from the log, alone, as fn
// consumes it (History.Each).
//
// A session whose first offset is before the log's start is not read: its
// History says it is not Complete. A session whose first record a read
// does not find at its first offset (the log's start passed it since) is
// ErrFirstRecordGone, never a shorter history called complete. A range
// past the log's end is ErrBeyondLog, not a wait.
func (r *Reader) Histories(ctx context.Context, p int32, stored []*snapshot.Snapshot, budget int64,
	fn func(s *snapshot.Snapshot, h History) error) error {
	if len(stored) == 0 {
		return nil
	}
	if budget <= 0 {
		budget = DefaultHistoryBudget
	}
	for _, s := range stored {
		if s.Position.Partition != p {
			return fmt.Errorf("sessionlog: session %s is on partition %d, not %d", s.ID, s.Position.Partition, p)
		}
	}
	start, _, err := r.Bounds(ctx, p)
	if err != nil {
		return err
	}
	var groups [][]*snapshot.Snapshot
	var large []*snapshot.Snapshot
	var sum int64
	for _, s := range stored {
		if s.FirstOffset < start {
			if err := fn(s, History{EarliestOffset: start}); err != nil {
				return err
			}
			continue
		}
		est := estimate(s)
		switch {
		case est > budget:
			large = append(large, s)
			continue
		case len(groups) == 0 || sum+est > budget:
			groups = append(groups, nil)
			sum = 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], s)
		sum += est
	}
	for _, g := range groups {
		held, over, err := r.pass(ctx, p, g, budget)
		if err != nil {
			return err
		}
		large = append(large, over...)
		for _, s := range g {
			if h, ok := held[s.ID]; ok {
				if err := fn(s, History{Entries: h, Complete: true}); err != nil {
					return err
				}
			}
		}
	}
	for _, s := range large {
		h := History{Complete: true, stream: func(yield func(wire.HistoryEntry) error) error {
			return r.stream(ctx, s, yield)
		}}
		if err := fn(s, h); err != nil {
			return err
		}
	}
	return nil
}

// estimate is the bytes a session's history is expected to take held.
func estimate(s *snapshot.Snapshot) int64 {
	const most = uint64(1 << 62 / entryEstimate)
	if s.Counters.Events > most {
		return 1 << 62
	}
	return int64(s.Counters.Events) * entryEstimate
}

// folding is one session's fold in a read.
type folding struct {
	stored *snapshot.Snapshot
	s      snapshot.Snapshot
	red    fsm.Reducer
	seen   bool // its first record was read
	out    []wire.HistoryEntry
	bytes  int64
	over   bool // let go: its history is read alone
}

// take folds e, at pos, into f and returns the entry it makes, if any, or
// ErrFirstRecordGone when e is the session's first record read and not at
// its first offset.
func (f *folding) take(e *fsm.Event, pos snapshot.Position) (wire.HistoryEntry, bool, error) {
	if !f.seen {
		if pos.Offset != f.stored.FirstOffset {
			return wire.HistoryEntry{}, false, fmt.Errorf("%w: session %s starts at offset %d of partition %d, and its first record read is at %d",
				ErrFirstRecordGone, f.stored.ID, f.stored.FirstOffset, pos.Partition, pos.Offset)
		}
		f.seen = true
	}
	o, folded := f.s.Fold(&f.red, e, pos)
	if !folded || o.Result == fsm.Orphan {
		return wire.HistoryEntry{}, false, nil
	}
	return Entry(&f.s, e, pos, o), true, nil
}

// finished is the error of a read that ended without f's first record.
func (f *folding) finished(p int32) error {
	if f.seen {
		return nil
	}
	return fmt.Errorf("%w: no record of session %s from its first offset %d of partition %d",
		ErrFirstRecordGone, f.stored.ID, f.stored.FirstOffset, p)
}

// pass reads the histories of group in one pass over the partition,
// holding at most budget bytes of entries: past it, the largest history
// held is let go and returned in over, to be read alone.
func (r *Reader) pass(ctx context.Context, p int32, group []*snapshot.Snapshot, budget int64) (map[string][]wire.HistoryEntry, []*snapshot.Snapshot, error) {
	byID := make(map[string]*folding, len(group))
	from, end := group[0].FirstOffset, group[0].Position.Offset
	var held int64
	for _, s := range group {
		// Room for the entries expected (their estimates together fit).
		n := min(s.Counters.Events, uint64(budget/entryEstimate))
		f := &folding{stored: s, out: make([]wire.HistoryEntry, 0, n), bytes: int64(n) * entrySize}
		byID[s.ID] = f
		held += f.bytes
		from, end = min(from, s.FirstOffset), max(end, s.Position.Offset)
	}
	var ferr error
	err := r.Read(ctx, p, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
		f := byID[e.SessionID]
		if f == nil || f.over || pos.Offset < f.stored.FirstOffset || pos.Offset > f.stored.Position.Offset {
			return true
		}
		en, ok, err := f.take(e, pos)
		if err != nil {
			ferr = err
			return false
		}
		if !ok {
			return true
		}
		// Counted by capacity: a slice that grows past its estimate
		// holds what it doubled to.
		c := cap(f.out)
		f.out = append(f.out, en)
		n := entryBytes(&en) - entrySize + int64(cap(f.out)-c)*entrySize
		f.bytes += n
		held += n
		for held > budget {
			big := f
			for _, g := range byID {
				if !g.over && g.bytes > big.bytes {
					big = g
				}
			}
			held -= big.bytes
			big.over, big.out, big.bytes = true, nil, 0
		}
		return true
	})
	if ferr != nil {
		return nil, nil, ferr
	}
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string][]wire.HistoryEntry, len(group))
	var over []*snapshot.Snapshot
	for _, s := range group {
		f := byID[s.ID]
		if f.over {
			over = append(over, s)
			continue
		}
		if err := f.finished(p); err != nil {
			return nil, nil, err
		}
		out[s.ID] = f.out
	}
	return out, over, nil
}

// stream reads session s's history alone, from its first offset to its
// position, and yields each entry as it is folded.
func (r *Reader) stream(ctx context.Context, s *snapshot.Snapshot, yield func(wire.HistoryEntry) error) error {
	f := &folding{stored: s}
	var ferr error
	err := r.Scan(ctx, s.ID, s.Position.Partition, s.FirstOffset, s.Position.Offset, func(e *fsm.Event, pos snapshot.Position) bool {
		en, ok, err := f.take(e, pos)
		if err == nil && ok {
			err = yield(en)
		}
		ferr = err
		return err == nil
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return err
	}
	return f.finished(s.Position.Partition)
}
