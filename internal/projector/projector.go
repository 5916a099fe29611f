package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Observer sees what the projector does; telemetry implements it.
//
// Folded, Skipped, DeadLettered and FlushStarted are called from the fold
// goroutine, so time spent in them is time the fold stands still: they may
// wait briefly but never on I/O. Telemetry's Folded and FlushStarted wait
// up to 250 ms when its span queue is full (see its doc). Flushed and
// Checkpointed are called from whoever writes the batch: the flush
// goroutine, or the fold goroutine and rebalance callbacks for the final
// and revoke flushes. DeadLetterFailed is called from the Kafka client's
// produce callback and must not block, or the client's produce path stalls.
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

// Projector folds one topic's events into snapshots. Create it with New and
// run it with Run; it is single-use.
//
// It composes one part per responsibility: the cache of snapshots (cache),
// the owned partitions' progress (partState), the flusher that writes
// batches (flush.go), recovery and stalls (recovery.go), the group's
// callbacks (group.go) and dead letters (deadletter.go). The fold goroutine
// (Run's poll loop) and the rebalance callbacks share the state below under
// mu; Ready reads only atomics, never mu.
type Projector struct {
	cfg   Config
	log   *slog.Logger
	store Store
	obs   Observer
	extra []kgo.Opt // client options from the caller (telemetry hooks)

	cl  *kgo.Client
	adm *kadm.Client
	// clientsSet is closed once cl, adm, flush and fire are set (connect):
	// franz-go joins the group as soon as the client exists, so its
	// callbacks can run before NewClient has even returned to Run.
	clientsSet chan struct{}
	// topicsReady is closed once Run has ensured the topics (ensureTopics):
	// the group can assign partitions before that, and a start that read
	// the changelog's offsets before its topic existed would find it
	// unknown, and keep finding it so in the client's metadata cache.
	topicsReady chan struct{}

	// st is what the fold goroutine and the rebalance callbacks share,
	// under st.mu (state.go).
	st    *state
	flush *flusher // built by Run with the client (connect)
	// restore restores partitions from the changelog (restore.go); built
	// by Run with the client (connect).
	restore *restorer
	// rec starts, repairs and rebuilds partitions (recovery.go); built by
	// Run with the client (connect).
	rec *recovery
	// group holds the consumer group's callbacks (group.go), built by New.
	group *group
	// dlq sets records aside (deadletter.go); built by Run with the client.
	dlq      *deadLetters
	progress bool // a partition advanced since the last flush was built
	reducer  fsm.Reducer
	events   []fsm.Event // decode buffer, reused across polls

	restores atomic.Int64 // partitions restored from the changelog, for tests and benchmarks
	crash    crashPoints  // test hooks
	// starting, when set by tests, is called once the group client exists
	// and before the topics are ensured: the group may assign partitions
	// to a member still starting.
	starting func(context.Context)
	// auth is the system key, loaded by Run before anything is folded
	// (sysauth.go): it signs what the projector derives and checks what
	// claims to be the system's.
	auth *systemAuth

	clock Clock  // the wall clock deadlines fire by (WithClock)
	fire  *firer // fires the owned partitions' deadlines (firer.go); built by Run with the client (connect)
	// bucket is the archive (Config.ArchiveURL), opened in the background
	// by Run when Config.RetainClosed is set; sweep moves the closed
	// sessions into it (sweeper.go), nil when sessions are kept for ever.
	// Set before clientsSet is closed.
	bucket *archive.Remote
	sweep  *sweeper
	// verify is the background verifier (verifier.go), nil while off;
	// set by Run.
	verify atomic.Pointer[verifier]
	// beforeForget is the sweeper's test hook (sweeper.beforeForget).
	beforeForget func(ids []string)
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
func New(cfg Config, store Store, opts ...Option) *Projector {
	p := &Projector{cfg: cfg, store: store, obs: nopObserver{}, log: slog.Default(),
		clientsSet: make(chan struct{}), topicsReady: make(chan struct{}), clock: wallClock{},
		auth: newSystemAuth()}
	for _, o := range opts {
		o(p)
	}
	p.st = newState(cfg, p.obs, newDerived(cfg, p.log, &p.crash))
	p.group = &group{cfg: cfg, log: p.log, st: p.st, crash: &p.crash, verify: &p.verify, clientsSet: p.clientsSet, topicsReady: p.topicsReady}
	p.st.pt.topic, p.st.pt.log = cfg.Topic, p.log
	if o, ok := p.obs.(interface{ watchStalls(*stalls) }); ok {
		o.watchStalls(&p.st.stalls) // its stalled gauge
	}
	return p
}

// connect builds what writes and produces through the Kafka client cl: the
// admin client, the firer and the flusher, writing under flushCtx and
// firing under fireCtx, then lets the group's callbacks in (clientsSet).
// They are built here, not in New, because the client exists only while
// Run runs: franz-go joins the group as soon as the client is created, so
// a client made in New would join before Run, and its callbacks, which
// start firing partitions and flush what is revoked, need it built.
func (p *Projector) connect(cl *kgo.Client, flushCtx, fireCtx context.Context) {
	p.cl, p.adm = cl, kadm.NewClient(cl)
	p.st.pt.adm = p.adm
	p.fire = newFirer(p.cfg, p.store, p.clock, p.obs, p.log, &p.crash, cl, fireCtx)
	p.flush = newFlusher(p.cfg, p.store, p.obs, p.log, &p.crash, p.st.derived, p.fire, cl, flushCtx)
	p.restore = newRestorer(p.cfg, p.flush.changelog, p.adm, p.store, p.auth, p.st, p.obs, p.log, &p.crash, &p.restores)
	p.sweep = newSweeper(p.cfg, p.store, p.bucket, p.clock, p.obs, p.log, cl, fireCtx)
	p.rec = newRecovery(p.cfg, p.store, p.obs, p.log, &p.crash, p.st, cl, p.adm, p.flush, p.fire, p.sweep, p.restore)
	p.dlq = newDeadLetters(p.cfg, cl, flushCtx, p.obs, p.log, &p.crash, &p.flush.dlqErr)
	p.group.fire, p.group.sweep, p.group.flush, p.group.rec = p.fire, p.sweep, p.flush, p.rec
	p.fire.auth, p.flush.auth = p.auth, p.auth
	if p.sweep != nil {
		p.sweep.beforeForget = p.beforeForget
		p.sweep.auth = p.auth
		// The histories skip what the fold sets aside, forged system
		// records included.
		p.sweep.reader.Decode = func(r *kgo.Record, e *fsm.Event) error { return p.auth.loaded().DecodeEvent(r, e) }
	}
	close(p.clientsSet)
}

// ErrShutdownTimeout is returned by Run when the writes of a graceful stop
// did not complete within Config.ShutdownTimeout (Redis or the broker was
// unreachable): the last batches were not checkpointed and are folded again
// by the partitions' next owner.
var ErrShutdownTimeout = errors.New("projector: the final writes did not complete within the shutdown timeout")

// producerOpts are the options of the projector's client that shape what it
// produces. There is no default produce topic: every record the projector
// builds names its topic (each record constructor takes it), and a record
// that names none fails to produce rather than landing in a topic nobody
// chose.
func producerOpts(cfg Config) []kgo.Opt {
	return []kgo.Opt{
		// Dead letters keep the key hash; change records name their
		// source record's partition, and changelog records their
		// session's events partition.
		kgo.RecordPartitioner(kafka.PartitionerKeepingPartitions(feed.Topic(cfg.Topic), changelog.Topic(cfg.Topic))),
	}
}

// Run joins the group and folds until ctx is done, then flushes, writes
// checkpoints and leaves. It returns an error only for a failure it cannot
// recover from (the caller restarts the process; checkpoints make that safe).
func (p *Projector) Run(ctx context.Context) error {
	if p.cfg.RetainClosed > 0 {
		if p.cfg.ArchiveURL == "" {
			return fmt.Errorf("projector: CORREX_RETAIN_CLOSED (%v) needs CORREX_ARCHIVE_URL", p.cfg.RetainClosed)
		}
		// In the background: the archive is a secondary store, and its
		// outage delays archiving, nothing else.
		b, err := archive.StartRemote(ctx, p.cfg.ArchiveURL, archive.RemoteOptions{Timeout: p.cfg.ArchiveTimeout, Log: p.log})
		if err != nil {
			return fmt.Errorf("projector: CORREX_ARCHIVE_URL: %w", err)
		}
		defer b.Close()
		p.bucket = b
		if o, ok := p.obs.(interface{ archiveOpened(*archive.Remote) }); ok {
			o.archiveOpened(b) // its reachable gauge
		}
	}
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
		kgo.OnPartitionsAssigned(p.group.onAssigned),
		kgo.OnPartitionsRevoked(p.group.onRevoked),
		kgo.OnPartitionsLost(p.group.onLost),
		kgo.AdjustFetchOffsetsFn(p.group.adjustOffsets),
	)
	opts = append(opts, producerOpts(p.cfg)...)
	if p.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(p.cfg.InstanceID))
	}
	opts = append(opts, p.extra...)
	// The contexts the firer and the flusher work under exist before the
	// client and before anything can fail: closing the client runs the
	// group's revoke callbacks, which flush under the flush context. The
	// firing context ends with Run (or a simulated crash).
	fireCtx, stopFiring := context.WithCancel(ctx)
	defer stopFiring()
	flushCtx, stopFlushing := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopFlushing(nil)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("projector: kafka client: %w", err)
	}
	p.crash.stop = func() { stopFlushing(nil); stopFiring() }
	// A graceful stop bounds the writes still to come (the batch in
	// flight, which may be retrying against an unreachable Redis, the final
	// flush and the revoke callbacks of the client's close).
	defer p.limitShutdown(ctx, stopFlushing)()
	p.verify.Store(newVerifier(p.cfg, p.store, p.st, p.auth, p.obs, p.log))
	p.connect(cl, flushCtx, fireCtx)
	defer cl.CloseAllowingRebalance()
	defer p.fire.stopAll() // before the client closes
	defer p.sweep.stopAll()

	if p.starting != nil {
		p.starting(ctx)
	}
	n, err := ensureTopics(ctx, p.adm, p.cfg, p.st.derived.feedTopic, p.flush.changelog, p.log)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while starting: nothing was folded, but the group
			// may have assigned this member partitions already.
			leaveOnStop(p.cfg, p.log, cl)
			return nil
		}
		return fmt.Errorf("projector: ensuring topics: %w", err)
	}
	p.st.setPartitions(n)
	if err := p.auth.start(ctx, p.cfg, p.adm, cl, p.log); err != nil {
		if ctx.Err() != nil {
			leaveOnStop(p.cfg, p.log, cl)
			return nil
		}
		return fmt.Errorf("projector: %w", err)
	}
	close(p.topicsReady)
	if v := p.verify.Load(); v != nil {
		verifyDone := make(chan struct{})
		go func() { defer close(verifyDone); v.run(fireCtx) }()
		defer func() { stopFiring(); <-verifyDone }()
	}
	flusherDone := make(chan struct{})
	go func() { defer close(flusherDone); p.flush.run() }()
	defer func() { close(p.flush.jobs); <-flusherDone }()

	p.flush.last = time.Now()
	err = p.loop(ctx)
	if errors.Is(err, errCrashed) || p.crash.crashed.Load() {
		return errCrashed
	}
	if err != nil {
		return p.stopError(fmt.Errorf("projector: folding: %w", err))
	}
	if err := p.shutdown(); err != nil {
		if errors.Is(err, errCrashed) || p.crash.crashed.Load() {
			return errCrashed // a crash point hit during the final flush
		}
		return p.stopError(fmt.Errorf("projector: shutdown: %w", err))
	}
	leaveOnStop(p.cfg, p.log, cl)
	return nil
}

func (p *Projector) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		// The poll waits at most FlushInterval, and returns as soon as the
		// batch in flight is written, so that what was folded meanwhile
		// is flushed at once (group commit, see flusher.due).
		pctx, cancel := context.WithTimeout(ctx, p.cfg.FlushInterval)
		p.st.mu.Lock()
		written := p.flush.inflightDone()
		p.st.mu.Unlock()
		if written != nil {
			go func() {
				select {
				case <-written:
					cancel()
				case <-pctx.Done():
				}
			}()
		}
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
		p.st.mu.Lock()
		clear(p.st.rebuiltNow)
		err := p.rec.collect(false)
		p.dropArchived()
		if err == nil {
			err = p.process(ctx, fetches)
		}
		if err == nil && p.flush.due(p.st.cache.dirtyLen(), p.st.cache.dirtyBytes, p.progress, p.catchingUp(fetches)) {
			err = p.startFlush()
		}
		if err == nil && p.flush.inflight == nil && time.Since(p.st.lastCheck) >= p.cfg.MaxFlushInterval {
			p.rec.checkCheckpoints(ctx)
		}
		p.st.cache.evict()
		p.st.mu.Unlock()
		if p.crash.crashed.Load() {
			return errCrashed // a crash point hit between the steps above
		}
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Stopped while reading snapshots: what was folded before is
			// flushed by the shutdown; the rest is replayed next time.
			return nil
		}
		if err != nil {
			return err
		}
		p.cl.AllowRebalance()
	}
	return nil
}

// limitShutdown stops the writes (cancels the flush context with
// ErrShutdownTimeout) ShutdownTimeout after ctx is done, unless the
// returned function is called first. Without it, a stop during a Redis
// outage waited for the batch in flight, retried until Redis came back.
func (p *Projector) limitShutdown(ctx context.Context, stopFlushing context.CancelCauseFunc) (end func()) {
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-ended:
			return
		}
		t := time.NewTimer(p.cfg.shutdownTimeout())
		defer t.Stop()
		select {
		case <-t.C:
			p.log.Error("the final writes did not complete in time: stopping them; the partitions' next owner folds again what they did not write",
				"timeout", p.cfg.shutdownTimeout())
			stopFlushing(ErrShutdownTimeout)
		case <-ended:
		}
	}()
	return func() { close(ended) }
}

// stopError is err, or ErrShutdownTimeout with err's text when the writes
// were stopped for taking too long (see limitShutdown).
func (p *Projector) stopError(err error) error {
	if errors.Is(context.Cause(p.flush.ctx), ErrShutdownTimeout) {
		return fmt.Errorf("%w (%v): %v", ErrShutdownTimeout, p.cfg.shutdownTimeout(), err)
	}
	return err
}

// shutdown writes everything owned, then leaves the group (Close). It has
// until limitShutdown stops the writes.
func (p *Projector) shutdown() error {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if err := p.rec.collect(true); err != nil {
		return err
	}
	job := p.buildJob()
	if err := p.flush.write(p.flush.ctx, job); err != nil {
		return fmt.Errorf("projector: final flush: %w", err)
	}
	p.rec.finish(job)
	if p.flush.changelog != "" {
		// The changelog's checkpoint records are produced without a wait
		// (the next write's waits for them): wait here, or closing the
		// client drops them and a restore folds more than it need.
		if err := p.cl.Flush(p.flush.ctx); err != nil {
			p.log.Warn("the changelog's last checkpoint records were not acknowledged; its checkpoints stay behind", "err", err)
		}
	}
	p.log.Info("flushed and checkpointed on shutdown", "snapshots", len(job.entries), "partitions", len(job.checkpoints))
	return nil
}

// catchingUp reports whether there is more to fold than the poll gave: it
// came back full, or the owned partitions are at least MaxPollRecords
// behind the high watermarks their latest fetches reported (the fetch
// buffer ran dry before the log end). A backlog under MaxPollRecords is
// caught up: one more poll folds it, and a gap of a few offsets at a
// partition's end (transaction markers) never makes the projector wait.
func (p *Projector) catchingUp(fetches kgo.Fetches) bool {
	if fetches.NumRecords() >= p.cfg.MaxPollRecords {
		return true
	}
	var behind int64
	for _, part := range p.st.parts {
		if part.next >= 0 && part.hw > part.next {
			behind += part.hw - part.next
		}
	}
	return behind >= int64(p.cfg.MaxPollRecords)
}

// buildJob builds a batch of everything owned.
func (p *Projector) buildJob() *flushJob {
	job := p.flush.build(&p.st.cache, p.st.parts, nil)
	p.progress = false
	return job
}

// writing counts the encodings of job, handed to the flusher, against the
// cache's bytes until it is collected: they are held as long as the
// snapshots (cache.writing, cache.evict).
func (p *Projector) writing(job *flushJob) {
	p.st.cache.writing = 0
	for _, e := range job.entries {
		p.st.cache.writing += len(e.Data)
	}
}

// startFlush hands a new batch to the flusher, after waiting for the one in
// flight (which is what slows folding down when Redis is slow).
func (p *Projector) startFlush() error {
	if err := p.rec.collect(true); err != nil {
		return err
	}
	job := p.buildJob()
	p.writing(job)
	p.flush.start(job)
	return nil
}

// process decodes the polled records, reads the snapshots of sessions not in
// the cache in one round trip, and folds the records in order.
func (p *Projector) process(ctx context.Context, fetches kgo.Fetches) error {
	recs := fetches.Records()
	if len(recs) == 0 {
		return nil
	}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if part := p.st.parts[fp.Partition]; part != nil && fp.HighWatermark >= 0 {
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
		part := p.st.parts[r.Partition]
		if part == nil || p.st.rebuiltNow[r.Partition] {
			continue // revoked between fetch and now (its new owner folds it), or being rebuilt
		}
		if err := p.auth.loaded().DecodeEvent(r, &events[i]); err != nil {
			decodeErr[i] = err
			continue
		}
		m := miss{r.Partition, events[i].SessionID}
		if string(r.Key) == m.id && !p.st.pt.onKeyPartition(ctx, r) {
			wrongPart[i] = true
			continue
		}
		if p.st.cache.get(part.id, m.id) == nil && !seen[m] && string(r.Key) == m.id {
			seen[m] = true
			missing = append(missing, m)
			ids = append(ids, m.id)
		}
	}
	if len(missing) > 0 {
		snaps, tombs, err := p.getMany(ctx, ids)
		if err != nil {
			return err
		}
		for i, m := range missing {
			p.st.cache.add(p.st.parts[m.partition], m.id, snaps[i]).tomb = tombs[i]
		}
	}
	for i, r := range recs {
		part := p.st.parts[r.Partition]
		if part == nil || p.st.rebuiltNow[r.Partition] {
			continue
		}
		if p.crash.at(crashFold) {
			return errCrashed
		}
		switch {
		case decodeErr[i] != nil:
			p.dlq.send(r, classify(decodeErr[i]), decodeErr[i].Error())
		case string(r.Key) != events[i].SessionID:
			p.dlq.send(r, ReasonKeyMismatch, fmt.Sprintf("record key %q (%d bytes) is not the event's sessionId %q",
				cutString(string(r.Key), 128), len(r.Key), events[i].SessionID))
		case wrongPart[i]:
			p.dlq.send(r, ReasonWrongPartition, fmt.Sprintf("key %q belongs to partition %d of %d, not %d",
				events[i].SessionID, p.st.pt.part.Partition(r, int(p.st.pt.n)), p.st.pt.n, r.Partition))
		default:
			if err := p.fold(ctx, part, r, &events[i]); err != nil {
				return err
			}
		}
		part.next = r.Offset + 1
		p.progress = true
		if p.st.cache.dirtyBytes >= p.cfg.flushBytes() {
			// FlushBytes of snapshots are dirty: written now, in the
			// middle of the poll (a poll of MaxPollRecords large records
			// would otherwise make one batch of them all). The batch's
			// checkpoints stop at this record (part.next), and it waits
			// for the one in flight, which paces the fold.
			if err := p.startFlush(); err != nil {
				return err
			}
			p.st.cache.evict()
		}
	}
	clear(events) // drop references to payloads
	return nil
}

func (p *Projector) fold(ctx context.Context, part *partState, r *kgo.Record, e *fsm.Event) error {
	en := p.st.cache.get(part.id, e.SessionID)
	if en == nil { // process reads every missing session first; never fold without the stored one
		snaps, tombs, err := p.getMany(ctx, []string{e.SessionID})
		if err != nil {
			return err
		}
		en = p.st.cache.add(part, e.SessionID, snaps[0])
		en.tomb = tombs[0]
	}
	p.st.cache.touch(en)
	if en.tomb != nil && !en.snap.Exists() && e.Type != fsm.SessionReplaced {
		p.foldTombstoned(r, e, en.tomb)
		return nil
	}
	o, folded := en.snap.Fold(&p.reducer, e, snapshot.Position{Partition: r.Partition, Offset: r.Offset})
	if !folded {
		// Already reflected: a replay from the checkpoint. The batch that
		// stored the snapshot may have crashed before its deadlines were
		// written, so the snapshot goes in the next batch again (its put
		// is fenced, a no-op), which arms its deadline.
		p.st.cache.markDirty(en, 0)
		p.obs.Skipped(r)
		p.st.derived.skipped(r, e, &en.snap)
		return nil
	}
	if o.Result == fsm.Orphan {
		if e.Type == fsm.SessionReplaced { // the successor hears of it (reactions.go)
			p.st.derived.add(r, e, &en.snap, o)
			return nil
		}
		p.dlq.send(r, ReasonUnknownSession, "no SessionCreated for session "+e.SessionID)
		return nil
	}
	p.st.cache.markDirty(en, len(r.Value))
	p.obs.Folded(r, e, &en.snap, o)
	p.st.derived.add(r, e, &en.snap, o)
	return nil
}

// dropArchived drops from the cache the sessions the archive sweep
// removed from Redis (sweeper.take), so that a later event finds no
// session, as the store does. Called by the fold goroutine between polls.
func (p *Projector) dropArchived() {
	removed, untombed := p.sweep.take()
	for _, a := range removed {
		p.st.cache.forget(a.Position.Partition, a.SessionID, a.Position)
	}
	for _, t := range untombed {
		p.st.cache.forgetTombstone(t.Partition, t.SessionID)
	}
}

// foldTombstoned folds an event of an archived session (docs/retention.md,
// "An archived id stays archived"): its
// tombstone says it ended, so the event is rejected as for a terminal
// session, SessionCreated duplicate_create and any other event
// after_terminal, with the same change record, metric and span; nothing
// is written (no snapshot reappears, and the archive is not touched). A
// SessionReplaced of an archived predecessor keeps the path of an unknown
// one (the successor hears of it, reactions.go).
func (p *Projector) foldTombstoned(r *kgo.Record, e *fsm.Event, t *projstore.Tombstone) {
	o := fsm.Outcome{Result: fsm.Rejected, Reason: fsm.ReasonAfterTerminal, From: t.State, To: t.State}
	if e.Type == fsm.SessionCreated {
		o.Reason = fsm.ReasonDuplicateCreate
	}
	var s snapshot.Snapshot
	s.ID, s.State, s.Version = t.SessionID, t.State, t.Version
	s.Position = snapshot.Position{Partition: r.Partition, Offset: r.Offset}
	p.obs.Folded(r, e, &s, o)
	p.st.derived.add(r, e, &s, o)
}

// getMany reads snapshots, and the tombstones of the sessions that have
// none, retrying while Redis is unreachable; a corrupt snapshot is not
// retried.
func (p *Projector) getMany(ctx context.Context, ids []string) (snaps []*snapshot.Snapshot, tombs []*projstore.Tombstone, err error) {
	err = retry(ctx, p.log, "reading snapshots", func(ctx context.Context) (err error) {
		if snaps, err = p.store.GetMany(ctx, ids); errors.Is(err, snapshot.ErrCorrupt) {
			return final(err)
		} else if err != nil {
			return err
		}
		var gone []string
		for i, s := range snaps {
			if s == nil {
				gone = append(gone, ids[i])
			}
		}
		tombs = make([]*projstore.Tombstone, len(ids))
		if len(gone) == 0 {
			return nil
		}
		ts, err := p.store.Tombstones(ctx, gone)
		if errors.Is(err, snapshot.ErrCorrupt) {
			return final(err)
		} else if err != nil {
			return err
		}
		for i, j := 0, 0; i < len(ids); i++ {
			if snaps[i] == nil {
				tombs[i], j = ts[j], j+1
			}
		}
		return nil
	})
	return snaps, tombs, err
}

// Ready reports whether the projector can make progress: Redis answers and
// no partition is stalled. The archive is not among them: an archive that
// cannot be reached or written delays archiving, nothing else, and is
// reported by Degraded. Ready never waits for the fold or a flush: the
// stalls are read from an atomic snapshot. It may be called before Run,
// and while Run starts.
func (p *Projector) Ready(ctx context.Context) error {
	if err := p.store.Ping(ctx); err != nil {
		return err
	}
	return p.st.stalls.err()
}

// Degraded lists what works less than fully without keeping the
// projector from folding: the archive unreachable, archive sweeps
// failing. /readyz shows it beside "ready". It never waits.
func (p *Projector) Degraded() []string {
	select {
	case <-p.clientsSet: // Run has set the archive and the sweeper (connect)
	default: // not started: no sweep has run
		return nil
	}
	var out []string
	if p.bucket != nil {
		if err := p.bucket.Status(); err != nil {
			out = append(out, err.Error()+"; closed sessions stay in Redis until it answers")
		}
	}
	if err := p.sweep.err(); err != nil {
		out = append(out, err.Error())
	}
	return out
}
