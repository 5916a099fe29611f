package projector

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The kinds of mismatch the verifier reports (docs/verification.md, "Kinds").
const (
	// MismatchMissing: the log holds the session's events (below the
	// checkpoint), Redis holds no snapshot and no tombstone.
	MismatchMissing = "missing"
	// MismatchStale: the stored snapshot is at an older position than the
	// session's last event below the checkpoint (rolled back).
	MismatchStale = "stale"
	// MismatchCorrupt: the stored bytes differ from the fold's at the same
	// position, do not decode, or claim a position that is not the
	// session's.
	MismatchCorrupt = "corrupt"
	// MismatchExtra: a stored snapshot whose session has no events in the
	// log.
	MismatchExtra = "extra"
)

// MismatchLogged is the message the verifier logs (at Warn) for each
// mismatch it finds, with the session, the kind, both digests and whether
// it was repaired: what a log search for the verifier's findings matches.
const MismatchLogged = "a stored snapshot differs from the fold of the log"

// verifyMinCycle is the shortest a cycle takes: with few sessions (or
// none) the verifier does not read the log again and again.
const verifyMinCycle = time.Second

// verifyCatchUpLag is the lag (high watermark minus checkpoint, when the
// checkpoint was written) above which a partition counts as catching up
// and waits for a later cycle.
const verifyCatchUpLag = 10_000

// verifyAttempts is how many times a session that moved while it was
// checked is compared again in one cycle; after that it waits for the next
// cycle, never reported.
const verifyAttempts = 3

// verifyStore is what the verifier needs of the store beyond Store; the
// Redis store (*projstore.Store) has it. A store without it runs no
// verifier.
type verifyStore interface {
	RawSnapshots(ctx context.Context, ids []string) ([][]byte, error)
	SessionIDs(ctx context.Context, fn func(id string)) error
	Replace(ctx context.Context, e snapshot.Entry) (bool, error)
	IsClosed(ctx context.Context, topic string, partition int32, id string) (bool, error)
	Epoch(partition int32) uint64
	PublishVerify(ctx context.Context, topic string, d redislayout.VerifyDelta) error
}

var _ verifyStore = (*projstore.Store)(nil)

// verifyObserver sees what the verifier does; Telemetry implements it.
type verifyObserver interface {
	VerifyChecked(n int)
	VerifyMismatch(kind string)
	VerifyRepaired(kind string)
	VerifyUnverifiable()
	VerifyCycle(d time.Duration)
}

// VerifyStats are the verifier's counts since the projector started.
type VerifyStats struct {
	Checked      int64
	Mismatches   map[string]int64
	Repaired     int64
	Unverifiable int64
	Cycles       int64
	// Reindexed counts the stored sessions that ended, were exact, and
	// were not in their partition's closed sessions: each was indexed
	// again (verifier.indexed), so the archive's sweep takes it.
	Reindexed int64
}

// verifier is the background verifier (docs/verification.md):
// it compares every stored snapshot of the partitions this projector owns
// with the fold of the session's events from the log, Config.VerifyRate
// sessions a second, each once per cycle, and repairs what differs
// (Config.VerifyRepair) through the fenced write /rebuild uses
// (snapshot.Store.Replace, which loses to any later position).
//
// A cycle takes the owned partitions one after the other. While one of
// them is catching up (more than verifyCatchUpLag records behind when its
// checkpoint was written) the cycle waits: what the fold reaches is
// written again soon, and the verifier's log reads would compete with it.
// For a
// partition it reads the stored checkpoint C0, folds every session of
// the partition from the log's start to C0 (one read of the partition,
// the records the projector sets aside skipped as it skips them: records
// that do not decode, whose key is not their session, forged system
// records, records off their key's partition), and lists the sessions:
// those the fold found and those Redis holds on the partition. It then
// checks each, at the rate:
//
//   - read the stored checkpoint C, then the stored bytes S (in that
//     order: the projector stores snapshots before the checkpoint that
//     passes them, so S reflects every event of the session below C);
//   - fold the partition further, to C or past S's position, whichever is
//     later (the fold moves forward only, so a cycle reads the log about
//     once);
//   - compare: no events and no snapshot is right; events below C and no
//     snapshot is missing (unless the session was archived: its
//     tombstone); S at the position of the session's last event with the
//     fold's bytes is right, with other bytes corrupt; S older than the
//     session's last event below C is stale; older than an event at or
//     past C is a snapshot the projector has not stored yet, compared
//     again; S at a position the fold does not end at is corrupt; a
//     snapshot with no events is extra, or unverifiable when its session
//     began before the log's start;
//   - a mismatch is read again (C and S) before it is reported: S that
//     changed is compared again (the projector wrote), never reported; C
//     lower than before, or marked for a rebuild, means Redis lost the
//     read model (emptied, failed over to a lagging replica), which the
//     projector rebuilds: the partition's cycle ends there.
//
// So a report needs the same stored bytes twice around a fold that
// reaches past the checkpoint they were read under: writes under load,
// a kill -9 (snapshots ahead of the checkpoint are the fold of real
// events), a rebalance (ownership is checked before each session and the
// repair carries the partition's epoch, so a newer owner's write wins)
// and a failover (the checkpoint goes back) give none.
//
// A repair writes the fold at its position with Replace: it replaces the
// stored snapshot only at the same position or an older one, so it never
// writes over what the projector stored since; it is done only for an
// event below C, so it never writes ahead of the projector. An extra
// snapshot is reported, not deleted: deleting is an operator's decision.
//
// Memory: the fold of one partition at a time, one snapshot per session of
// the partition (about what a restore from the changelog holds).
//
// Where the log no longer starts at 0 (a finite retention), the sessions
// that began before its start cannot be folded from it: a stored snapshot
// of one is counted unverifiable; one with no snapshot is not seen. A
// session that began before the topic's partition count grew, and whose
// key hashes to another partition now, is not judged.
type verifier struct {
	topic string
	st    *state // the partition count and the stalls, under st.mu
	// rm is the store's read model (checkpoints, tombstones); store what
	// the verifier needs beyond it.
	rm     Store
	store  verifyStore
	obs    verifyObserver
	log    *slog.Logger
	rate   float64
	repair bool
	reader *sessionlog.Reader
	// timeouts and forcedGrace arm a repaired session's deadline entry
	// (armedOf), as the fold's deadlines step does.
	timeouts    fsm.Timeouts
	forcedGrace time.Duration

	mu    sync.Mutex
	owned map[int32]bool

	// pending is what has not been published to the topic's report yet.
	pmu     sync.Mutex
	pending redislayout.VerifyDelta

	// fixed are the sessions repaired since the fold last took them
	// (takeRepaired).
	fmu   sync.Mutex
	fixed []repairedSession

	checked, repaired, unverifiable, cycles, reindexed atomic.Int64
	mismatches                                         [4]atomic.Int64 // by kind, in wire.VerifyKinds' order
}

type nopVerifyObserver struct{}

func (nopVerifyObserver) VerifyChecked(int)           {}
func (nopVerifyObserver) VerifyMismatch(string)       {}
func (nopVerifyObserver) VerifyRepaired(string)       {}
func (nopVerifyObserver) VerifyUnverifiable()         {}
func (nopVerifyObserver) VerifyCycle(d time.Duration) {}

// newVerifier returns the projector's verifier, or nil when it is off
// (Config.VerifyRate 0) or the store cannot run it.
func newVerifier(cfg Config, store Store, st *state, auth *systemAuth, obs Observer, log *slog.Logger) *verifier {
	if cfg.VerifyRate <= 0 {
		return nil
	}
	vs, ok := store.(verifyStore)
	if !ok {
		log.Warn("the store cannot run the background verifier: it is off")
		return nil
	}
	v := &verifier{topic: cfg.Topic, st: st, rm: store, store: vs, obs: nopVerifyObserver{}, log: log.With("verify", "background"),
		rate: cfg.VerifyRate, repair: cfg.VerifyRepair, timeouts: cfg.Timeouts, forcedGrace: cfg.ForcedGrace, owned: map[int32]bool{},
		reader: &sessionlog.Reader{Kafka: cfg.Kafka, Topic: cfg.Topic,
			Decode: func(r *kgo.Record, e *fsm.Event) error { return auth.loaded().DecodeEvent(r, e) }}}
	if o, ok := obs.(verifyObserver); ok {
		v.obs = o
	}
	return v
}

// own and disown follow the partitions this projector owns (the group's
// callbacks).
func (v *verifier) own(ids ...int32) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range ids {
		v.owned[id] = true
	}
}

func (v *verifier) disown(ids ...int32) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range ids {
		delete(v.owned, id)
	}
}

func (v *verifier) owns(id int32) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.owned[id]
}

func (v *verifier) ownedList() []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]int32, 0, len(v.owned))
	for id := range v.owned {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// stats returns the counts so far.
func (v *verifier) stats() VerifyStats {
	s := VerifyStats{Checked: v.checked.Load(), Repaired: v.repaired.Load(), Unverifiable: v.unverifiable.Load(),
		Cycles: v.cycles.Load(), Reindexed: v.reindexed.Load(), Mismatches: map[string]int64{}}
	for i, k := range wire.VerifyKinds {
		s.Mismatches[k] = v.mismatches[i].Load()
	}
	return s
}

// VerifyStats returns the background verifier's counts since Run started
// (zero when it is off).
func (p *Projector) VerifyStats() VerifyStats {
	if v := p.verify.Load(); v != nil {
		return v.stats()
	}
	return VerifyStats{Mismatches: map[string]int64{}}
}

// pacer spaces the checks at the rate, in wall-clock time.
type pacer struct {
	every time.Duration
	next  time.Time
}

func (pc *pacer) wait(ctx context.Context) error {
	now := time.Now()
	if pc.next.Before(now) {
		pc.next = now
	}
	d := pc.next.Sub(now)
	pc.next = pc.next.Add(pc.every)
	if d <= 0 {
		return ctx.Err()
	}
	return backoff.Sleep(ctx, d)
}

// run is the verifier's loop: a cycle over the owned partitions, then the
// next, each at least verifyMinCycle long.
func (v *verifier) run(ctx context.Context) {
	pc := &pacer{every: time.Duration(float64(time.Second) / v.rate)}
	for ctx.Err() == nil {
		start := time.Now()
		parts := v.ownedList()
		n, verified, err := v.cycle(ctx, pc, parts)
		if ctx.Err() != nil {
			return
		}
		d := time.Since(start)
		if err != nil {
			v.log.Warn("a verification cycle stopped; the next one starts over", "err", err)
		} else if len(verified) > 0 {
			v.cycles.Add(1)
			v.obs.VerifyCycle(d)
			v.pmu.Lock()
			v.pending.Cycle = &wire.VerifyCycle{EndedAt: time.Now().UTC(), DurationMs: d.Milliseconds(), Sessions: int64(n), Partitions: verified}
			v.pmu.Unlock()
		}
		v.publish(ctx)
		t := time.NewTimer(max(verifyMinCycle-d, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// publish adds what is pending to the topic's report; a failure keeps it
// for the next time.
func (v *verifier) publish(ctx context.Context) {
	v.pmu.Lock()
	d := v.pending
	v.pending = redislayout.VerifyDelta{}
	v.pmu.Unlock()
	if d.Empty() {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := v.store.PublishVerify(pctx, v.topic, d); err != nil {
		v.log.Warn("publishing the verifier's report", "err", err)
		v.pmu.Lock()
		v.pending = mergeDelta(d, v.pending)
		v.pmu.Unlock()
	}
}

func mergeDelta(a, b redislayout.VerifyDelta) redislayout.VerifyDelta {
	a.Checked += b.Checked
	a.Repaired += b.Repaired
	a.Unverifiable += b.Unverifiable
	for k, n := range b.Mismatches {
		if a.Mismatches == nil {
			a.Mismatches = map[string]int64{}
		}
		a.Mismatches[k] += n
	}
	a.Recent = append(a.Recent, b.Recent...)
	if len(a.Recent) > redislayout.RecentMismatches {
		a.Recent = a.Recent[len(a.Recent)-redislayout.RecentMismatches:]
	}
	if b.Cycle != nil {
		a.Cycle = b.Cycle
	}
	return a
}

// cycle checks every session of the given partitions that are ready to
// verify, and returns how many sessions it compared and the partitions it
// went through.
func (v *verifier) cycle(ctx context.Context, pc *pacer, parts []int32) (int, []int32, error) {
	if len(parts) == 0 {
		return 0, nil, nil
	}
	n := v.st.partitionCount()
	if n <= 0 {
		return 0, nil, nil
	}
	// Only the partitions ready to verify (see partition) are listed:
	// while every one catches up, a cycle reads nothing more.
	cps, err := v.rm.Checkpoints(ctx, v.topic)
	if err != nil {
		return 0, nil, err
	}
	want := map[int32]bool{}
	for _, id := range parts {
		if v.paused(id) {
			continue // stalled, rebuilt or restored: not the fold of this log
		}
		if catchingUp(cps, id) {
			// The projector is catching up: the whole cycle waits, so
			// that its log reads never compete with the fold.
			return 0, nil, nil
		}
		if verifiable(cps, id) {
			want[id] = true
		}
	}
	if len(want) == 0 {
		return 0, nil, nil
	}
	part := kafka.Partitioner().ForTopic(v.topic)
	stored := map[int32][]string{}
	var rec kgo.Record
	err = v.store.SessionIDs(ctx, func(id string) {
		rec.Key = []byte(id)
		if p := int32(part.Partition(&rec, int(n))); want[p] {
			stored[p] = append(stored[p], id)
		}
	})
	if err != nil {
		return 0, nil, fmt.Errorf("listing the stored sessions: %w", err)
	}
	total := 0
	var verified []int32
	for _, id := range parts {
		if !want[id] || !v.owns(id) {
			continue
		}
		k, err := v.partition(ctx, pc, id, n, part, stored[id])
		total += k
		if ctx.Err() != nil {
			return total, verified, ctx.Err()
		}
		if err != nil {
			v.log.Warn("verifying a partition stopped; the next cycle starts it over", "partition", id, "err", err)
			continue
		}
		verified = append(verified, id)
	}
	return total, verified, nil
}

// paused tells whether partition id is stalled (a checkpoint beyond the
// log, a bad changelog record), being rebuilt or being restored: its read
// model is then not the fold of the log the verifier would read, and
// judging it against that log would report, and repair, what is not wrong.
func (v *verifier) paused(id int32) bool { return v.st.paused(id) }

// verifiable tells whether partition id is ready to verify: it has a
// checkpoint, no rebuild is marked, and it is not catching up (a lag above
// verifyCatchUpLag when its checkpoint was written: every snapshot it
// reaches is written again soon, and the log read would compete with the
// fold; it is verified once caught up).
func verifiable(cps map[int32]snapshot.Checkpoint, id int32) bool {
	cp, ok := cps[id]
	return ok && cp.RebuildUntil == 0 && !catchingUp(cps, id)
}

// catchingUp tells whether partition id's checkpoint was written more
// than verifyCatchUpLag records behind the log's end.
func catchingUp(cps map[int32]snapshot.Checkpoint, id int32) bool {
	lag, known := cps[id].Lag()
	return known && lag > verifyCatchUpLag
}

// errReadModelMoved ends a partition's cycle: its checkpoint went back or
// a rebuild started (Redis lost the read model, which the projector
// rebuilds), or the partition changed owner.
var errReadModelMoved = errors.New("the partition's checkpoint went back, a rebuild started, or the partition moved")

// partModel is the fold of one partition's log, moving forward.
type partModel struct {
	id       int32
	n        int32
	part     kgo.TopicPartitioner
	start    int64 // the log's start offset
	hw       int64 // its end, as last read
	foldedTo int64 // the next offset to fold
	base     int64 // the checkpoint the cycle began under
	// cur reads the log forward for the whole pass: one client for the
	// partition's cycle. Under steady writes most checks read the log a
	// little further; with a client for each read, 3,507 checks made 4,827
	// connections to the broker (docs/verification.md).
	cur      *sessionlog.Cursor
	red      fsm.Reducer
	sessions map[string]*snapshot.Snapshot
}

// advance folds the partition's records from foldedTo to to-1.
func (v *verifier) advance(ctx context.Context, m *partModel, to int64) error {
	if to > m.hw {
		hw, err := m.cur.HighWatermark(ctx)
		if err != nil {
			return err
		}
		m.hw = hw
	}
	to = min(to, m.hw)
	if to <= m.foldedTo {
		return nil
	}
	var rec kgo.Record
	err := m.cur.ReadTo(ctx, to-1, func(e *fsm.Event, pos snapshot.Position) bool {
		rec.Key = []byte(e.SessionID)
		if int32(m.part.Partition(&rec, int(m.n))) != m.id {
			return true // set aside as wrong_partition by the projector
		}
		s := m.sessions[e.SessionID]
		if s == nil {
			s = &snapshot.Snapshot{}
			m.sessions[e.SessionID] = s
		}
		s.Fold(&m.red, e, pos)
		return true
	})
	if err != nil && !errors.Is(err, sessionlog.ErrBeyondLog) {
		return err
	}
	m.foldedTo = to
	return nil
}

// checkpoint reads the partition's stored checkpoint; errReadModelMoved
// when there is none, a rebuild is marked, or it is lower than base.
func (v *verifier) checkpoint(ctx context.Context, id int32, base int64) (int64, error) {
	cps, err := v.rm.Checkpoints(ctx, v.topic)
	if err != nil {
		return 0, err
	}
	cp, ok := cps[id]
	if !ok || cp.RebuildUntil > 0 || cp.Offset < base {
		return 0, errReadModelMoved
	}
	return cp.Offset, nil
}

// partition verifies one partition and returns how many sessions it
// compared.
func (v *verifier) partition(ctx context.Context, pc *pacer, id, n int32, part kgo.TopicPartitioner, stored []string) (int, error) {
	cps, err := v.rm.Checkpoints(ctx, v.topic)
	if err != nil {
		return 0, err
	}
	if !verifiable(cps, id) {
		return 0, nil
	}
	c0 := cps[id].Offset
	start, hw, err := v.reader.Bounds(ctx, id)
	if err != nil {
		return 0, err
	}
	if c0 > hw {
		// The checkpoint is beyond the end of the log: the read model
		// belongs to another log (the topic was recreated), which the
		// projector's start stalls, perhaps not yet (the group hands the
		// verifier a partition before the start reads its checkpoint).
		// Nothing here can be judged against this log.
		return 0, nil
	}
	cur, err := v.reader.Cursor(id, start)
	if err != nil {
		return 0, err
	}
	defer cur.Close()
	m := &partModel{id: id, n: n, part: part, start: start, hw: hw, foldedTo: start, base: c0,
		sessions: map[string]*snapshot.Snapshot{}, cur: cur}
	if err := v.advance(ctx, m, c0); err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(m.sessions)+len(stored))
	for sid, s := range m.sessions {
		if s.Exists() {
			ids = append(ids, sid)
		}
	}
	ids = append(ids, stored...)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	done, published := 0, time.Now()
	for _, sid := range ids {
		if err := pc.wait(ctx); err != nil {
			return done, err
		}
		if !v.owns(id) || v.paused(id) {
			return done, nil
		}
		if err := v.check(ctx, m, sid); err != nil {
			if errors.Is(err, errReadModelMoved) {
				return done, nil
			}
			return done, err
		}
		done++
		if time.Since(published) >= time.Second {
			v.publish(ctx)
			published = time.Now()
		}
	}
	return done, nil
}

// check compares one session, and reports and repairs a mismatch.
func (v *verifier) check(ctx context.Context, m *partModel, sid string) error {
	for range verifyAttempts {
		c, err := v.checkpoint(ctx, m.id, m.base)
		if err != nil {
			return err
		}
		raws, err := v.store.RawSnapshots(ctx, []string{sid})
		if err != nil {
			return err
		}
		raw := raws[0]
		var stored *snapshot.Snapshot
		if raw != nil {
			var s snapshot.Snapshot
			if snapshot.Decode(raw, &s) == nil {
				if s.Position.Partition != m.id {
					// Folded on another partition: the topic's partition
					// count grew since the session began, and its key
					// hashes elsewhere now. Not this partition's to judge.
					return nil
				}
				stored = &s
			}
		}
		target := c
		if stored != nil {
			target = max(target, stored.Position.Offset+1)
		}
		if err := v.advance(ctx, m, target); err != nil {
			return err
		}
		if c > m.hw {
			return errReadModelMoved // a checkpoint beyond the log's end: see partition
		}
		exp := m.sessions[sid]
		if exp != nil && !exp.Exists() {
			exp = nil
		}
		kind, again := v.classify(m, c, raw, stored, exp)
		if again {
			continue
		}
		if kind == "" {
			v.counted()
			if exp != nil && exp.Terminal() && exp.Position.Offset < c {
				return v.indexed(ctx, m, sid, raw, exp)
			}
			return nil
		}
		if kind == "unverifiable" {
			v.counted()
			v.unverifiable.Add(1)
			v.obs.VerifyUnverifiable()
			v.pmu.Lock()
			v.pending.Unverifiable++
			v.pmu.Unlock()
			return nil
		}
		// Read again before reporting: a snapshot that moved meanwhile is
		// compared again, and a read model that went back is the
		// projector's to rebuild.
		if _, err := v.checkpoint(ctx, m.id, c); err != nil {
			return err
		}
		raws, err = v.store.RawSnapshots(ctx, []string{sid})
		if err != nil {
			return err
		}
		if !bytes.Equal(raws[0], raw) || (raws[0] == nil) != (raw == nil) {
			continue
		}
		if kind == MismatchMissing {
			ts, err := v.rm.Tombstones(ctx, []string{sid})
			if err != nil {
				return err
			}
			if ts[0] != nil {
				v.counted() // archived: its events stay in the log
				return nil
			}
		}
		v.counted()
		v.report(ctx, m, sid, kind, raw, stored, exp)
		return nil
	}
	return nil // moving: compared again in the next cycle
}

// indexed makes sure that a stored session that ended, found exact
// (raw) below the checkpoint, is in its partition's closed sessions, and
// indexes it again if not. The fold's deadlines step writes the entry
// before the checkpoint that passes the snapshot, so one missing there was
// lost (a defect, or a key removed by hand): without it the archive's
// sweep would never take the session. The snapshot is read again first:
// one the sweep removed meanwhile (it removes the entry after the
// snapshot) is left alone.
func (v *verifier) indexed(ctx context.Context, m *partModel, sid string, raw []byte, exp *snapshot.Snapshot) error {
	ok, err := v.store.IsClosed(ctx, v.topic, m.id, sid)
	if err != nil || ok {
		return err
	}
	raws, err := v.store.RawSnapshots(ctx, []string{sid})
	if err != nil {
		return err
	}
	if !bytes.Equal(raws[0], raw) || !v.owns(m.id) {
		return nil
	}
	if err := v.arm(ctx, exp); err != nil {
		return err
	}
	v.reindexed.Add(1)
	v.log.Warn(ReindexedLogged, "session", sid, "partition", m.id, "version", exp.Version)
	return nil
}

// ReindexedLogged is the message the verifier logs (at Warn) for each
// stored session that ended and that it found missing from its
// partition's closed sessions, and indexed again (verifier.indexed).
const ReindexedLogged = "a closed session was not in its partition's closed sessions: indexed again, for the archive's sweep"

// arm writes a repaired snapshot's deadline entry, as the fold's
// deadlines step does after the snapshots (armDeadlines): its earliest
// deadline, and, for a session that ended, its entry in the partition's
// closed sessions, without which the archive's sweep never finds it
// (a snapshot deleted by hand loses its entry to the next sweep, which
// finds no snapshot for it). Fenced by version and by the partition's
// epoch: a newer write or owner wins.
func (v *verifier) arm(ctx context.Context, s *snapshot.Snapshot) error {
	_, err := v.rm.ArmDeadlines(ctx, v.topic, map[int32][]projstore.ArmedDeadline{
		s.Position.Partition: {armedOf(s, v.timeouts, v.forcedGrace)}})
	var no *projstore.NotOwnerError
	if errors.As(err, &no) {
		return nil // the newer owner folds the session, and arms it
	}
	if err != nil {
		return fmt.Errorf("arming its deadlines: %w", err)
	}
	return nil
}

func (v *verifier) counted() {
	v.checked.Add(1)
	v.obs.VerifyChecked(1)
	v.pmu.Lock()
	v.pending.Checked++
	v.pmu.Unlock()
}

// classify compares the stored bytes raw (stored, when they decode) with
// the fold exp, under checkpoint c; again says that the projector may
// not have stored the session's last event yet.
func (v *verifier) classify(m *partModel, c int64, raw []byte, stored, exp *snapshot.Snapshot) (kind string, again bool) {
	switch {
	case raw == nil && exp == nil:
		return "", false
	case raw == nil:
		if exp.Position.Offset >= c {
			return "", true
		}
		return MismatchMissing, false
	case exp == nil:
		if stored != nil && stored.FirstOffset < m.start {
			return "unverifiable", false
		}
		if stored == nil {
			return MismatchCorrupt, false // bytes that are no snapshot of this partition
		}
		return MismatchExtra, false
	case stored == nil:
		return MismatchCorrupt, false
	case stored.Position == exp.Position:
		if sameBytes(raw, stored, exp) {
			return "", false
		}
		return MismatchCorrupt, false
	case stored.Position.Less(exp.Position):
		if exp.Position.Offset >= c {
			return "", true
		}
		return MismatchStale, false
	default:
		return MismatchCorrupt, false // a position the session's events do not end at
	}
}

// sameBytes compares the stored bytes with the fold's encoding; bytes
// written in an older format are compared as decoded and encoded again.
func sameBytes(raw []byte, stored, exp *snapshot.Snapshot) bool {
	want := exp.AppendBinary(nil)
	if bytes.Equal(raw, want) {
		return true
	}
	if len(raw) > 0 && raw[0] != snapshot.FormatBinary {
		return bytes.Equal(stored.AppendBinary(nil), want)
	}
	return false
}

// repairedSession is a session the verifier repaired, on its partition.
type repairedSession struct {
	partition int32
	id        string
}

// takeRepaired returns the sessions repaired since its last call, whose
// copies the fold drops (folder.dropArchived): the fold may hold the
// wrong snapshot a repair replaced in Redis, and would fold the next
// event on it and write it back over the repair. Nil on a nil verifier.
func (v *verifier) takeRepaired() []repairedSession {
	if v == nil {
		return nil
	}
	v.fmu.Lock()
	defer v.fmu.Unlock()
	out := v.fixed
	v.fixed = nil
	return out
}

// report counts, logs and (with Config.VerifyRepair) repairs a mismatch.
func (v *verifier) report(ctx context.Context, m *partModel, sid, kind string, raw []byte, stored, exp *snapshot.Snapshot) {
	mm := wire.VerifyMismatch{SessionID: sid, Kind: kind, At: time.Now().UTC()}
	if stored != nil {
		ver := stored.Version
		mm.StoredVersion, mm.StoredDigest = &ver, hex.EncodeToString(stored.Digest[:])
	}
	if exp != nil {
		ver := exp.Version
		mm.FoldedVersion, mm.FoldedDigest = &ver, hex.EncodeToString(exp.Digest[:])
	}
	if v.paused(m.id) {
		return // the partition stalled meanwhile: nothing to judge against
	}
	if i := kindIndex(kind); i >= 0 {
		v.mismatches[i].Add(1)
	}
	v.obs.VerifyMismatch(kind)
	if v.repair && exp != nil && v.owns(m.id) {
		e := snapshot.NewEntry(exp)
		e.Epoch = v.store.Epoch(m.id)
		ok, err := v.store.Replace(ctx, e)
		if err == nil && ok {
			err = v.arm(ctx, exp)
		}
		if err != nil {
			v.log.Warn("repairing a session from the log", "session", sid, "kind", kind, "err", err)
		}
		mm.Repaired = ok
	}
	if mm.Repaired {
		v.repaired.Add(1)
		v.obs.VerifyRepaired(kind)
		v.fmu.Lock()
		v.fixed = append(v.fixed, repairedSession{partition: m.id, id: sid})
		v.fmu.Unlock()
	}
	v.log.Warn(MismatchLogged, "session", sid, "kind", kind, "partition", m.id,
		"stored_digest", mm.StoredDigest, "folded_digest", mm.FoldedDigest, "stored_bytes", len(raw), "repaired", mm.Repaired)
	v.pmu.Lock()
	if v.pending.Mismatches == nil {
		v.pending.Mismatches = map[string]int64{}
	}
	v.pending.Mismatches[kind]++
	if mm.Repaired {
		v.pending.Repaired++
	}
	v.pending.Recent = append(v.pending.Recent, mm)
	if len(v.pending.Recent) > redislayout.RecentMismatches {
		v.pending.Recent = v.pending.Recent[1:]
	}
	v.pmu.Unlock()
}
