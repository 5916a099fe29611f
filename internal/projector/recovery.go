package projector

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recovery starts the assigned partitions at their checkpoints, repairs
// and restores what a start finds (adjustOffsets), notices a read model
// Redis lost or rolled back (checkCheckpoints, and the flush's
// checkpoint writes through finish) and rebuilds the partition from the
// log or the changelog (rebuild). It applies each written batch (collect,
// finish) and drops the partitions a newer owner took over (dropStale).
// It is built by Run with the client (connect); the partitions it works
// on are the state's, under st.mu, which its callers hold except in
// adjustOffsets, which takes it.
type recovery struct {
	cfg     Config
	store   Store
	obs     Observer
	log     *slog.Logger
	crash   *crashPoints
	st      *state
	cl      *kgo.Client
	adm     *kadm.Client
	flush   *flusher
	fire    *firer
	sweep   *sweeper
	restore *restorer
}

func newRecovery(cfg Config, store Store, obs Observer, log *slog.Logger, crash *crashPoints, st *state,
	cl *kgo.Client, adm *kadm.Client, flush *flusher, fire *firer, sweep *sweeper, restore *restorer) *recovery {
	return &recovery{cfg: cfg, store: store, obs: obs, log: log, crash: crash, st: st,
		cl: cl, adm: adm, flush: flush, fire: fire, sweep: sweep, restore: restore}
}

// adjustOffsets starts every assigned partition at its Redis checkpoint
// (the next offset to fold); the group's callback calls it once Run has
// ensured the topics (topicsReady). A partition with none starts at the earliest offset,
// with checkpoint 0 stored first (startCheckpoints). A checkpoint beyond
// the end of the log means the read model belongs to another log (the
// topic was deleted and recreated, or truncated): folding from there would
// silently skip events, so the partition is paused and /readyz reports it
// until an operator runs `projector reset`.
func (rc *recovery) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := offsets[rc.cfg.Topic]
	if len(parts) == 0 {
		return offsets, nil
	}
	var ids []int32
	for id := range parts {
		ids = append(ids, id)
	}
	// Take the partitions over before anything of theirs is written (a
	// restore, a rebuild's deletes): from now on a previous owner that
	// still writes is refused (projstore's epoch.go).
	_, generation := rc.cl.GroupMetadata()
	for _, id := range ids {
		if err := retry(ctx, rc.log, "claiming an assigned partition", func(ctx context.Context) error {
			_, err := rc.store.Claim(ctx, rc.cfg.Topic, id, generation)
			return err
		}, "partition", id); err != nil {
			return nil, err
		}
	}
	var (
		cps   map[int32]snapshot.Checkpoint
		notes map[int32]restoreNote
		ends  kadm.ListedOffsets
		ob    outboxRead
	)
	if err := retry(ctx, rc.log, "reading checkpoints for assigned partitions", func(ctx context.Context) error {
		var err error
		if cps, notes, err = rc.startCheckpoints(ctx, ids); err != nil {
			return err
		}
		if ends, err = rc.adm.ListEndOffsets(ctx, rc.cfg.Topic); err != nil {
			return err
		}
		ob, err = rc.st.derived.read(ctx, rc.store, rc.cfg.Topic, replayStarts(ids, cps, ends, rc.cfg.Topic))
		return err
	}); err != nil {
		return nil, err
	}
	rc.st.mu.Lock()
	defer rc.st.mu.Unlock()
	rc.st.derived.load(ob)
	var stall []int32
	for _, id := range ids {
		part := rc.st.parts[id]
		cp := cps[id]
		parts[id] = kgo.NewOffset().At(cp.Offset).WithEpoch(-1)
		if part != nil {
			part.loaded(cp)
			part.rebuildUntil = cp.RebuildUntil
		}
		// Nothing of the partition fires until its fold reaches the end
		// of the log as it is now (firer.go).
		until := cp.Offset
		if end, ok := ends.Lookup(rc.cfg.Topic, id); ok && end.Err == nil {
			until = max(end.Offset, cp.RebuildUntil)
		}
		rc.fire.hold(id, until, cp.Offset)
		if end, ok := ends.Lookup(rc.cfg.Topic, id); ok && end.Err == nil && cp.Offset > end.Offset {
			msg := fmt.Sprintf("checkpoint %d is beyond the end of the log (%d): the topic was recreated or truncated, so the read model belongs to another log; run `projector reset` to clear it and rebuild", cp.Offset, end.Offset)
			rc.st.stalls.stall(id, msg)
			stall = append(stall, id)
			rc.log.Error("partition stalled", "partition", id, "reason", msg)
		} else if n := notes[id]; n.stall != "" {
			rc.st.stalls.stall(id, n.stall)
			stall = append(stall, id)
			rc.log.Error("partition stalled", "partition", id, "reason", n.stall)
		} else {
			rc.st.stalls.clear(id)
		}
		if n := notes[id]; n.gap != "" {
			rc.st.stalls.gap(id, n.gap)
			rc.log.Error("the partition was restored over a gap in the log", "partition", id, "alert", n.gap)
		}
		if cp.RebuildUntil > 0 {
			rc.st.stalls.rebuild(id, fmt.Sprintf("a rebuild to offset %d was under way when the partition changed owner", cp.RebuildUntil))
			rc.log.Warn("resuming the partition's rebuild", "partition", id, "checkpoint", cp.Offset, "until", cp.RebuildUntil)
		}
	}
	if len(stall) > 0 {
		rc.cl.PauseFetchPartitions(map[string][]int32{rc.cfg.Topic: stall})
	}
	return offsets, nil
}

// startCheckpoints returns the stored checkpoint of each assigned
// partition, after two repairs:
//
//   - A partition with none gets checkpoint 0 before anything is folded,
//     so that every checkpoint the projector writes afterwards is
//     expected: Redis emptied (or gone back) before the partition's first
//     checkpoint of its own would otherwise go unnoticed, and snapshots
//     written before the loss would be missing under a checkpoint written
//     after it.
//   - A partition whose checkpoint is still 0 with a rebuild mark was
//     being rebuilt, and its deletes may not have finished (the owner
//     stopped between projstore.Store.ResetCheckpoint and the deletes):
//     they are done again, and the checkpoint is read once more after
//     them (the whole start is read again if it changed meanwhile). Once
//     its checkpoint passed 0 they had finished, since a rebuild folds
//     only after them.
//
// Then each partition at checkpoint 0 (none was stored, or a rebuild
// resumed) is restored from the changelog when it has a checkpoint for
// it (restoreOnStart), instead of being folded from 0.
func (rc *recovery) startCheckpoints(ctx context.Context, ids []int32) (map[int32]snapshot.Checkpoint, map[int32]restoreNote, error) {
	cps, err := rc.repairCheckpoints(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	notes, err := rc.restore.restoreOnStart(ctx, ids, cps)
	return cps, notes, err
}

// repairCheckpoints is startCheckpoints without the restores.
func (rc *recovery) repairCheckpoints(ctx context.Context, ids []int32) (map[int32]snapshot.Checkpoint, error) {
	cps, err := rc.store.Checkpoints(ctx, rc.cfg.Topic)
	if err != nil {
		return nil, err
	}
	var fresh []snapshot.Checkpoint
	for _, id := range ids {
		if _, ok := cps[id]; !ok {
			fresh = append(fresh, snapshot.Checkpoint{Partition: id, HighWatermark: -1})
		}
	}
	if len(fresh) > 0 {
		// Not expected: written only where none is stored, and read back
		// with whatever another writer stored meanwhile.
		if _, err := rc.store.SaveCheckpoints(ctx, rc.cfg.Topic, fresh, time.Now()); err != nil {
			return nil, err
		}
		if cps, err = rc.store.Checkpoints(ctx, rc.cfg.Topic); err != nil {
			return nil, err
		}
	}
	var deleted []snapshot.Checkpoint
	for _, id := range ids {
		cp, ok := cps[id]
		if !ok {
			return nil, fmt.Errorf("the checkpoint of partition %d vanished as it was stored", id)
		}
		if cp.RebuildUntil > 0 && cp.Offset == 0 {
			n, err := rc.store.DeletePartition(ctx, id)
			if err != nil {
				return nil, err
			}
			if err := rc.store.DeleteDeadlines(ctx, rc.cfg.Topic, id); err != nil {
				return nil, err
			}
			rc.log.Info("deleted the snapshots of a partition whose rebuild had not folded anything", "partition", id, "snapshots", n)
			deleted = append(deleted, cp)
		}
	}
	if len(deleted) > 0 {
		// As in rebuild: the reset must still stand after the deletes.
		now, err := rc.store.Checkpoints(ctx, rc.cfg.Topic)
		if err != nil {
			return nil, err
		}
		for _, was := range deleted {
			if cp, ok := now[was.Partition]; !ok || cp.Offset != 0 || cp.RebuildUntil != was.RebuildUntil {
				return nil, fmt.Errorf("the checkpoint of partition %d changed while its snapshots were deleted (Redis emptied or gone back in time): reading it again", was.Partition)
			}
		}
	}
	return cps, nil
}

// replayStarts returns, for the change feed's outbox, where each assigned
// partition starts folding: its checkpoint, or 0 without one. A partition
// whose checkpoint is beyond the log's end (stalled below) has none.
func replayStarts(ids []int32, cps map[int32]snapshot.Checkpoint, ends kadm.ListedOffsets, topic string) map[int32]int64 {
	starts := make(map[int32]int64, len(ids))
	for _, id := range ids {
		cp, ok := cps[id]
		if end, eok := ends.Lookup(topic, id); ok && eok && end.Err == nil && cp.Offset > end.Offset {
			continue
		}
		starts[id] = cp.Offset
	}
	return starts
}

// checkCheckpoints notices a read model that vanished while the projector had
// nothing to write (Redis emptied, or replaced by an empty one): a flush notices
// that when it writes a checkpoint, but an idle partition writes none, so
// its sessions would stay missing until its next event. Every owned partition
// whose stored checkpoint is gone is rebuilt from the earliest offset. A
// stalled partition is left alone: its remedy is `projector reset` and a
// restart. Called between polls with no batch in flight.
func (rc *recovery) checkCheckpoints(ctx context.Context) {
	rc.st.lastCheck = time.Now()
	known := false
	for _, part := range rc.st.parts {
		known = known || part.ckptKnown
	}
	if !known {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second) // the fold waits meanwhile
	defer cancel()
	cps, err := rc.store.Checkpoints(cctx, rc.cfg.Topic)
	if err != nil {
		rc.log.Warn("checking checkpoints", "err", err) // the next check retries
		return
	}
	var lost []*partState
	for _, part := range rc.st.parts {
		if rc.lostAt(part, cps) {
			lost = append(lost, part)
		}
	}
	rc.rebuild(lost...)
}

// lostAt reports whether cps, the stored checkpoints, say that Redis lost
// part's read model: the projector knows a checkpoint is stored and none
// is, or a lower one (Redis went back in time). A stalled partition is
// left alone: its remedy is `projector reset` and a restart.
func (rc *recovery) lostAt(part *partState, cps map[int32]snapshot.Checkpoint) bool {
	cp, ok := cps[part.id]
	return part.ckptKnown && (!ok || cp.Offset < part.lastCkpt) && !rc.st.stalls.stalled(part.id)
}

// checkMisses is called when the fold read no snapshot of some sessions
// (they look new) on partitions ids: if Redis lost those partitions'
// read models (emptied, or gone back in time), a session it forgot would
// be folded as new, and what that fold derives (its changes in the feed, a
// resent SessionCreated applied again as version 1, later events
// rejected) would go out before a checkpoint write noticed the loss. The
// checkpoints are read after the snapshots, so a loss that made a read
// miss shows in them. Each partition lost is rebuilt now, once the batch
// in flight is written: the records of it already polled are not folded
// (rebuiltNow), and the rebuild folds them again from its start.
func (rc *recovery) checkMisses(ctx context.Context, ids []int32) error {
	// Only a partition whose stored checkpoint this projector knows can be
	// found lost (lostAt): a partition folding from its start, before its
	// first checkpoint write, costs no read.
	if !slices.ContainsFunc(ids, func(id int32) bool {
		part := rc.st.parts[id]
		return part != nil && part.ckptKnown && !rc.st.stalls.stalled(id)
	}) {
		return nil
	}
	var cps map[int32]snapshot.Checkpoint
	if err := retry(ctx, rc.log, "reading the checkpoints after snapshots were missing", func(ctx context.Context) (err error) {
		cps, err = rc.store.Checkpoints(ctx, rc.cfg.Topic)
		return err
	}); err != nil {
		return err
	}
	var lost []*partState
	for _, id := range ids {
		if part := rc.st.parts[id]; part != nil && rc.lostAt(part, cps) {
			lost = append(lost, part)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	if err := rc.collect(true); err != nil {
		return err
	}
	var still []*partState
	for _, part := range lost {
		// The batch just written may have found the loss and rebuilt it.
		if rc.st.parts[part.id] == part && !rc.st.rebuiltNow[part.id] {
			still = append(still, part)
		}
	}
	rc.rebuild(still...)
	return nil
}

// rebuild folds partitions again from the earliest offset after Redis lost
// their checkpoints. It drops each partition's cached state and deletes
// the partitions' snapshots from Redis first: after the loss, some may have been
// folded without the history Redis lost (a session evicted from the cache,
// then a duplicate SessionCreated), and the skip rule would otherwise protect
// such a snapshot from the rebuild. Records of the partitions already polled
// are not folded (see rebuiltNow); the replay delivers them again.
//
// The same happens when the stored checkpoint is lower than the one this
// projector knows it stored: Redis went back in time (a replica that lagged
// was promoted, or Redis restarted from an older file), and snapshots
// written after the stored point may be gone with it while this
// projector's cache still holds them.
//
// The rebuild is durable before anything is deleted: each partition's
// checkpoint is first put back to 0 with a mark saying how far the rebuild
// runs (projstore.Store.ResetCheckpoint). A projector killed anywhere in the
// rebuild thus starts again from 0 (not from a checkpoint that Redis kept
// over snapshots the rebuild deleted), deletes the partition again while
// the checkpoint is still 0 (the deletes may not have finished), and
// reports the rebuild until it ends; and the projector knows a stored
// checkpoint (0) from the first record on, so a further loss during the
// rebuild is noticed like any other (see adjustOffsets).
//
// Partitions lost together (Redis emptied loses them all) are rebuilt
// together, in steps, as a start restores them (restoreOnStart): every
// reset, then one delete of all of them (which reads each stored
// snapshot's header once, not once per partition), then the restores
// from the changelog side by side. Deleting a partition after another one
// was restored would read all of that one's snapshots again: one partition
// after another, a rebuild of P partitions read P times the sessions.
func (rc *recovery) rebuild(parts ...*partState) {
	if len(parts) == 0 {
		return
	}
	cps, _ := rc.store.Checkpoints(rc.flush.ctx, rc.cfg.Topic) // for the log only
	for _, part := range parts {
		why := "its checkpoint vanished from Redis"
		if cp, ok := cps[part.id]; ok && cp.Offset < part.lastCkpt {
			why = fmt.Sprintf("Redis went back in time (checkpoint %d, %d was stored)", cp.Offset, part.lastCkpt)
		}
		rc.log.Warn("the partition's read model was lost: rebuilding it from the earliest offset",
			"partition", part.id, "why", why)
		part.rebuildUntil = max(part.hw, part.lastCkpt, part.rebuildUntil, 1)
		rc.st.stalls.rebuild(part.id, why)
		if r, ok := rc.obs.(interface{ Rebuilt(partition int32) }); ok {
			r.Rebuilt(part.id)
		}
		rc.fire.hold(part.id, part.rebuildUntil, 0) // nothing fires until the rebuild is done (firer.go)
		rc.st.cache.dropPartition(part.id)
		rc.st.cache.addPartition(part.id)
		rc.st.derived.drop(part.id)
		// Nothing of the partition is kept from here on: none of its records
		// polled before the rebuild is folded, and it folds again from 0.
		rc.st.rebuiltNow[part.id] = true
		part.next = -1
	}
	pending := parts
	for round := 0; len(pending) > 0; round++ {
		for _, part := range pending {
			if err := retry(rc.flush.ctx, rc.log, "starting the partition's rebuild", func(ctx context.Context) error {
				return rc.store.ResetCheckpoint(ctx, rc.cfg.Topic, part.id, part.rebuildUntil, time.Now())
			}, "partition", part.id); err != nil {
				return // stopping: the stored checkpoint is the reset, or what stood before it
			}
			if rc.crash.at(crashRebuildReset) {
				return
			}
		}
		if !rc.deletePartitions(pending) {
			return // stopping: the next owner deletes again (checkpoint 0, marked)
		}
		if rc.crash.at(crashRebuildDeleted) {
			return
		}
		// The reset must still stand once the deletes are done: Redis
		// emptied, or gone back to a copy from before the reset (a
		// failover to a replica the reset had not reached), would leave
		// no checkpoint, or an older one over the deleted snapshots.
		stands, err := rc.resetsStand(pending)
		if err != nil {
			return // stopping
		}
		var again, restore []*partState
		for _, part := range pending {
			if stands[part.id] {
				restore = append(restore, part)
				continue
			}
			rc.log.Warn("Redis lost the rebuild's reset while the partition's snapshots were deleted: starting the rebuild again",
				"partition", part.id, "round", round+1)
			again = append(again, part)
		}
		done := rc.restoreRebuilt(restore)
		if rc.crash.crashed.Load() {
			return
		}
		for _, part := range restore {
			switch r := done[part.id]; r.outcome {
			case restoreNone:
				part.loaded(snapshot.Checkpoint{Partition: part.id, HighWatermark: -1})
				rc.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{rc.cfg.Topic: {part.id: {Epoch: -1, Offset: 0}}})
			case restoreAgain:
				rc.log.Warn("Redis lost the rebuild's reset during the restore from the changelog: starting the rebuild again",
					"partition", part.id, "round", round+1)
				again = append(again, part)
			case restoreStopped:
				// Stopping, or the partition stalled: left as it is.
			case restoreDone:
				part.loaded(r.cp)
				rc.fire.checkpointed(part.id, r.cp.Offset)
				if r.cp.Offset >= part.rebuildUntil {
					part.rebuildUntil = 0
					rc.st.stalls.done(part.id)
				}
				rc.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{rc.cfg.Topic: {part.id: {Epoch: -1, Offset: r.cp.Offset}}})
			}
		}
		pending = again
	}
}

// What restoreRebuilt did.
type restoreOutcome int

const (
	restoreNone    restoreOutcome = iota // no usable changelog: fold from 0
	restoreDone                          // restored: fold from the returned checkpoint
	restoreAgain                         // Redis lost the reset meanwhile: start the rebuild over
	restoreStopped                       // stopping (or a simulated crash), or the partition is stalled
)

// rebuilt is what restoreRebuilt did for a partition, and the checkpoint
// it restored.
type rebuilt struct {
	cp      snapshot.Checkpoint
	outcome restoreOutcome
}

// restoreRebuilt restores partitions being rebuilt (their checkpoints reset
// and their snapshots deleted) from the changelog, when it has a checkpoint
// for them (restore.go): their changelogs are read side by side, then
// written side by side (restoreParallel at a time). A changelog checkpoint
// beyond the events log stalls the partition like a Redis checkpoint
// beyond it (adjustOffsets); one older than the log's start raises the gap
// alert. The stall marks are set here, on the caller's goroutine, which
// holds st.mu; the goroutines only read and write Kafka and Redis.
func (rc *recovery) restoreRebuilt(parts []*partState) map[int32]rebuilt {
	out := make(map[int32]rebuilt, len(parts))
	if len(parts) == 0 {
		return out
	}
	if rc.flush.changelog == "" {
		for _, part := range parts {
			out[part.id] = rebuilt{outcome: restoreNone}
		}
		return out
	}
	ids := make([]int32, len(parts))
	for i, part := range parts {
		ids[i] = part.id
		out[part.id] = rebuilt{outcome: restoreStopped}
		rc.st.stalls.restore(part.id, "reading the changelog")
	}
	defer func() {
		for _, id := range ids {
			rc.st.stalls.restored(id)
		}
	}()
	var b restoreBounds
	if err := retry(rc.flush.ctx, rc.log, "listing the offsets the restore reads", func(ctx context.Context) (err error) {
		b, err = rc.restore.listRestoreBounds(ctx)
		return err
	}); err != nil {
		return out // stopping
	}
	var mu sync.Mutex
	plans := make(map[int32]*restorePlan, len(ids))
	_ = sideBySide(ids, func(id int32) error {
		return retry(rc.flush.ctx, rc.log, "reading the changelog", func(ctx context.Context) error {
			pl, err := rc.restore.planRestore(ctx, id, b)
			if err == nil {
				mu.Lock()
				plans[id] = pl
				mu.Unlock()
			}
			return err
		}, "partition", id)
	})
	var write []int32
	for _, id := range ids {
		pl, ok := plans[id]
		switch {
		case !ok:
			// Stopping: out says so.
		case pl != nil && pl.stall != "":
			rc.st.stalls.stall(id, pl.stall)
			rc.log.Error("partition stalled", "partition", id, "reason", pl.stall)
			rc.cl.PauseFetchPartitions(map[string][]int32{rc.cfg.Topic: {id}})
		case !pl.usable():
			out[id] = rebuilt{outcome: restoreNone}
		default:
			rc.st.stalls.restore(id, fmt.Sprintf("%d sessions, to checkpoint %d", len(pl.latest.Snapshots), pl.latest.Checkpoint.Offset))
			write = append(write, id)
		}
	}
	_ = sideBySide(write, func(id int32) error {
		cp, again, err := rc.restore.restoreAfterReset(rc.flush.ctx, id, plans[id])
		r := rebuilt{cp: cp, outcome: restoreDone}
		switch {
		case err != nil:
			r.outcome = restoreStopped
		case again:
			r.outcome = restoreAgain
		}
		mu.Lock()
		out[id] = r
		mu.Unlock()
		return err
	})
	for _, id := range write {
		if pl := plans[id]; out[id].outcome == restoreDone && pl.gap != "" {
			rc.st.stalls.gap(id, pl.gap)
			rc.log.Error("the partition was restored over a gap in the log", "partition", id, "alert", pl.gap)
		}
	}
	return out
}

// resetsStand reports, for each of parts, whether its stored checkpoint is
// still the rebuild's reset (offset 0, marked up to part.rebuildUntil),
// reading the checkpoints until Redis answers or the flush context ends.
func (rc *recovery) resetsStand(parts []*partState) (map[int32]bool, error) {
	var cps map[int32]snapshot.Checkpoint
	err := retry(rc.flush.ctx, rc.log, "reading the partition's checkpoint after the rebuild's deletes", func(ctx context.Context) error {
		var err error
		cps, err = rc.store.Checkpoints(ctx, rc.cfg.Topic)
		return err
	})
	if err != nil {
		return nil, err
	}
	stands := make(map[int32]bool, len(parts))
	for _, part := range parts {
		cp, ok := cps[part.id]
		stands[part.id] = ok && cp.Offset == 0 && cp.RebuildUntil == part.rebuildUntil
	}
	return stands, nil
}

// deletePartitions deletes the rebuilt partitions' snapshots (in one
// pass over the buckets) and armed deadlines (the rebuild arms them again
// from the log), retrying until the flush context ends; it reports
// whether it deleted them.
func (rc *recovery) deletePartitions(parts []*partState) bool {
	ids := make([]int32, len(parts))
	for i, part := range parts {
		ids[i] = part.id
	}
	err := retry(rc.flush.ctx, rc.log, "deleting the partitions' snapshots before the rebuild", func(ctx context.Context) error {
		n, err := rc.store.DeletePartition(ctx, ids...)
		if err == nil {
			rc.log.Info("deleted the partitions' snapshots before the rebuild", "partitions", ids, "snapshots", n)
		}
		return err
	}, "partitions", ids)
	if err != nil {
		return false
	}
	for _, id := range ids {
		if err := rc.store.DeleteDeadlines(rc.flush.ctx, rc.cfg.Topic, id); err != nil {
			// Harmless if left: a deadline armed at a version the rebuilt
			// session is past is superseded when it fires.
			rc.log.Warn("deleting the partition's deadlines before the rebuild", "partition", id, "err", err)
		}
	}
	return true
}

// finish records what a written batch made durable (flusher.finish), and
// ends the rebuild of every partition whose checkpoint reached the end of
// the log as it was when its rebuild began.
func (rc *recovery) finish(job *flushJob) {
	rc.flush.finish(job, rc.st.parts, rc.rebuild)
	if len(job.stale) > 0 {
		rc.dropStale(job.stale)
	}
	if len(job.tombstoned) > 0 {
		for i, e := range job.entries {
			if job.tombstoned[e.SessionID] {
				rc.st.cache.forget(job.positions[i].Partition, e.SessionID, job.positions[i])
			}
		}
		rc.log.Warn("snapshots of sessions archived meanwhile were refused: their copies leave the cache", "sessions", len(job.tombstoned))
	}
	for id, part := range rc.st.parts {
		if part.rebuildUntil > 0 && part.ckptKnown && part.lastCkpt >= part.rebuildUntil {
			part.rebuildUntil = 0
			rc.st.stalls.done(id)
			rc.log.Info("the partition is rebuilt", "partition", id, "checkpoint", part.lastCkpt)
		}
	}
}

// dropStale drops the state of partitions whose writes were refused
// because a newer owner took them over (projstore's epoch.go): the group
// gave them to another member while this one could not tell (it stalled);
// the revocation comes when it rejoins. Nothing of theirs is written from
// now on, and their deadlines and archive sweep stop here.
func (rc *recovery) dropStale(stale map[int32]bool) {
	ids := make([]int32, 0, len(stale))
	for id := range stale {
		if rc.st.parts[id] != nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	rc.fire.stop(ids...)
	rc.sweep.stop(ids...)
	rc.st.drop(ids)
	rc.log.Warn("partitions taken over by a newer owner: dropped", "partitions", ids, "owned", len(rc.st.parts))
}

// collect applies the result of the batch in flight: when wait is set it
// waits for it, else only if it is done.
func (rc *recovery) collect(wait bool) error {
	job, err := rc.flush.collect(wait)
	if rc.flush.inflight == nil {
		rc.st.cache.writing = 0
	}
	if job != nil {
		rc.finish(job)
	}
	return err
}
