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

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"
)

// Observer sees what the projector does; telemetry implements it. Folded,
// Skipped, DeadLettered and FlushStarted are called from the fold goroutine,
// Flushed and Checkpointed from the flusher, DeadLetterFailed from the Kafka
// client; none may block.
type Observer interface {
	// Folded is called for every record folded into a snapshot: rec is the
	// record, e the event, s the snapshot after the fold.
	Folded(rec *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, o fsm.Outcome)
	// Skipped is called for a record already reflected in its snapshot.
	Skipped(rec *kgo.Record)
	DeadLettered(rec *kgo.Record, reason string)
	// DeadLetterFailed is called, from the Kafka client's produce callback,
	// when the broker refused a dead letter for what the record is (too
	// large, invalid): the record is skipped without a dead letter.
	DeadLetterFailed(rec *kgo.Record, reason string, err error)
	// FlushStarted is called when a batch is built; the context it returns
	// is used for the batch's Redis calls and given back to Flushed.
	FlushStarted(snapshots, checkpoints int) context.Context
	Flushed(ctx context.Context, res snapshot.PutResult, d time.Duration, err error)
	Checkpointed(cp snapshot.Checkpoint)
}

type nopObserver struct{}

func (nopObserver) Folded(*kgo.Record, *fsm.Event, *snapshot.Snapshot, fsm.Outcome)   {}
func (nopObserver) Skipped(*kgo.Record)                                               {}
func (nopObserver) DeadLettered(*kgo.Record, string)                                  {}
func (nopObserver) DeadLetterFailed(*kgo.Record, string, error)                       {}
func (nopObserver) FlushStarted(int, int) context.Context                             { return context.Background() }
func (nopObserver) Flushed(context.Context, snapshot.PutResult, time.Duration, error) {}
func (nopObserver) Checkpointed(snapshot.Checkpoint)                                  {}

// DLQ reasons, the value of the correx-dlq-reason header.
const (
	ReasonUndecodable        = "undecodable"
	ReasonUnsupportedVersion = "unsupported_version"
	ReasonUnknownEventType   = "unknown_event_type"
	ReasonInvalidEvent       = "invalid_event"
	ReasonKeyMismatch        = "key_mismatch"
	ReasonUnknownSession     = "unknown_session"
	// ReasonWrongPartition: the record is not on its key's partition (see
	// the package doc).
	ReasonWrongPartition = "wrong_partition"
)

// errCrashed ends Run after a test hook simulated a crash.
var errCrashed = errors.New("projector: simulated crash")

// Projector folds one topic's events into snapshots. Create it with New and
// run it with Run; it is single-use.
type Projector struct {
	cfg   Config
	log   *slog.Logger
	store *snapshot.Store
	obs   Observer
	extra []kgo.Opt // client options from the caller (telemetry hooks)

	cl  *kgo.Client
	adm *kadm.Client
	// clientsSet is closed once cl and adm are set: franz-go joins the
	// group as soon as the client exists, so its callbacks can run before
	// NewClient has even returned to Run.
	clientsSet chan struct{}

	mu        sync.Mutex // guards everything below; held while folding and in rebalance callbacks
	parts     map[int32]*partState
	lru       lru
	dirty     []*entry
	progress  bool // a partition advanced since the last flush was built
	inflight  *flushJob
	lastFlush time.Time
	lastCheck time.Time // when the stored checkpoints were last checked
	reducer   fsm.Reducer
	events    []fsm.Event // decode buffer, reused across polls
	stalled   map[int32]string
	pt        partitioning
	// rebuiltNow holds the partitions rebuilt since the current poll's
	// records were fetched: those records are not folded.
	rebuiltNow map[int32]bool

	jobs         chan *flushJob
	flushCtx     context.Context
	stopFlushing context.CancelFunc
	dlqErr       atomic.Pointer[error]
	crashed      atomic.Bool
	assigned     atomic.Int32

	// hook, when set by tests, is called at named points and returns true
	// to simulate a crash there.
	hook func(point string) bool
}

// Option customizes a Projector.
type Option func(*Projector)

// WithObserver sets the observer (telemetry).
func WithObserver(o Observer) Option { return func(p *Projector) { p.obs = o } }

// WithKafkaOpts adds client options (for example telemetry hooks).
func WithKafkaOpts(opts ...kgo.Opt) Option {
	return func(p *Projector) { p.extra = append(p.extra, opts...) }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Projector) { p.log = l } }

// New returns a projector writing to store.
func New(cfg Config, store *snapshot.Store, opts ...Option) *Projector {
	p := &Projector{cfg: cfg, store: store, obs: nopObserver{}, log: slog.Default(),
		parts: map[int32]*partState{}, stalled: map[int32]string{}, rebuiltNow: map[int32]bool{}, jobs: make(chan *flushJob, 1),
		clientsSet: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	return p
}

type partState struct {
	id        int32
	sessions  map[string]*entry
	next      int64 // next offset to fold; -1 before the first record
	hw        int64 // high watermark from the latest fetch, -1 if unknown
	lastCkpt  int64 // the latest checkpoint known to be stored
	ckptKnown bool  // a checkpoint is known to be stored (loaded or written)
	lastHW    int64 // the high watermark stored with lastCkpt
}

// entry is a cached snapshot, or the knowledge that a session has none.
type entry struct {
	id         string
	snap       snapshot.Snapshot
	part       *partState
	dirty      bool              // changed since it was last encoded for a flush
	durable    snapshot.Position // the stored version's position, when hasDurable
	hasDurable bool
	size       int    // estimate() when last counted in lru.bytes
	prev, next *entry // LRU links
}

// evictable reports whether dropping the entry loses nothing: its latest
// state is stored (or there is no session).
func (e *entry) evictable() bool {
	if e.dirty {
		return false
	}
	if !e.snap.Exists() {
		return true
	}
	return e.hasDurable && e.durable == e.snap.Position
}

// Run joins the group and folds until ctx is done, then flushes, writes
// checkpoints and leaves. It returns an error only for a failure it cannot
// recover from (the caller restarts the process; checkpoints make that safe).
func (p *Projector) Run(ctx context.Context) error {
	opts := append(p.cfg.Kafka.Opts(),
		kgo.ConsumeTopics(p.cfg.Topic),
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.RebalanceTimeout(p.cfg.RebalanceTimeout),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.AdjustFetchOffsetsFn(p.adjustOffsets),
		kgo.DefaultProduceTopic(kafka.DLQTopic(p.cfg.Topic)),
		kgo.RecordPartitioner(kafka.Partitioner()),
	)
	if p.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(p.cfg.InstanceID))
	}
	opts = append(opts, p.extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("projector: kafka client: %w", err)
	}
	p.cl, p.adm = cl, kadm.NewClient(cl)
	close(p.clientsSet)
	// The flush context exists before anything can fail: closing the
	// client runs the group's revoke callbacks, which flush under it.
	p.flushCtx, p.stopFlushing = context.WithCancel(context.WithoutCancel(ctx))
	defer p.stopFlushing()
	defer cl.CloseAllowingRebalance()

	if err := p.ensureTopics(ctx); err != nil {
		return err
	}
	flusherDone := make(chan struct{})
	go func() { defer close(flusherDone); p.flusher() }()
	defer func() { close(p.jobs); <-flusherDone }()

	p.lastFlush = time.Now()
	err = p.loop(ctx)
	if errors.Is(err, errCrashed) || p.crashed.Load() {
		return errCrashed
	}
	if err != nil {
		return err
	}
	if err := p.shutdown(); err != nil {
		return err
	}
	if p.cfg.InstanceID != "" && p.cfg.LeaveOnShutdown {
		cl.CloseAllowingRebalance()
		p.leave()
	}
	return nil
}

// leave removes this replica's static membership, so the group rebalances
// now instead of after the session timeout. Closing a client with an
// instance id does not leave (KIP-345); this asks the coordinator directly.
func (p *Projector) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(p.cfg.Kafka.Opts()...)
	if err != nil {
		p.log.Warn("leaving the group", "err", err)
		return
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(p.cfg.Group).InstanceIDs(p.cfg.InstanceID).Reason("shutting down"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		p.log.Warn("leaving the group; partitions move after the session timeout", "err", err)
		return
	}
	p.log.Info("left the group", "instance", p.cfg.InstanceID)
}

func (p *Projector) ensureTopics(ctx context.Context) error {
	for {
		n, err1 := kafka.EnsureTopic(ctx, p.adm, p.cfg.Topic, int32(p.cfg.Partitions))
		_, err2 := kafka.EnsureTopic(ctx, p.adm, kafka.DLQTopic(p.cfg.Topic), int32(p.cfg.Partitions))
		if err := errors.Join(err1, err2); err == nil {
			p.setPartitions(n)
			return nil
		} else {
			p.log.Warn("waiting for Kafka", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (p *Projector) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, p.cfg.FlushInterval)
		fetches := p.cl.PollRecords(pctx, p.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch", "topic", t, "partition", part, "err", err)
			}
		})
		p.mu.Lock()
		clear(p.rebuiltNow)
		err := p.collect(false)
		if err == nil {
			err = p.process(ctx, fetches)
		}
		if err == nil && p.flushDue(fetches.NumRecords() >= p.cfg.MaxPollRecords) {
			err = p.startFlush()
		}
		if err == nil && p.inflight == nil && time.Since(p.lastCheck) >= p.cfg.MaxFlushInterval {
			p.checkCheckpoints(ctx)
		}
		p.evict()
		p.mu.Unlock()
		if err != nil {
			return err
		}
		p.cl.AllowRebalance()
	}
	return nil
}

// shutdown writes everything owned, then leaves the group (Close).
func (p *Projector) shutdown() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.collect(true); err != nil {
		return err
	}
	job := p.buildJob(nil)
	ctx, cancel := context.WithTimeout(p.flushCtx, 30*time.Second)
	defer cancel()
	if err := p.runJob(ctx, job); err != nil {
		return fmt.Errorf("projector: final flush: %w", err)
	}
	p.finish(job)
	p.log.Info("flushed and checkpointed on shutdown", "snapshots", len(job.entries), "partitions", len(job.checkpoints))
	return nil
}

// crash reports whether a test hook asks for a crash at point, and records it.
func (p *Projector) crash(point string) bool {
	if p.hook == nil || p.crashed.Load() {
		return p.crashed.Load()
	}
	if p.hook(point) {
		p.crashed.Store(true)
		p.stopFlushing()
		return true
	}
	return false
}

// process decodes the polled records, reads the snapshots of sessions not in
// the cache in one round trip, and folds the records in order.
func (p *Projector) process(ctx context.Context, fetches kgo.Fetches) error {
	recs := fetches.Records()
	if len(recs) == 0 {
		return nil
	}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if part := p.parts[fp.Partition]; part != nil && fp.HighWatermark >= 0 {
			part.hw = fp.HighWatermark
		}
	})
	if cap(p.events) < len(recs) {
		p.events = make([]fsm.Event, len(recs))
	}
	events := p.events[:len(recs)]
	decodeErr := make([]error, len(recs))
	wrongPart := make([]bool, len(recs))
	type miss struct {
		partition int32
		id        string
	}
	var missing []miss
	var ids []string
	seen := map[miss]bool{}
	for i, r := range recs {
		part := p.parts[r.Partition]
		if part == nil || p.rebuiltNow[r.Partition] {
			continue // revoked between fetch and now (its new owner folds it), or being rebuilt
		}
		if err := fsm.DecodeRecord(r.Value, &events[i]); err != nil {
			decodeErr[i] = err
			continue
		}
		m := miss{r.Partition, events[i].SessionID}
		if string(r.Key) == m.id && !p.onKeyPartition(ctx, r) {
			wrongPart[i] = true
			continue
		}
		if _, ok := part.sessions[m.id]; !ok && !seen[m] && string(r.Key) == m.id {
			seen[m] = true
			missing = append(missing, m)
			ids = append(ids, m.id)
		}
	}
	if len(missing) > 0 {
		snaps, err := p.getMany(ctx, ids)
		if err != nil {
			return err
		}
		for i, m := range missing {
			part := p.parts[m.partition]
			e := &entry{id: m.id, part: part}
			if snaps[i] != nil {
				e.snap = *snaps[i]
				e.durable, e.hasDurable = e.snap.Position, true
			}
			part.sessions[m.id] = e
			p.lru.pushFront(e)
		}
	}
	for i, r := range recs {
		part := p.parts[r.Partition]
		if part == nil || p.rebuiltNow[r.Partition] {
			continue
		}
		if p.crash("fold") {
			return errCrashed
		}
		switch {
		case decodeErr[i] != nil:
			p.deadLetter(r, classify(decodeErr[i]), decodeErr[i].Error())
		case string(r.Key) != events[i].SessionID:
			p.deadLetter(r, ReasonKeyMismatch, fmt.Sprintf("record key %q (%d bytes) is not the event's sessionId %q",
				cutString(string(r.Key), 128), len(r.Key), events[i].SessionID))
		case wrongPart[i]:
			p.deadLetter(r, ReasonWrongPartition, fmt.Sprintf("key %q belongs to partition %d of %d, not %d",
				events[i].SessionID, p.pt.part.Partition(r, int(p.pt.n)), p.pt.n, r.Partition))
		default:
			if err := p.fold(ctx, part, r, &events[i]); err != nil {
				return err
			}
		}
		part.next = r.Offset + 1
		p.progress = true
	}
	clear(events) // drop references to payloads
	return nil
}

func (p *Projector) fold(ctx context.Context, part *partState, r *kgo.Record, e *fsm.Event) error {
	en := part.sessions[e.SessionID]
	if en == nil { // process reads every missing session first; never fold without the stored one
		snaps, err := p.getMany(ctx, []string{e.SessionID})
		if err != nil {
			return err
		}
		en = &entry{id: e.SessionID, part: part}
		if snaps[0] != nil {
			en.snap, en.durable, en.hasDurable = *snaps[0], snaps[0].Position, true
		}
		part.sessions[e.SessionID] = en
		p.lru.pushFront(en)
	}
	p.lru.touch(en)
	o, folded := en.snap.Fold(&p.reducer, e, snapshot.Position{Partition: r.Partition, Offset: r.Offset})
	if !folded {
		p.obs.Skipped(r)
		return nil
	}
	if o.Result == fsm.Orphan {
		p.deadLetter(r, ReasonUnknownSession, "no SessionCreated for session "+e.SessionID)
		return nil
	}
	p.lru.resize(en)
	if !en.dirty {
		en.dirty = true
		p.dirty = append(p.dirty, en)
	}
	p.obs.Folded(r, e, &en.snap, o)
	return nil
}

// classify maps a decoding error to a DLQ reason.
func classify(err error) string {
	if errors.Is(err, fsm.ErrUnsupportedVersion) {
		return ReasonUnsupportedVersion
	}
	var ve *fsm.ValidationError
	if !errors.As(err, &ve) {
		return ReasonUndecodable
	}
	for _, fe := range ve.Errors {
		if fe.Field == "" {
			return ReasonUndecodable
		}
	}
	if len(ve.Errors) == 1 && ve.Errors[0].Field == "type" && strings.HasPrefix(ve.Errors[0].Message, "unknown event type") {
		return ReasonUnknownEventType
	}
	return ReasonInvalidEvent
}

// deadLetter sets r aside: it produces a bounded excerpt of r (see
// deadLetterRecord) to the dead-letter topic. The flush that checkpoints
// past r waits for the produce first (runJob), so a dead letter is written
// at least once; one the broker refuses for what it is (refused) is logged,
// counted and given up, so that no record can stop the partition.
func (p *Projector) deadLetter(r *kgo.Record, reason, detail string) {
	p.obs.DeadLettered(r, reason)
	p.cl.Produce(p.flushCtx, deadLetterRecord(r, reason, detail), func(_ *kgo.Record, err error) {
		switch {
		case err == nil || p.crashed.Load():
		case refused(err):
			p.log.Error("the dead-letter topic refused a record; it is skipped", "source", kafka.Source(r),
				"reason", reason, "err", err)
			p.obs.DeadLetterFailed(r, reason, err)
		default:
			p.dlqErr.CompareAndSwap(nil, &err)
		}
	})
}

// getMany reads snapshots, retrying while Redis is unreachable.
func (p *Projector) getMany(ctx context.Context, ids []string) ([]*snapshot.Snapshot, error) {
	for attempt := 0; ; attempt++ {
		snaps, err := p.store.GetMany(ctx, ids)
		if err == nil {
			return snaps, nil
		}
		if errors.Is(err, snapshot.ErrCorrupt) {
			return nil, err
		}
		p.log.Warn("reading snapshots", "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

func backoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// flushDue decides whether to start a flush now.
func (p *Projector) flushDue(catchingUp bool) bool {
	if len(p.dirty) >= p.cfg.FlushSize {
		return true
	}
	if len(p.dirty) == 0 && !p.progress {
		return false
	}
	if p.inflight != nil {
		return false // a time-triggered flush does not wait for the previous one
	}
	interval := p.cfg.FlushInterval
	if catchingUp {
		interval = p.cfg.MaxFlushInterval
	}
	return time.Since(p.lastFlush) >= interval
}

// flushJob is one batch: encoded snapshots and the checkpoints they allow.
type flushJob struct {
	entries     []snapshot.Entry
	refs        []*entry
	positions   []snapshot.Position
	checkpoints []snapshot.Checkpoint
	prev        []int64
	result      snapshot.PutResult
	err         error
	done        chan struct{}
	ctx         context.Context // from Observer.FlushStarted: carries the flush span
}

// buildJob encodes the dirty snapshots (of the given partitions, or all) and
// the checkpoints of those partitions.
func (p *Projector) buildJob(only map[int32]bool) *flushJob {
	job := &flushJob{done: make(chan struct{})}
	keep := p.dirty[:0]
	for _, en := range p.dirty {
		if en.part == nil || (only != nil && !only[en.part.id]) {
			if en.part != nil {
				keep = append(keep, en)
			}
			continue
		}
		en.dirty = false
		job.entries = append(job.entries, snapshot.NewEntry(&en.snap))
		job.refs = append(job.refs, en)
		job.positions = append(job.positions, en.snap.Position)
	}
	clear(p.dirty[len(keep):])
	p.dirty = keep
	ids := make([]int32, 0, len(p.parts))
	for id := range p.parts {
		if only == nil || only[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		part := p.parts[id]
		if part.next < 0 || (part.ckptKnown && part.next == part.lastCkpt && part.hw == part.lastHW) {
			continue
		}
		job.checkpoints = append(job.checkpoints, snapshot.Checkpoint{Partition: id, Offset: part.next,
			HighWatermark: part.hw, Expected: part.ckptKnown})
	}
	if only == nil {
		p.progress = false
	}
	job.ctx = p.obs.FlushStarted(len(job.entries), len(job.checkpoints))
	return job
}

// startFlush hands a new batch to the flusher, after waiting for the one in
// flight (which is what slows folding down when Redis is slow).
func (p *Projector) startFlush() error {
	if err := p.collect(true); err != nil {
		return err
	}
	job := p.buildJob(nil)
	p.lastFlush = time.Now()
	if len(job.entries) == 0 && len(job.checkpoints) == 0 {
		return nil
	}
	p.inflight = job
	p.jobs <- job
	return nil
}

// collect applies the result of the batch in flight: when wait is set it
// waits for it, else only if it is done.
func (p *Projector) collect(wait bool) error {
	job := p.inflight
	if job == nil {
		return nil
	}
	if !wait {
		select {
		case <-job.done:
		default:
			return nil
		}
	}
	<-job.done
	p.inflight = nil
	if job.err != nil {
		return job.err
	}
	p.finish(job)
	return nil
}

func (p *Projector) flusher() {
	for job := range p.jobs {
		job.err = p.runJob(p.flushCtx, job)
		close(job.done)
	}
}

// runJob writes a batch: snapshots (fenced), then the dead-letter records
// produced so far, then checkpoints, then Kafka offsets. Redis errors are
// retried until ctx ends; the batch is idempotent.
func (p *Projector) runJob(ctx context.Context, job *flushJob) (err error) {
	if job.ctx != nil { // the flush span, under the flusher's cancellation
		ctx = trace.ContextWithSpan(ctx, trace.SpanFromContext(job.ctx))
	}
	start := time.Now()
	defer func() { p.obs.Flushed(ctx, job.result, time.Since(start), err) }()
	if p.crash("before-put") {
		return errCrashed
	}
	if len(job.entries) > 0 {
		for attempt := 0; ; attempt++ {
			res, err := p.store.PutBatch(ctx, job.entries)
			if err == nil {
				job.result = res
				break
			}
			p.log.Warn("writing snapshots", "err", err, "attempt", attempt, "snapshots", len(job.entries))
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
	}
	if p.crash("after-put") {
		return errCrashed
	}
	if len(job.checkpoints) == 0 {
		return nil
	}
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("projector: dead-letter produce: %w", err)
	}
	if errp := p.dlqErr.Load(); errp != nil {
		return fmt.Errorf("projector: dead-letter produce: %w", *errp)
	}
	if p.crash("before-checkpoint") {
		return errCrashed
	}
	for attempt := 0; ; attempt++ {
		prev, err := p.store.SaveCheckpoints(ctx, p.cfg.Topic, job.checkpoints, time.Now())
		if err == nil {
			job.prev = prev
			break
		}
		p.log.Warn("writing checkpoints", "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
	if p.crash("after-checkpoint") {
		return errCrashed
	}
	offsets := map[int32]kgo.EpochOffset{}
	for _, cp := range job.checkpoints {
		offsets[cp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp.Offset}
		p.obs.Checkpointed(cp)
	}
	p.cl.CommitOffsets(ctx, map[string]map[int32]kgo.EpochOffset{p.cfg.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				p.log.Debug("committing Kafka offsets (for lag tools only)", "err", err)
			}
		})
	return nil
}

// finish records what a written batch made durable. A checkpoint that was
// expected in Redis and was not there means Redis lost the read model
// (emptied, or restored from an old backup): the partition is rebuilt from
// the earliest offset.
func (p *Projector) finish(job *flushJob) {
	for i, en := range job.refs {
		if !en.hasDurable || en.durable.Less(job.positions[i]) {
			en.durable, en.hasDurable = job.positions[i], true
		}
	}
	for i, cp := range job.checkpoints {
		part := p.parts[cp.Partition]
		if part == nil {
			continue
		}
		if cp.Expected && i < len(job.prev) && job.prev[i] == -1 {
			p.rebuild(part)
			continue
		}
		part.ckptKnown, part.lastCkpt, part.lastHW = true, cp.Offset, cp.HighWatermark
	}
}

// checkCheckpoints notices a read model that vanished while the projector had
// nothing to write (Redis emptied, or replaced by an empty one): a flush finds
// that out when it writes a checkpoint, but an idle partition writes none, so
// its sessions would stay missing until its next event. Every owned partition
// whose stored checkpoint is gone is rebuilt from the earliest offset. A
// stalled partition is left alone: its remedy is `projector reset` and a
// restart. Called between polls with no batch in flight.
func (p *Projector) checkCheckpoints(ctx context.Context) {
	p.lastCheck = time.Now()
	known := false
	for _, part := range p.parts {
		known = known || part.ckptKnown
	}
	if !known {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second) // the fold waits meanwhile
	defer cancel()
	cps, err := p.store.Checkpoints(cctx, p.cfg.Topic)
	if err != nil {
		p.log.Warn("checking checkpoints", "err", err) // the next check retries
		return
	}
	for id, part := range p.parts {
		if _, ok := cps[id]; part.ckptKnown && !ok && p.stalled[id] == "" {
			p.rebuild(part)
		}
	}
}

// rebuild folds a partition again from the earliest offset after Redis lost
// its checkpoint. It drops the partition's cached state and deletes the
// partition's snapshots from Redis first: after the loss, some may have been
// folded without the history Redis lost (a session evicted from the cache,
// then a duplicate SessionCreated), and the skip rule would otherwise protect
// such a snapshot from the rebuild. Records of the partition already polled
// are not folded (see rebuiltNow); the replay delivers them again.
func (p *Projector) rebuild(part *partState) {
	p.log.Warn("the partition's checkpoint vanished from Redis: rebuilding it from the earliest offset",
		"partition", part.id)
	p.dropSessions(part)
	for attempt := 0; ; attempt++ {
		n, err := p.store.DeletePartition(p.flushCtx, part.id)
		if err == nil {
			p.log.Info("deleted the partition's snapshots before the rebuild", "partition", part.id, "snapshots", n)
			break
		}
		p.log.Warn("deleting the partition's snapshots", "partition", part.id, "err", err, "attempt", attempt)
		if sleep(p.flushCtx, backoff(attempt)) != nil {
			return
		}
	}
	part.next, part.ckptKnown, part.lastCkpt = -1, false, 0
	p.rebuiltNow[part.id] = true
	p.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.cfg.Topic: {part.id: {Epoch: -1, Offset: 0}}})
}

func (p *Projector) dropSessions(part *partState) {
	for _, en := range part.sessions {
		p.lru.remove(en)
		en.part = nil
		en.dirty = false
	}
	part.sessions = map[string]*entry{}
	keep := p.dirty[:0]
	for _, en := range p.dirty {
		if en.part != nil {
			keep = append(keep, en)
		}
	}
	clear(p.dirty[len(keep):])
	p.dirty = keep
}

// evict drops least recently used snapshots beyond the cache size or its
// bytes, only those whose latest state is stored.
func (p *Projector) evict() {
	steps := 0
	limit := p.cfg.CacheBytes
	if limit <= 0 {
		limit = DefaultCacheBytes
	}
	for e := p.lru.tail; e != nil && (p.lru.n > p.cfg.CacheSize || p.lru.bytes > limit) && steps < 4*p.cfg.FlushSize; steps++ {
		prev := e.prev
		if e.evictable() {
			p.lru.remove(e)
			if e.part != nil {
				delete(e.part.sessions, e.id)
			}
		}
		e = prev
	}
}

// Ready reports whether the projector can make progress: Redis answers and
// no partition is stalled.
func (p *Projector) Ready(ctx context.Context) error {
	if err := p.store.Ping(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.stalled) > 0 {
		var msgs []string
		for id, msg := range p.stalled {
			msgs = append(msgs, fmt.Sprintf("partition %d: %s", id, msg))
		}
		sort.Strings(msgs)
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}
