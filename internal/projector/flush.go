package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"
)

// flusher writes batches: it owns the flush goroutine (run), the batch in
// flight, and the write of a batch (write, which takes writeSteps in
// order). build, start, collect, due and finish are called by the fold
// goroutine, under state.mu; the flush goroutine touches only the job
// it was handed, until it closes job.done. At most one batch is in flight.
type flusher struct {
	store   Store
	obs     Observer
	log     *slog.Logger
	topic   string
	crash   *crashPoints
	cfg     Config
	fire    *firer   // woken with each partition's next deadline after a write
	derived *derived // the change feed and the derived events
	// auth signs the derived events and the changelog's records.
	auth *systemAuth
	// changelog is the snapshot changelog's topic, "" when it is off
	// (Config.ChangelogEnabled).
	changelog string

	cl   *kgo.Client     // the projector's client, which the flusher lives no longer than
	ctx  context.Context // the flush context; ends after the final flush
	jobs chan *flushJob
	// dlqErr is the first dead-letter produce error that retrying cannot
	// cure, set from the Kafka client's produce callback: the next write
	// fails before its checkpoints.
	dlqErr atomic.Pointer[error]

	inflight *flushJob
	last     time.Time // when the latest batch was built
	// repl is where the Redis Cluster masters stood when the last batch's
	// writes were acknowledged by their replicas (RedisWaitReplicas), the
	// mark the next batch's writes are checked against; nil when unknown,
	// and always on a single server. It belongs to whoever writes: the
	// flush goroutine, then the final flush after it.
	repl *projstore.ReplicationMark
}

// newFlusher returns the flusher of a projector's Kafka client cl (Run
// builds it once the client exists), writing under ctx and waking fire
// after each write.
func newFlusher(cfg Config, store Store, obs Observer, log *slog.Logger, crash *crashPoints, d *derived,
	fire *firer, cl *kgo.Client, ctx context.Context) *flusher {
	f := &flusher{store: store, obs: obs, log: log, topic: cfg.Topic, crash: crash, cfg: cfg, fire: fire, derived: d,
		cl: cl, ctx: ctx, jobs: make(chan *flushJob, 1)}
	if cfg.ChangelogEnabled {
		f.changelog = changelog.Topic(cfg.Topic)
	}
	return f
}

// flushJob is one batch: encoded snapshots, the change feed's records (in
// fold order per partition), and the checkpoints they allow.
type flushJob struct {
	entries     []snapshot.Entry
	refs        []*entry
	positions   []snapshot.Position
	changes     []feedBatch
	checkpoints []snapshot.Checkpoint
	prev        []snapshot.PriorCheckpoint
	result      snapshot.PutResult
	err         error
	done        chan struct{}
	ctx         context.Context // from Observer.FlushStarted: carries the flush span
	deadlines   map[int32][]projstore.ArmedDeadline
	// lost holds the partitions found lost in Redis before the batch's
	// records were produced, and again before its changelog (checkHeld:
	// their stored checkpoint gone or lower than this projector's): their
	// change feed records, derived events and cascades are not produced,
	// their snapshots not produced to the changelog, nor their checkpoints
	// written (flusher.writeCheckpoints reports them lost).
	lost map[int32]bool
	// stale holds the partitions whose writes were refused because a
	// newer owner took them over (projstore's epoch.go): nothing more of
	// theirs is written, produced to the changelog or checkpointed, and
	// the projector drops them (recovery.finish).
	stale map[int32]bool
	// tombstoned holds the sessions whose snapshots Redis refused because
	// they were archived meanwhile (PutResult.TombstonedIDs): the fold
	// held a copy of one while the sweep removed it. What was folded on
	// it is not produced to the changelog, where a restore would take it
	// for the session's latest snapshot, past its archived record, and
	// bring the session back; and the copy leaves the cache
	// (recovery.finish), so that its next event is folded against the
	// tombstone.
	tombstoned map[string]bool
}

// notOwned records partitions of the batch that have a newer owner, and
// drops their deadlines from the batch.
func (job *flushJob) notOwned(ids []int32) {
	for _, id := range ids {
		if job.stale == nil {
			job.stale = map[int32]bool{}
		}
		job.stale[id] = true
		delete(job.deadlines, id)
	}
}

// due decides whether to start a flush now, given the dirty entries,
// whether a partition advanced since the last batch, and whether the
// projector is catching up (catchingUpOn).
//
// Caught up, it is a group commit: a batch starts as soon as the poll loop
// has nothing more to fold and no batch is in flight; what is folded while
// one is in flight waits for it and goes in the next batch, which starts
// as soon as the poll loop sees the batch in flight done (the poll returns
// early for that, see folder.loop). Catching up, batches are large:
// FlushSize dirty snapshots, FlushBytes of their estimated encodings
// (dirtyBytes, cache.markDirty), or MaxFlushInterval after the previous
// batch. The bytes bound a batch whatever its snapshots' sizes: a batch
// holds each snapshot's encoding, its changelog record and its share of
// the Redis commands until it is written, and one in flight besides.
func (f *flusher) due(dirty, dirtyBytes int, progress, catchingUp bool) bool {
	if dirty >= f.cfg.FlushSize || dirtyBytes >= f.cfg.flushBytes() {
		return true
	}
	if dirty == 0 && !progress {
		return false
	}
	if f.inflight != nil {
		return false // only a full batch waits for the one in flight
	}
	return !catchingUp || time.Since(f.last) >= f.cfg.MaxFlushInterval
}

// build encodes the dirty snapshots of the given partitions (all when only
// is nil) and the checkpoints of those partitions.
func (f *flusher) build(c *cache, parts map[int32]*partState, only map[int32]bool) *flushJob {
	job := &flushJob{done: make(chan struct{})}
	for _, en := range c.takeDirty(only) {
		job.entries = append(job.entries, c.encode(en))
		job.refs = append(job.refs, en)
		job.positions = append(job.positions, en.snap.Position)
	}
	job.deadlines = deadlinesOf(job.refs, f.cfg.Timeouts, f.cfg.ForcedGrace)
	ids := make([]int32, 0, len(parts))
	for id := range parts {
		if only == nil || only[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if cp, ok := parts[id].checkpoint(); ok {
			job.checkpoints = append(job.checkpoints, cp)
		}
	}
	f.derived.take(job, parts, only)
	job.ctx = f.obs.FlushStarted(len(job.entries), len(job.checkpoints))
	return job
}

// start hands job to the flush goroutine; the caller collected the
// previous one first.
func (f *flusher) start(job *flushJob) {
	f.last = time.Now()
	if len(job.entries) == 0 && len(job.checkpoints) == 0 && len(job.changes) == 0 {
		return
	}
	f.inflight = job
	f.jobs <- job
}

// collect returns the batch in flight once written: when wait is set it
// waits for it, else it returns nil unless the batch is done. The caller
// applies the result with finish.
func (f *flusher) collect(wait bool) (*flushJob, error) {
	job := f.inflight
	if job == nil {
		return nil, nil
	}
	if !wait {
		select {
		case <-job.done:
		default:
			return nil, nil
		}
	}
	<-job.done
	f.inflight = nil
	if job.err != nil {
		return nil, job.err
	}
	return job, nil
}

// run is the flush goroutine: it writes the batches handed to it until
// jobs is closed.
func (f *flusher) run() {
	for job := range f.jobs {
		job.err = f.write(f.ctx, job)
		close(job.done)
	}
}

// writeStep is one step of a batch's write (writeSteps).
type writeStep int

const (
	stepMark                 writeStep = iota // where the Redis Cluster masters' replication stands
	stepOutbox                                // the change feed's and derived events' outcomes, in the outbox
	stepSnapshots                             // the snapshots, fenced
	stepDeadlines                             // the sessions' armed deadlines, fenced by version
	stepRecords                               // the change feed's records and the derived events, produced
	stepChildren                              // the children index, and the cancellations of a cascade, produced
	stepAcknowledged                          // every record produced so far (dead letters too) acknowledged
	stepChangelog                             // the snapshots, produced to the changelog and acknowledged
	stepReplicas                              // the Redis Cluster masters' replicas acknowledged the batch's writes
	stepCheckpoints                           // the partitions' checkpoints
	stepChangelogCheckpoints                  // the partitions' checkpoint records, produced to the changelog
	stepOffsets                               // the Kafka offsets (for lag tools only)
	numWriteSteps
)

var writeStepNames = [numWriteSteps]string{"mark", "outbox", "snapshots", "deadlines", "records", "children",
	"acknowledged", "changelog", "replicas", "checkpoints", "changelog-checkpoints", "offsets"}

func (s writeStep) String() string {
	if s < 0 || s >= numWriteSteps {
		return "writeStep(?)"
	}
	return writeStepNames[s]
}

// writeSteps is the write of a batch, its steps in the order the package
// doc argues exactly-once effect from ("How exactly-once effect is kept"):
// the outbox before the snapshots it derives from; the snapshots before
// their deadlines, the derived records and the cascade, which all read or
// follow them; the checkpoints only once everything before them is stored
// and acknowledged (and replicated); the Kafka offsets last. TestWriteOrder
// pins it. A simulated crash may happen at the boundaries it names
// (crashBeforePut before the first step).
var writeSteps = [...]struct {
	step writeStep
	run  func(f *flusher, ctx context.Context, w *batchWrite) error
	// crash is the crash point at the boundary after the step, or none.
	crash crashPoint
	// checkpointed: the step is taken only when the batch has checkpoints
	// to write; without any, the write ends before it (the next batch's
	// acknowledgement covers what this one produced).
	checkpointed bool
	// changelog: the step (and its crash point) is taken only when the
	// changelog is on (Config.ChangelogEnabled).
	changelog bool
}{
	{step: stepMark, run: (*flusher).mark},
	{step: stepOutbox, run: (*flusher).writeOutbox},
	{step: stepSnapshots, run: (*flusher).writeSnapshots, crash: crashAfterPut},
	{step: stepDeadlines, run: (*flusher).writeDeadlines, crash: crashAfterDeadlines},
	{step: stepRecords, run: (*flusher).produceRecords},
	{step: stepChildren, run: (*flusher).cascade},
	{step: stepAcknowledged, run: (*flusher).acknowledged, crash: crashBeforeCheckpoint, checkpointed: true},
	{step: stepChangelog, run: (*flusher).produceChangelog, crash: crashAfterChangelog, checkpointed: true, changelog: true},
	{step: stepReplicas, run: (*flusher).waitReplicas, checkpointed: true},
	{step: stepCheckpoints, run: (*flusher).writeCheckpoints, crash: crashAfterCheckpoint, checkpointed: true},
	{step: stepChangelogCheckpoints, run: (*flusher).produceChangelogCheckpoints, crash: crashAfterChangelogCheckpoint,
		checkpointed: true, changelog: true},
	{step: stepOffsets, run: (*flusher).commitOffsets, checkpointed: true},
}

// batchWrite is one write of a batch in progress.
type batchWrite struct {
	job *flushJob
	// records returns the batch's change feed records and derived events,
	// encoded while the snapshots are written (see derived.encode), once,
	// with the partition of each one's source record: a batch written
	// again produces the same records again.
	records func() ([]*kgo.Record, []int32)
	// mark is where the Redis Cluster masters stood before the writes
	// (markReplication).
	mark *projstore.ReplicationMark
	// again is set by the replicas step when a Cluster master changed
	// while the batch was written: it is written again from the first
	// step.
	again bool
}

// write writes a batch, step by step (writeSteps): the change feed's
// outbox, snapshots (fenced), the sessions' armed deadlines (fenced by
// version), the change feed's records and derived events, the children
// index and the cancellations it calls for, then, once the dead-letter and
// derived records produced so far are acknowledged (and, on Redis Cluster
// with RedisWaitReplicas, every master's replicas acknowledged the batch's
// writes), checkpoints, then Kafka offsets. Redis errors are retried until
// ctx ends; the batch is idempotent, and is written again from the first
// step when a Cluster master changed while it was written (replicated).
func (f *flusher) write(ctx context.Context, job *flushJob) (err error) {
	if job.ctx != nil { // the flush span, under the flusher's cancellation
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(job.ctx))
	}
	start := time.Now()
	defer func() { f.obs.Flushed(ctx, job.result, time.Since(start), err) }()
	if f.crash.at(crashBeforePut) {
		return errCrashed
	}
	w := &batchWrite{job: job}
	encoded := f.derived.encode(job) // ends on its own if the records are never asked for
	var recs []*kgo.Record
	var from []int32
	w.records = func() ([]*kgo.Record, []int32) {
		if encoded != nil {
			recs, from = encoded()
			encoded = nil
		}
		return recs, from
	}
	for i, round := 0, 0; i < len(writeSteps); {
		s := &writeSteps[i]
		if s.checkpointed && len(job.checkpoints) == 0 {
			return nil
		}
		if s.changelog && f.changelog == "" {
			i++
			continue
		}
		if err := s.run(f, ctx, w); err != nil {
			return err
		}
		if w.again {
			w.again, i = false, 0
			round++
			f.log.Warn("a Redis Cluster master changed during the batch: writing it again", "round", round)
			continue
		}
		if s.crash != crashNone && f.crash.at(s.crash) {
			return errCrashed
		}
		i++
	}
	return nil
}

// mark notes where the Redis Cluster masters stand before the batch's
// writes (markReplication).
func (f *flusher) mark(ctx context.Context, w *batchWrite) (err error) {
	w.mark, err = f.markReplication(ctx)
	return err
}

// writeOutbox keeps the change feed's and derived events' outcomes in
// Redis before the snapshots they derive from (derived.persist).
func (f *flusher) writeOutbox(ctx context.Context, w *batchWrite) error {
	return f.derived.persist(ctx, f.store, f.topic, w.job)
}

// writeSnapshots stores the batch's snapshots, fenced by position.
func (f *flusher) writeSnapshots(ctx context.Context, w *batchWrite) error {
	job := w.job
	if len(job.entries) == 0 {
		return nil
	}
	return retry(ctx, f.log, "writing snapshots", func(ctx context.Context) error {
		res, err := f.store.PutBatch(ctx, job.entries)
		if err == nil {
			job.result = res
			for _, id := range res.TombstonedIDs {
				if job.tombstoned == nil {
					job.tombstoned = map[string]bool{}
				}
				job.tombstoned[id] = true
			}
			if len(res.NotOwned) > 0 {
				f.log.Warn("a newer owner took partitions over: their snapshots were not written", "partitions", res.NotOwned)
				job.notOwned(res.NotOwned)
			}
		}
		return err
	}, "snapshots", len(job.entries))
}

// writeDeadlines stores the sessions' armed deadlines (armDeadlines,
// deadlines.go).
func (f *flusher) writeDeadlines(ctx context.Context, w *batchWrite) error {
	return f.armDeadlines(ctx, w.job)
}

// produceRecords hands the change feed's records and the derived events
// to the Kafka client (derived.produce): after the snapshots, before the
// checkpoints, which wait for their acknowledgement. Those of a partition
// whose snapshots a newer owner refused (job.stale) are dropped: this
// projector no longer owns it, and what it folded there may be wrong (a
// snapshot read while the new owner rebuilt the partition was missing);
// the new owner folds those events and produces what they derive. So are
// those of a partition whose read model Redis lost or rolled back
// (job.lost, checkHeld: its stored checkpoint gone, or lower than the one
// this projector stored): a snapshot the fold read may have been an older
// one (a failover to a lagging replica), and the partition is rebuilt,
// which produces them again from a fold of what Redis holds. The
// checkpoints are read after every snapshot read of the batch's fold, so
// a loss that made one of them stale shows in them.
func (f *flusher) produceRecords(ctx context.Context, w *batchWrite) error {
	if err := f.checkHeld(ctx, w.job); err != nil {
		return err
	}
	recs, from := w.records()
	if len(w.job.stale) > 0 || len(w.job.lost) > 0 {
		kept := make([]*kgo.Record, 0, len(recs))
		for i, rec := range recs {
			if !w.job.stale[from[i]] && !w.job.lost[from[i]] {
				kept = append(kept, rec)
			}
		}
		recs = kept
	}
	for _, rec := range recs {
		if rec.Topic == f.topic { // a derived event, not a change feed record
			keys, err := f.auth.wait(ctx) // loaded before anything is folded: at once
			if err != nil {
				return err
			}
			keys.Sign(rec)
		}
	}
	f.derived.produce(ctx, f.cl, recs)
	return nil
}

// cascade records the batch's children and hands the cancellations of
// the children of the sessions that ended to the Kafka client
// (derived.cascade), after the snapshots that say they ended.
func (f *flusher) cascade(ctx context.Context, w *batchWrite) error {
	if len(w.job.changes) == 0 {
		return nil // nothing folded: nothing ended, no child born
	}
	keys, err := f.auth.wait(ctx) // loaded before anything is folded: at once
	if err != nil {
		return err
	}
	return f.derived.cascade(ctx, f.store, w.job, func(rec *kgo.Record) {
		keys.Sign(rec)
		f.cl.Produce(ctx, rec, f.derived.produced)
	})
}

// acknowledged waits until every record the Kafka client was given so far
// (the dead letters of the batch's range, its derived records) is
// acknowledged, and fails the write if any could not be produced.
func (f *flusher) acknowledged(ctx context.Context, _ *batchWrite) error {
	if err := f.cl.Flush(ctx); err != nil {
		return fmt.Errorf("projector: dead-letter and change feed produce: %w", err)
	}
	if errp := f.dlqErr.Load(); errp != nil {
		return fmt.Errorf("projector: dead-letter produce: %w", *errp)
	}
	return f.derived.failed()
}

// waitReplicas waits for the Redis Cluster masters' replicas (replicated),
// and asks for the batch to be written again when a master changed.
func (f *flusher) waitReplicas(ctx context.Context, w *batchWrite) (err error) {
	w.again, err = f.replicated(ctx, w.mark)
	return err
}

// writeCheckpoints stores the partitions' checkpoints; job.prev gets what
// they replaced (flusher.finish tells a lost read model from it). A
// partition the changelog step found lost is not written, and reported
// lost (none stored).
func (f *flusher) writeCheckpoints(ctx context.Context, w *batchWrite) error {
	job := w.job
	cps := job.checkpoints
	skip := func(p int32) bool { return job.lost[p] || job.stale[p] }
	if len(job.lost) > 0 || len(job.stale) > 0 {
		cps = nil
		for _, cp := range job.checkpoints {
			if !skip(cp.Partition) {
				cps = append(cps, cp)
			}
		}
	}
	return retry(ctx, f.log, "writing checkpoints", func(ctx context.Context) error {
		prev, err := f.store.SaveCheckpoints(ctx, f.topic, cps, time.Now())
		if err != nil {
			return err
		}
		if len(cps) != len(job.checkpoints) {
			all := make([]snapshot.PriorCheckpoint, len(job.checkpoints))
			for i, j := 0, 0; i < len(job.checkpoints); i++ {
				switch p := job.checkpoints[i].Partition; {
				case job.stale[p]:
					all[i] = snapshot.PriorCheckpoint{NotOwner: true}
				case !job.lost[p]:
					all[i], j = prev[j], j+1
				}
			}
			prev = all
		}
		var stale []int32
		for i, pc := range prev {
			if pc.NotOwner && !job.stale[job.checkpoints[i].Partition] {
				stale = append(stale, job.checkpoints[i].Partition)
			}
		}
		job.notOwned(stale)
		job.prev = prev
		return nil
	})
}

// commitOffsets commits the checkpoints as Kafka offsets, without waiting:
// only lag tools read them.
func (f *flusher) commitOffsets(ctx context.Context, w *batchWrite) error {
	offsets := map[int32]kgo.EpochOffset{}
	for _, cp := range w.job.checkpoints {
		offsets[cp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp.Offset}
		f.obs.Checkpointed(cp)
	}
	f.cl.CommitOffsets(ctx, map[string]map[int32]kgo.EpochOffset{f.topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				f.log.Debug("committing Kafka offsets (for lag tools only)", "err", err)
			}
		})
	return nil
}

// markReplication returns the mark the batch's writes are checked against
// before its checkpoints (Redis Cluster with RedisWaitReplicas): where the
// masters stood after the previous batch's wait, or now. Nil, with no
// round trip, otherwise.
func (f *flusher) markReplication(ctx context.Context) (*projstore.ReplicationMark, error) {
	if f.repl != nil {
		return f.repl, nil
	}
	var mark *projstore.ReplicationMark
	err := retry(ctx, f.log, "reading the Redis Cluster masters' replication", func(ctx context.Context) (err error) {
		mark, err = f.store.MarkReplication(ctx)
		return err
	})
	return mark, err
}

// replicated waits until every Redis Cluster master's replicas have
// acknowledged the batch's writes (projstore.Store.WaitReplicated; nothing
// to do on a single server, where PutBatch waited), retrying while too few
// do. It returns again when a master changed since mark (died, its
// replica promoted): writes of the batch may be lost with it, so the batch
// must be written again before a checkpoint passes it.
func (f *flusher) replicated(ctx context.Context, mark *projstore.ReplicationMark) (again bool, err error) {
	err = retry(ctx, f.log, "waiting for Redis replicas", func(ctx context.Context) error {
		next, err := f.store.WaitReplicated(ctx, mark)
		if errors.Is(err, projstore.ErrMastersChanged) {
			f.repl, again = nil, true
			f.log.Warn("waiting for Redis replicas", "err", err)
			return nil
		}
		if err == nil {
			f.repl = next
		}
		return err
	})
	return again, err
}

// finish records what a written batch made durable: the stored position of
// each snapshot (which makes it evictable) and each partition's stored
// checkpoint. A checkpoint that was expected in Redis and was not there
// means Redis lost the read model (emptied, or restored from an old
// backup): lost is called once with every such partition, which are
// rebuilt from the earliest offset.
func (f *flusher) finish(job *flushJob, parts map[int32]*partState, lost func(...*partState)) {
	for i, en := range job.refs {
		if job.stale[job.positions[i].Partition] {
			continue
		}
		if !en.hasDurable || en.durable.Less(job.positions[i]) {
			en.durable, en.hasDurable = job.positions[i], true
		}
	}
	var gone []*partState
	for i, cp := range job.checkpoints {
		part := parts[cp.Partition]
		if part == nil {
			continue
		}
		if job.stale[cp.Partition] {
			continue // a newer owner has it: the projector drops it
		}
		if i < len(job.prev) && job.prev[i].Lost(cp) {
			gone = append(gone, part) // the store wrote nothing over the hole
			continue
		}
		part.stored(cp)
		f.fire.checkpointed(cp.Partition, cp.Offset)
	}
	if len(gone) > 0 {
		lost(gone...)
	}
}

// inflightDone returns a channel closed when the batch in flight is
// written, or nil when none is in flight.
func (f *flusher) inflightDone() <-chan struct{} {
	if f.inflight == nil {
		return nil
	}
	return f.inflight.done
}
