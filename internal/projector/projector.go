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
// It composes collaborators that each own one concern, built with what
// they use: the state the fold and the group share under its lock
// (state.go: the owned partitions, the cache, the stalls), the fold loop
// (folder, fold.go), the consumer group's callbacks (group, group.go),
// the starts, repairs and rebuilds of partitions (recovery, recovery.go),
// the restores from the changelog (restorer, restore.go), the flusher
// that writes batches (flush.go), the firer (firer.go), the archive
// sweep (sweeper.go), the verifier (verifier.go) and dead letters
// (deadLetters, deadletter.go). The projector builds them and runs them;
// Ready reads only atomics, never the state's lock.
type Projector struct {
	cfg   Config
	log   *slog.Logger
	store Store
	obs   Observer
	extra []kgo.Opt // client options from the caller (telemetry hooks)

	adm *kadm.Client
	// clientsSet is closed once what the client makes is built and handed
	// to the group and the fold (connect): franz-go joins the group as
	// soon as the client exists, so its callbacks can run before
	// NewClient has even returned to Run.
	clientsSet chan struct{}
	// topicsReady is closed once Run has ensured the topics (ensureTopics):
	// the group can assign partitions before that (group.adjustOffsets).
	topicsReady chan struct{}

	// st is what the fold goroutine and the rebalance callbacks share,
	// under st.mu (state.go).
	st     *state
	folder *folder // polls and folds (fold.go), built by New
	group  *group  // the consumer group's callbacks (group.go), built by New
	// flush writes batches, rec starts, repairs and rebuilds partitions
	// (recovery.go); built by Run with the client (connect).
	flush *flusher
	rec   *recovery

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
	p.folder = &folder{cfg: cfg, log: p.log, store: store, obs: p.obs, crash: &p.crash, auth: p.auth, st: p.st, verify: &p.verify}
	p.group = &group{cfg: cfg, log: p.log, st: p.st, crash: &p.crash, verify: &p.verify, clientsSet: p.clientsSet, topicsReady: p.topicsReady}
	p.st.pt.topic, p.st.pt.log = cfg.Topic, p.log
	if o, ok := p.obs.(interface{ watchStalls(*stalls) }); ok {
		o.watchStalls(&p.st.stalls) // its stalled gauge
	}
	return p
}

// connect builds what writes and produces through the Kafka client cl: the
// admin client, the firer, the flusher, the restorer, the sweeper, the
// recovery and the dead letters, writing under flushCtx and firing under
// fireCtx, hands them to the fold and the group, then lets the group's
// callbacks in (clientsSet).
// They are built here, not in New, because the client exists only while
// Run runs: franz-go joins the group as soon as the client is created, so
// a client made in New would join before Run, and its callbacks, which
// start firing partitions and flush what is revoked, need it built.
func (p *Projector) connect(cl *kgo.Client, flushCtx, fireCtx context.Context) {
	// The observer as Run finds it: tests set it after New.
	p.folder.obs, p.st.obs = p.obs, p.obs
	p.adm = kadm.NewClient(cl)
	p.st.pt.adm = p.adm
	p.fire = newFirer(p.cfg, p.store, p.clock, p.obs, p.log, &p.crash, cl, fireCtx)
	p.flush = newFlusher(p.cfg, p.store, p.obs, p.log, &p.crash, p.st.derived, p.fire, cl, flushCtx)
	restore := newRestorer(p.cfg, p.flush.changelog, p.adm, p.store, p.auth, p.st, p.obs, p.log, &p.crash, &p.restores)
	p.sweep = newSweeper(p.cfg, p.store, p.bucket, p.clock, p.obs, p.log, cl, fireCtx)
	p.rec = newRecovery(p.cfg, p.store, p.obs, p.log, &p.crash, p.st, cl, p.adm, p.flush, p.fire, p.sweep, restore)
	dlq := newDeadLetters(p.cfg, cl, flushCtx, p.obs, p.log, &p.crash, &p.flush.dlqErr)
	p.folder.cl, p.folder.flush, p.folder.rec, p.folder.sweep, p.folder.dlq = cl, p.flush, p.rec, p.sweep, dlq
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
	go func() {
		// Which process wrote a record of the change feed, in its log:
		// every produced batch carries the producer id and epoch.
		if id, epoch, err := cl.ProducerID(fireCtx); err == nil {
			p.log.Info("producing", "producerId", id, "producerEpoch", epoch)
		}
	}()
	// A graceful stop bounds the writes still to come (the batch in
	// flight, which may be retrying against an unreachable Redis, the final
	// flush and the revoke callbacks of the client's close).
	defer limitShutdown(ctx, p.cfg.shutdownTimeout(), p.log, stopFlushing)()
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
	err = p.folder.loop(ctx)
	if errors.Is(err, errCrashed) || p.crash.crashed.Load() {
		return errCrashed
	}
	if err != nil {
		return stopError(p.flush.ctx, p.cfg.shutdownTimeout(), fmt.Errorf("projector: folding: %w", err))
	}
	if err := p.folder.shutdown(); err != nil {
		if errors.Is(err, errCrashed) || p.crash.crashed.Load() {
			return errCrashed // a crash point hit during the final flush
		}
		return stopError(p.flush.ctx, p.cfg.shutdownTimeout(), fmt.Errorf("projector: shutdown: %w", err))
	}
	leaveOnStop(p.cfg, p.log, cl)
	return nil
}

// limitShutdown stops the writes (cancels the flush context with
// ErrShutdownTimeout) ShutdownTimeout after ctx is done, unless the
// returned function is called first. Without it, a stop during a Redis
// outage waited for the batch in flight, retried until Redis came back.
func limitShutdown(ctx context.Context, timeout time.Duration, log *slog.Logger, stopFlushing context.CancelCauseFunc) (end func()) {
	ended := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-ended:
			return
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
			log.Error("the final writes did not complete in time: stopping them; the partitions' next owner folds again what they did not write",
				"timeout", timeout)
			stopFlushing(ErrShutdownTimeout)
		case <-ended:
		}
	}()
	return func() { close(ended) }
}

// stopError is err, or ErrShutdownTimeout (after timeout) with err's text
// when the writes under flushCtx were stopped for taking too long (see
// limitShutdown).
func stopError(flushCtx context.Context, timeout time.Duration, err error) error {
	if errors.Is(context.Cause(flushCtx), ErrShutdownTimeout) {
		return fmt.Errorf("%w (%v): %v", ErrShutdownTimeout, timeout, err)
	}
	return err
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
