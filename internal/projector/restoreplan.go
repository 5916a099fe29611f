package projector

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A restore plan: what a partition's changelog holds, and what a restore
// from it writes (restore.go reads and writes it).

// restorePlan is what a partition's changelog allows.
type restorePlan struct {
	latest     changelog.Latest
	records    int   // changelog records read
	eventStart int64 // the events partition's log start offset
	eventEnd   int64 // its end offset
	// stall, when set, says why the changelog cannot be used and the
	// partition must wait for an operator (its checkpoint is beyond the
	// events log: it belongs to another log).
	stall string
	// gap, when set, is the alert of a changelog checkpoint older than the
	// events log's start: the restore proceeds, but events were lost.
	gap string
	// read is how long reading the changelog took.
	read time.Duration
	// bad holds, by record key, the latest record of each key that the
	// restore cannot use (it does not decode, is not authentic, or does
	// not hold what its place says: unusable) and that no usable record
	// of the same key follows; decide says what they allow.
	bad map[string]unusable
	// entries, armed and links are what a restore writes, in session id
	// order (prepare): the kept snapshots, their deadlines and closed
	// entries, and each open child's link to its parent.
	entries []snapshot.Entry
	armed   []projstore.ArmedDeadline
	links   []projstore.ChildLink
	// tombs are the archived sessions' tombstones (docs/retention.md), from the
	// changelog's archived records.
	tombs []projstore.Tombstone
}

// unusable is a changelog record the restore cannot use.
type unusable struct {
	offset int64
	err    error
}

// markBad notes r as its key's latest record, unusable for err.
func (pl *restorePlan) markBad(r *kgo.Record, err error) {
	if pl.bad == nil {
		pl.bad = map[string]unusable{}
	}
	pl.bad[string(r.Key)] = unusable{offset: r.Offset, err: err}
}

// decide settles the plan's unusable records (docs/exactly-once.md, "The
// snapshot changelog"): a restore must never be lossy
// because of one. It returns whether the plan is to be dropped for a fold
// from the log's start, and sets pl.stall when neither is exact:
//
//   - A record whose key is no session's (not a session id, not the
//     checkpoint key) concerns no session: it is skipped.
//   - An unusable checkpoint record leaves the latest usable one before
//     it, which is lower: folding from a lower checkpoint is exact (the
//     fold skips what the restored snapshots reflect).
//   - An unusable record of a session leaves that session's latest state
//     unknown. Restoring the others and folding from the checkpoint would
//     lose what the session did before it; folding the partition from the
//     log's start is exact only when the log still holds everything (its
//     start is offset 0) and no session of the partition was archived
//     (the fold would bring it back). Otherwise the partition stalls
//     with the alert, as for a changelog beyond the log.
//   - With no usable checkpoint at all, the restore folds from 0, which
//     is exact only from a log that starts at 0: otherwise it stalls.
func (pl *restorePlan) decide(topic string, id int32) (fromStart bool) {
	var sessions []string
	for k, u := range pl.bad {
		switch {
		case k == changelog.CheckpointKey, !fsm.ValidSessionID(k):
		default:
			sessions = append(sessions, fmt.Sprintf("%q at offset %d (%v)", cut(k), u.offset, u.err))
		}
	}
	if len(pl.bad) > 0 && len(sessions) == 0 && (pl.latest.HasCheckpoint || pl.eventStart == 0) {
		return false // every unusable record skipped exactly
	}
	if len(sessions) == 0 && len(pl.bad) == 0 {
		return false
	}
	sort.Strings(sessions)
	if pl.eventStart == 0 && len(pl.latest.Archived) == 0 {
		return true
	}
	what := "no usable checkpoint record"
	if len(sessions) > 0 {
		what = fmt.Sprintf("%d session(s) whose latest record cannot be used: %s", len(sessions), strings.Join(sessions[:min(3, len(sessions))], "; "))
	}
	pl.stall = fmt.Sprintf("the changelog's partition %d has %s; restoring without it would lose what the session did before the log's start %d (retention), and folding from the start would lose every session that began before it or bring back %d archived ones: run the build that wrote it (a newer snapshot format), restore Redis from a copy, or set CORREX_CHANGELOG=false and restart to fold from the log's start knowing what left the log is lost (topic %s)",
		id, what, pl.eventStart, len(pl.latest.Archived), topic)
	return false
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// usableRecord decodes a changelog record read at r's place, and checks
// that it is the system's and holds what its place says
// (docs/security.md, "System records"):
// at or above the line it carries a MAC that verifies under the system
// key (a nil keys checks none); a snapshot's or an archived record's
// position is on the record's own partition, which is its key's (of the
// events topic's n partitions), and below the events log's end (a
// position beyond it would make the fold skip the session's next events).
//
// The position is not compared with the changelog's checkpoint: a
// snapshot produced after the latest checkpoint record (its batch's
// checkpoint record not produced yet, the writer stopped) legitimately
// reflects events past it.
func usableRecord(r *kgo.Record, keys *systemkey.Keys, part kgo.TopicPartitioner, n int, eventEnd int64) (changelog.Record, error) {
	rec, err := changelog.DecodeRecord(r)
	if err != nil {
		return rec, err
	}
	if keys.ChangelogSigned(r.Partition, r.Offset) && !keys.Verify(r) {
		return rec, fmt.Errorf("not the system's: no %s that verifies under the system key", systemkey.Header)
	}
	if rec.Kind == changelog.KindCheckpoint {
		return rec, nil
	}
	switch {
	case rec.Position.Partition != r.Partition:
		return rec, fmt.Errorf("position %s on changelog partition %d", rec.Position, r.Partition)
	case n > 0 && int32(part.Partition(r, n)) != r.Partition:
		return rec, fmt.Errorf("key %q belongs to partition %d of %d, not %d", cut(rec.SessionID), part.Partition(r, n), n, r.Partition)
	case rec.Position.Offset >= eventEnd:
		return rec, fmt.Errorf("position %s at or beyond the log's end %d", rec.Position, eventEnd)
	}
	return rec, nil
}

// prepare decodes each kept snapshot once (the changelog's read took only
// its head) and builds what writeRestore writes. A snapshot that does not
// decode is its session's unusable latest record (markBad, decide).
func (pl *restorePlan) prepare(timeouts fsm.Timeouts, forcedGrace time.Duration) error {
	ids := make([]string, 0, len(pl.latest.Snapshots))
	for sid := range pl.latest.Snapshots {
		ids = append(ids, sid)
	}
	sort.Strings(ids)
	pl.entries = make([]snapshot.Entry, len(ids))
	pl.armed = make([]projstore.ArmedDeadline, len(ids))
	pl.links = nil
	var s snapshot.Snapshot
	pl.entries, pl.armed = pl.entries[:0], pl.armed[:0]
	for _, sid := range ids {
		rec := pl.latest.Snapshots[sid]
		if err := snapshot.Decode(rec.Snapshot, &s); err != nil {
			if pl.bad == nil {
				pl.bad = map[string]unusable{}
			}
			pl.bad[sid] = unusable{offset: -1, err: fmt.Errorf("its kept snapshot does not decode: %w", err)}
			continue
		}
		pl.entries = append(pl.entries, snapshot.Entry{SessionID: sid, Data: rec.Snapshot})
		pl.armed = append(pl.armed, armedOf(&s, timeouts, forcedGrace))
		if par := s.ParentSessionID; par != "" && par != s.ID && fsm.ValidSessionID(par) && !s.Terminal() {
			pl.links = append(pl.links, projstore.ChildLink{Parent: par, Child: s.ID})
		}
	}
	pl.tombs = pl.tombs[:0]
	for sid := range pl.latest.Archived {
		t := projstore.Tombstone{SessionID: sid}
		if f, ok := pl.latest.Finals[sid]; ok { // a record from before tombstones says only that it was archived
			t.State, _ = fsm.ParseState(f.State)
			t.Version = f.Version
			if f.EndedMs > 0 {
				t.Ended = time.UnixMilli(f.EndedMs).UTC()
			}
		}
		pl.tombs = append(pl.tombs, t)
	}
	return nil
}

// usable reports whether the plan restores (a changelog checkpoint to
// fold from, within the events log).
func (pl *restorePlan) usable() bool {
	return pl != nil && pl.stall == "" && pl.latest.HasCheckpoint && pl.latest.Checkpoint.Offset > 0
}
