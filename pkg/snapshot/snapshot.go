package snapshot

import (
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Position is a place in the Kafka log: a partition and an offset
// (wire.Position). Its Less is the order in which the store fences writes: a
// snapshot replaces the stored one only if its position is greater. Its
// String is "P:O", the form the HTTP API uses.
type Position = wire.Position

// ParsePosition parses "P:O" with a non-negative partition and offset
// (wire.ParsePosition).
func ParsePosition(s string) (Position, error) { return wire.ParsePosition(s) }

// Snapshot is the read model of one session: its folded state (fsm.Session)
// and where in the log that state comes from. It carries everything the fold
// needs to continue, so a projector can resume from it.
type Snapshot struct {
	fsm.Session
	// Position is the (partition, offset) of the last event folded into the
	// snapshot, whatever its outcome (applied, rejected or duplicate).
	Position Position
	// FirstOffset is the offset of the session's SessionCreated record, where
	// a replay of the session starts.
	FirstOffset int64
	// TimeoutDefaults are the service's timeout defaults (CORREX_TIMEOUT_*),
	// which the JSON form applies to show the effective timeouts and the
	// armed deadline (docs/timeouts.md). They are configuration, not state:
	// never stored, never read by the fold; Store.WithTimeoutDefaults sets
	// them on what it reads.
	TimeoutDefaults fsm.Timeouts
}

// Fold folds e, read from the log at pos, into s, and reports the outcome.
// It is the one rule the projector and a replay share:
//
//   - a record at or below s.Position is already reflected in s (a replay
//     after a crash, a rebalance, a zombie) and is skipped: folded is false
//     and s is untouched;
//   - otherwise the reducer applies e; an orphan leaves s untouched, any
//     other outcome (applied, rejected, duplicate) moves s.Position to pos,
//     and a creation sets FirstOffset.
//
// Positions of one session are compared within a partition; a session's
// events always share one partition.
func (s *Snapshot) Fold(r *fsm.Reducer, e *fsm.Event, pos Position) (o fsm.Outcome, folded bool) {
	if s.Exists() && !s.Position.Less(pos) {
		return fsm.Outcome{}, false
	}
	o = r.Apply(&s.Session, e)
	if o.Result == fsm.Orphan {
		return o, true
	}
	if o.Result == fsm.Applied && o.From == fsm.StateNone {
		s.FirstOffset = pos.Offset
	}
	s.Position = pos
	return o, true
}
