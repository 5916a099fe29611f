package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"
)

// flusher writes batches: it owns the flush goroutine (run), the batch in
// flight, and the order of a write's steps (write). build, start, collect,
// due and finish are called by the fold goroutine, under Projector.mu; the
// flush goroutine touches only the job it was handed, until it closes
// job.done. At most one batch is in flight.
type flusher struct {
	store   *snapshot.Store
	obs     Observer
	log     *slog.Logger
	topic   string
	crash   *crashPoints
	cfg     Config
	fire    *firer   // woken with each partition's next deadline after a write
	derived *derived // the change feed and the derived events

	cl   *kgo.Client     // set by Run before anything is written
	ctx  context.Context // the flush context, set by Run; ends after the final flush
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
	repl *snapshot.ReplicationMark
}

func newFlusher(cfg Config, store *snapshot.Store, obs Observer, log *slog.Logger, crash *crashPoints, d *derived) *flusher {
	return &flusher{store: store, obs: obs, log: log, topic: cfg.Topic, crash: crash, cfg: cfg, derived: d, jobs: make(chan *flushJob, 1)}
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
	deadlines   map[int32][]snapshot.ArmedDeadline
}

// due decides whether to start a flush now, given the dirty entries,
// whether a partition advanced since the last batch, and whether the
// projector is catching up (Projector.catchingUp).
//
// Caught up, it is a group commit: a batch starts as soon as the poll loop
// has nothing more to fold and no batch is in flight; what is folded while
// one is in flight waits for it and goes in the next batch, which starts
// as soon as the poll loop sees the batch in flight done (the poll returns
// early for that, see Projector.loop). Catching up, batches are large:
// FlushSize dirty snapshots, or MaxFlushInterval after the previous batch.
func (f *flusher) due(dirty int, progress, catchingUp bool) bool {
	if dirty >= f.cfg.FlushSize {
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
		job.entries = append(job.entries, snapshot.NewEntry(&en.snap))
		job.refs = append(job.refs, en)
		job.positions = append(job.positions, en.snap.Position)
	}
	job.deadlines = deadlinesOf(job.refs, f.cfg.Timeouts)
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

// write writes a batch: the change feed's outbox, snapshots (fenced), the
// sessions' armed deadlines (fenced by version), the change feed's records,
// then, once the dead-letter and change records produced so far are
// acknowledged (and, on Redis Cluster with RedisWaitReplicas, every
// master's replicas acknowledged the batch's writes), checkpoints, then
// Kafka offsets. Redis errors are retried until ctx ends; the batch is
// idempotent, and is written again from the outbox on when a Cluster
// master changed while it was written (replicated).
func (f *flusher) write(ctx context.Context, job *flushJob) (err error) {
	if job.ctx != nil { // the flush span, under the flusher's cancellation
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(job.ctx))
	}
	start := time.Now()
	defer func() { f.obs.Flushed(ctx, job.result, time.Since(start), err) }()
	if f.crash.at(crashBeforePut) {
		return errCrashed
	}
	// The change feed's records are encoded while the snapshots are
	// written (see changeFeed), once: a batch written again produces the
	// same records again.
	changes := f.derived.encode(job)
	var recs []*kgo.Record
	encoded := false
	records := func() []*kgo.Record {
		if !encoded {
			recs, encoded = changes(), true
		}
		return recs
	}
	for round := 0; ; round++ {
		mark, err := f.markReplication(ctx)
		if err != nil {
			return err
		}
		// The change feed's outcomes are kept in Redis before the
		// snapshots they derive from.
		if err := f.derived.persist(ctx, f.store, f.topic, job); err != nil {
			return err // the encoding ends on its own
		}
		if len(job.entries) > 0 {
			if err := retry(ctx, f.log, "writing snapshots", func(ctx context.Context) error {
				res, err := f.store.PutBatch(ctx, job.entries)
				if err == nil {
					job.result = res
				}
				return err
			}, "snapshots", len(job.entries)); err != nil {
				return err
			}
		}
		if f.crash.at(crashAfterPut) {
			return errCrashed
		}
		if err := f.armDeadlines(ctx, job); err != nil { // deadlines.go
			return err
		}
		if f.crash.at(crashAfterDeadlines) {
			return errCrashed
		}
		// The change feed and the derived events: after the snapshots,
		// before the checkpoints, which the flush below makes wait for
		// them too.
		if err := f.derived.produce(ctx, f.store, f.cl, job, records); err != nil {
			return err
		}
		if len(job.checkpoints) == 0 {
			return nil // the next batch's wait covers these writes
		}
		if err := f.cl.Flush(ctx); err != nil {
			return fmt.Errorf("projector: dead-letter and change feed produce: %w", err)
		}
		if errp := f.dlqErr.Load(); errp != nil {
			return fmt.Errorf("projector: dead-letter produce: %w", *errp)
		}
		if err := f.derived.failed(); err != nil {
			return err
		}
		if f.crash.at(crashBeforeCheckpoint) {
			return errCrashed
		}
		again, err := f.replicated(ctx, mark)
		if err != nil {
			return err
		}
		if !again {
			break
		}
		f.log.Warn("a Redis Cluster master changed during the batch: writing it again", "round", round+1)
	}
	if err := retry(ctx, f.log, "writing checkpoints", func(ctx context.Context) error {
		prev, err := f.store.SaveCheckpoints(ctx, f.topic, job.checkpoints, time.Now())
		if err == nil {
			job.prev = prev
		}
		return err
	}); err != nil {
		return err
	}
	if f.crash.at(crashAfterCheckpoint) {
		return errCrashed
	}
	offsets := map[int32]kgo.EpochOffset{}
	for _, cp := range job.checkpoints {
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
func (f *flusher) markReplication(ctx context.Context) (*snapshot.ReplicationMark, error) {
	if f.repl != nil {
		return f.repl, nil
	}
	var mark *snapshot.ReplicationMark
	err := retry(ctx, f.log, "reading the Redis Cluster masters' replication", func(ctx context.Context) (err error) {
		mark, err = f.store.MarkReplication(ctx)
		return err
	})
	return mark, err
}

// replicated waits until every Redis Cluster master's replicas have
// acknowledged the batch's writes (snapshot.Store.WaitReplicated; nothing
// to do on a single server, where PutBatch waited), retrying while too few
// do. It returns again when a master changed since mark (died, its
// replica promoted): writes of the batch may be lost with it, so the batch
// must be written again before a checkpoint passes it.
func (f *flusher) replicated(ctx context.Context, mark *snapshot.ReplicationMark) (again bool, err error) {
	err = retry(ctx, f.log, "waiting for Redis replicas", func(ctx context.Context) error {
		next, err := f.store.WaitReplicated(ctx, mark)
		if errors.Is(err, snapshot.ErrMastersChanged) {
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
// backup): lost is called for the partition, which is rebuilt from the
// earliest offset.
func (f *flusher) finish(job *flushJob, parts map[int32]*partState, lost func(*partState)) {
	for i, en := range job.refs {
		if !en.hasDurable || en.durable.Less(job.positions[i]) {
			en.durable, en.hasDurable = job.positions[i], true
		}
	}
	for i, cp := range job.checkpoints {
		part := parts[cp.Partition]
		if part == nil {
			continue
		}
		if i < len(job.prev) && job.prev[i].Lost(cp) {
			lost(part) // the store wrote nothing over the hole
			continue
		}
		part.stored(cp)
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
