package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Restoring a lost partition from the snapshot changelog
// (docs/exactly-once.md, "The snapshot changelog"):
// wherever the projector would fold a partition from offset 0 (rebuild,
// a partition with no checkpoint, a rebuild resumed at 0), it reads the
// partition's changelog to its end instead, keeps the latest record of
// each key (changelog.Latest), writes the snapshots back (fenced, in
// chunks), arms their deadlines and links the children to their parents,
// stores the changelog's checkpoint as the partition's, and folds the
// events topic from there.
//
// Why that equals an uninterrupted fold: every snapshot in the changelog
// was produced after the records of its batch (change feed, derived
// events, dead letters) were acknowledged, and only for a partition whose
// read model Redis still held (flusher.produceChangelog); a checkpoint
// record was produced only after every snapshot it covers was
// acknowledged. So the kept snapshot of each session reflects at least
// every event of it below the checkpoint, and whatever it reflects beyond
// was fully written out: the fold from the checkpoint skips those events
// (the skip rule) and folds the rest, as the uninterrupted fold did. The
// outbox, gone with Redis, is not needed for what is skipped, since its
// records were acknowledged.
//
// Durability: a restore runs only with the partition's checkpoint reset to
// 0 with the rebuild mark and its snapshots deleted (the rebuild's order,
// ResetCheckpoint first), so a crash anywhere in it (crashRestoreWritten:
// after the snapshots, deadlines and children are written, before the
// checkpoint) leaves checkpoint 0 with the mark: the next owner deletes
// the partition again and restores again. The checkpoint is written
// expecting the reset (a Redis lost meanwhile refuses it, and the restore
// starts over) and read back; once it is stored (crashRestoreCheckpoint),
// a restart folds from it like from any checkpoint, the mark staying
// until the fold reaches the log's end as it was when the rebuild began.

// restoreChunk is how many snapshots a restore writes per PutBatch.
const restoreChunk = 1000

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

// restorer restores partitions from the snapshot changelog: it reads a
// partition's changelog (planRestore), writes what it kept back to the
// store (writeRestore), stores the changelog's checkpoint as the
// partition's (restoreAfterReset), and restores the partitions a start
// finds at checkpoint 0 (restoreOnStart). It is built by Run with the
// client (connect) and holds no partition of its own: the stalls it
// reports while restoring on start are the state's, under st.mu.
type restorer struct {
	cfg Config
	// changelog is the changelog's topic, "" when it is off
	// (Config.ChangelogEnabled).
	changelog string
	adm       *kadm.Client
	store     Store
	auth      *systemAuth // checks the changelog's records
	st        *state
	obs       Observer
	log       *slog.Logger
	crash     *crashPoints
	restores  *atomic.Int64 // partitions restored, for tests and benchmarks
}

func newRestorer(cfg Config, changelog string, adm *kadm.Client, store Store, auth *systemAuth, st *state,
	obs Observer, log *slog.Logger, crash *crashPoints, restores *atomic.Int64) *restorer {
	return &restorer{cfg: cfg, changelog: changelog, adm: adm, store: store, auth: auth, st: st,
		obs: obs, log: log, crash: crash, restores: restores}
}

// restoreBounds is what a restore plan needs from Kafka besides the
// changelog's records: the events topic's start and end offsets and the
// changelog's end offsets, listed once for all the partitions a start
// restores.
type restoreBounds struct {
	starts, ends kadm.ListedOffsets
}

// listRestoreBounds lists the offsets planRestore reads (two requests,
// whatever the number of partitions).
func (rs *restorer) listRestoreBounds(ctx context.Context) (restoreBounds, error) {
	var b restoreBounds
	var err error
	if b.starts, err = rs.adm.ListStartOffsets(ctx, rs.cfg.Topic); err != nil {
		return b, err
	}
	b.ends, err = rs.adm.ListEndOffsets(ctx, rs.cfg.Topic, rs.changelog)
	return b, err
}

// planRestore reads partition id's changelog to its end (as it was when
// the bounds were listed) and takes the events partition's bounds from b.
// It returns nil when the changelog is off, or when a record it cannot use
// makes a fold from 0 the exact choice (decide: the log still holds all
// of the partition); a plan with stall set when neither is exact.
func (rs *restorer) planRestore(ctx context.Context, id int32, b restoreBounds) (*restorePlan, error) {
	if rs.changelog == "" {
		return nil, nil
	}
	topic := rs.changelog
	starts, ends := b.starts, b.ends
	pl := &restorePlan{}
	if s, ok := starts.Lookup(rs.cfg.Topic, id); ok && s.Err == nil {
		pl.eventStart = s.Offset
	}
	e, ok := ends.Lookup(rs.cfg.Topic, id)
	if !ok || e.Err != nil {
		return nil, fmt.Errorf("the events topic's end offset of partition %d: %v", id, e.Err)
	}
	pl.eventEnd = e.Offset
	ce, ok := ends.Lookup(topic, id)
	if !ok || ce.Err != nil {
		return nil, fmt.Errorf("the changelog's end offset of partition %d: %v", id, ce.Err)
	}
	if ce.Offset > 0 {
		start := time.Now()
		err := rs.readChangelog(ctx, id, ce.Offset, int(len(ends[rs.cfg.Topic])), pl)
		if err == nil && pl.latest.HasCheckpoint {
			err = pl.prepare(rs.cfg.Timeouts, rs.cfg.ForcedGrace)
		}
		pl.read = time.Since(start)
		if err != nil {
			return nil, err
		}
	}
	if len(pl.bad) > 0 {
		for k, u := range pl.bad {
			rs.log.Error("a changelog record the restore cannot use", "partition", id, "key", cut(k), "offset", u.offset, "err", u.err)
		}
		if pl.decide(topic, id) {
			rs.log.Warn("folding the partition from the start of the log instead (the log still holds all of it)", "partition", id)
			return nil, nil
		}
		if pl.stall != "" {
			return pl, nil
		}
	}
	if !pl.latest.HasCheckpoint {
		return pl, nil
	}
	cp := pl.latest.Checkpoint.Offset
	switch {
	case cp > pl.eventEnd:
		pl.stall = fmt.Sprintf("the changelog's checkpoint %d is beyond the end of the log (%d): the topic was recreated or truncated, so the changelog belongs to another log; delete topic %s (the projector creates it again) or set CORREX_CHANGELOG=false, then restart",
			cp, pl.eventEnd, topic)
	case cp < pl.eventStart:
		pl.gap = fmt.Sprintf("restored from the changelog's checkpoint %d, older than the log's start %d: events %d to %d are gone (retention), and what they did is missing from the read model",
			cp, pl.eventStart, cp, pl.eventStart-1)
	}
	return pl, nil
}

// readChangelog reads partition id of the changelog from its start up to
// end into pl.latest, with a client of its own. A record it cannot use
// (usableRecord) is noted in pl.bad until a usable record of its key
// follows (the one compaction would keep), and the reading goes on.
func (rs *restorer) readChangelog(ctx context.Context, id int32, end int64, n int, pl *restorePlan) error {
	topic := rs.changelog
	keys := rs.auth.loaded()
	part := kafka.Partitioner().ForTopic(rs.cfg.Topic)
	cl, err := kgo.NewClient(append(rs.cfg.Kafka.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {id: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxPartitionBytes(16<<20),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	next, idle := int64(0), 0
	for next < end {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		read := 0
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end {
				return
			}
			read++
			next = r.Offset + 1
			rec, err := usableRecord(r, keys, part, n, pl.eventEnd)
			if err != nil {
				pl.markBad(r, err)
				return
			}
			delete(pl.bad, string(r.Key))
			pl.records++
			pl.latest.Add(rec)
		})
		if read == 0 {
			if idle++; idle == 30 {
				return fmt.Errorf("reading the changelog's partition %d: nothing past offset %d of %d in 30s", id, next, end)
			}
			continue
		}
		idle = 0
	}
	return nil
}

// writeRestore writes the plan's snapshots (fenced, restoreChunk at a
// time), arms their deadlines, and links each open child to its parent
// in the children index (a cascade then reaches it, as after its
// SessionCreated: cascade.go's familyOf), writes the archived sessions'
// tombstones, then reports how many snapshots it wrote.
func (rs *restorer) writeRestore(ctx context.Context, id int32, pl *restorePlan) (int, error) {
	for from := 0; from < len(pl.entries); from += restoreChunk {
		to := min(from+restoreChunk, len(pl.entries))
		if err := retry(ctx, rs.log, "writing the restored snapshots", func(ctx context.Context) error {
			_, err := rs.store.PutBatch(ctx, pl.entries[from:to])
			return err
		}, "partition", id); err != nil {
			return 0, err
		}
		if err := retry(ctx, rs.log, "arming the restored snapshots' deadlines", func(ctx context.Context) error {
			_, err := rs.store.ArmDeadlines(ctx, rs.cfg.Topic, map[int32][]projstore.ArmedDeadline{id: pl.armed[from:to]})
			return err
		}, "partition", id); err != nil {
			return 0, err
		}
	}
	for from := 0; from < len(pl.tombs); from += restoreChunk {
		tombs := pl.tombs[from:min(from+restoreChunk, len(pl.tombs))]
		if err := retry(ctx, rs.log, "writing the archived sessions' tombstones", func(ctx context.Context) error {
			return rs.store.PutTombstones(ctx, id, tombs)
		}, "partition", id); err != nil {
			return 0, err
		}
	}
	for from := 0; from < len(pl.links); from += restoreChunk {
		links := pl.links[from:min(from+restoreChunk, len(pl.links))]
		if err := retry(ctx, rs.log, "linking the restored children to their parents", func(ctx context.Context) error {
			return rs.store.AddChildren(ctx, links)
		}, "partition", id); err != nil {
			return 0, err
		}
	}
	return len(pl.entries), nil
}

// restoreAfterReset restores partition id from pl once its checkpoint is
// reset to 0 with the rebuild mark and its snapshots are deleted: it
// writes the snapshots, then stores the changelog's checkpoint and reads
// it back. again is set when Redis lost the reset meanwhile: the caller
// starts over from the reset. A simulated crash returns errCrashed.
func (rs *restorer) restoreAfterReset(ctx context.Context, id int32, pl *restorePlan) (cp snapshot.Checkpoint, again bool, err error) {
	start := time.Now()
	n, err := rs.writeRestore(ctx, id, pl)
	if err != nil {
		return cp, false, err
	}
	if rs.crash.at(crashRestoreWritten) {
		return cp, false, errCrashed
	}
	want := snapshot.Checkpoint{Partition: id, Offset: pl.latest.Checkpoint.Offset, HighWatermark: pl.latest.Checkpoint.HighWatermark, Expected: true}
	err = retry(ctx, rs.log, "storing the restored partition's checkpoint", func(ctx context.Context) error {
		prev, err := rs.store.SaveCheckpoints(ctx, rs.cfg.Topic, []snapshot.Checkpoint{want}, time.Now())
		if err != nil {
			return err
		}
		if len(prev) == 1 && prev[0].Lost(want) {
			again = true
			return nil
		}
		cps, err := rs.store.Checkpoints(ctx, rs.cfg.Topic)
		if err != nil {
			return err
		}
		got, ok := cps[id]
		if !ok || got.Offset != want.Offset {
			again = true // emptied, or another checkpoint won: start over
			return nil
		}
		cp = got
		return nil
	})
	if err != nil || again {
		return cp, again, err
	}
	defer func() {
		if rs.crash.at(crashRestoreCheckpoint) {
			cp, err = snapshot.Checkpoint{}, errCrashed
		}
	}()
	rs.log.Info("restored the partition from the changelog", "partition", id, "sessions", n, "records", pl.records,
		"checkpoint", cp.Offset, "read", pl.read, "written", time.Since(start))
	if r, ok := rs.obs.(interface {
		Restored(partition int32, sessions int, gap bool)
	}); ok {
		r.Restored(id, n, pl.gap != "")
	}
	rs.restores.Add(1)
	return cp, false, nil
}

// restoreNote is what a restore on assignment leaves for adjustOffsets to
// report: a stall (a changelog beyond the events log) or the gap alert.
type restoreNote struct{ stall, gap string }

// restoreOnStart restores from the changelog each assigned partition whose
// stored checkpoint is 0 (startCheckpoints stored it for one without, or a
// rebuild was resumed and its deletes are done), when the changelog has a
// checkpoint for it, and updates cps with the restored checkpoints. A
// partition that had none is first reset with the rebuild mark (the
// events log's end), its snapshots deleted and the reset read back, as a
// rebuild does, so that a crash in the restore restarts it. An error makes
// the caller read the start again.
//
// It goes in three steps: the changelogs are read side by side
// (restoreParallel at a time: mostly round trips to Kafka); then every
// partition to restore is reset and emptied, one after another, before any
// is written (a partition's delete reads the header of every stored
// snapshot, so deleting after another partition's restore would read all
// of that one's too); then the partitions are written side by side.
func (rs *restorer) restoreOnStart(ctx context.Context, ids []int32, cps map[int32]snapshot.Checkpoint) (map[int32]restoreNote, error) {
	if rs.changelog == "" {
		return nil, nil
	}
	var todo []int32
	for _, id := range ids {
		if cps[id].Offset == 0 {
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	bounds, err := rs.listRestoreBounds(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	plans := make(map[int32]*restorePlan, len(todo))
	if err := sideBySide(todo, func(id int32) error {
		pl, err := rs.planRestore(ctx, id, bounds)
		mu.Lock()
		plans[id] = pl
		mu.Unlock()
		return err
	}); err != nil {
		return nil, err
	}
	notes := map[int32]restoreNote{}
	var restore []int32
	for _, id := range todo {
		switch pl := plans[id]; {
		case pl != nil && pl.stall != "":
			notes[id] = restoreNote{stall: pl.stall}
		case pl.usable():
			restore = append(restore, id)
		}
	}
	defer func() {
		rs.st.mu.Lock()
		for _, id := range restore {
			rs.st.stalls.restored(id)
		}
		rs.st.mu.Unlock()
	}()
	rs.st.mu.Lock()
	for _, id := range restore {
		pl := plans[id]
		rs.st.stalls.restore(id, fmt.Sprintf("%d sessions, to checkpoint %d", len(pl.entries), pl.latest.Checkpoint.Offset))
	}
	rs.st.mu.Unlock()
	for _, id := range restore {
		if cps[id].RebuildUntil == 0 {
			if err := rs.resetForRestore(ctx, id, plans[id]); err != nil {
				return nil, err
			}
		}
	}
	if err := sideBySide(restore, func(id int32) error {
		pl := plans[id]
		cp, again, err := rs.restoreAfterReset(ctx, id, pl)
		if errors.Is(err, errCrashed) {
			return final(err)
		}
		if err != nil {
			return err
		}
		if again {
			return fmt.Errorf("the checkpoint of partition %d changed during its restore (Redis emptied or gone back in time): reading it again", id)
		}
		mu.Lock()
		defer mu.Unlock()
		cps[id] = cp
		if pl.gap != "" {
			notes[id] = restoreNote{gap: pl.gap}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return notes, nil
}

// sideBySide runs fn for each id, restoreParallel at a time, and joins
// their errors; a simulated crash among them is returned alone (final).
func sideBySide(ids []int32, fn func(id int32) error) error {
	errs := make(chan error, len(ids))
	sem := make(chan struct{}, restoreParallel)
	for _, id := range ids {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- fn(id)
		}()
	}
	var all []error
	crashed := false
	for range ids {
		if err := <-errs; err != nil {
			crashed = crashed || errors.Is(err, errCrashed)
			all = append(all, err)
		}
	}
	if crashed {
		return final(errCrashed)
	}
	return errors.Join(all...)
}

// restoreParallel is how many partitions a start restores at once.
const restoreParallel = 8

// resetForRestore resets partition id's checkpoint to 0 with the rebuild
// mark (the events log's end as pl read it), deletes its snapshots and
// deadlines, and reads the reset back, as a rebuild does.
func (rs *restorer) resetForRestore(ctx context.Context, id int32, pl *restorePlan) error {
	until := max(pl.eventEnd, 1)
	if err := rs.store.ResetCheckpoint(ctx, rs.cfg.Topic, id, until, time.Now()); err != nil {
		return err
	}
	if rs.crash.at(crashRebuildReset) {
		return final(errCrashed)
	}
	if _, err := rs.store.DeletePartition(ctx, id); err != nil {
		return err
	}
	if err := rs.store.DeleteDeadlines(ctx, rs.cfg.Topic, id); err != nil {
		return err
	}
	if rs.crash.at(crashRebuildDeleted) {
		return final(errCrashed)
	}
	now, err := rs.store.Checkpoints(ctx, rs.cfg.Topic)
	if err != nil {
		return err
	}
	if got, ok := now[id]; !ok || got.Offset != 0 || got.RebuildUntil != until {
		return fmt.Errorf("the checkpoint of partition %d changed while its snapshots were deleted before its restore: reading it again", id)
	}
	return nil
}
