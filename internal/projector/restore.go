package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
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
	defer rs.st.restored(restore)
	why := make(map[int32]string, len(restore))
	for _, id := range restore {
		pl := plans[id]
		why[id] = fmt.Sprintf("%d sessions, to checkpoint %d", len(pl.entries), pl.latest.Checkpoint.Offset)
	}
	rs.st.restoring(why)
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
