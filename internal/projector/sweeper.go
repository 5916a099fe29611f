package projector

import (
	"context"
	"errors"
	"fmt"
	"github.com/correx/sessions/internal/changelog"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sweeper moves the sessions that ended more than Config.RetainClosed ago
// out of Redis into the archive (docs/retention.md). One goroutine per
// owned partition, started and stopped with ownership like the firer's:
// the closed sessions are stored state (projstore's closed.go), so a
// partition's next owner continues its sweep.
//
// Every Config.ArchiveSweep, a partition's goroutine reads the sessions
// due (in rounds of at most batch), their snapshots, and their whole
// histories from the events log (sessionlog.Reader.Histories: one read of
// the partition per group of sessions whose histories fit in
// sessionlog.DefaultHistoryBudget together, and one read of its own for a
// session too large for it, streamed into its object as it is read; a
// session whose first events have left the log is archived saying its
// history is incomplete, docs/retention.md); writes each object
// (archive.Remote.PutStream, its history taken from the read);
// produces each session's "archived" changelog record and waits for its
// acknowledgement; and only then removes the sessions from Redis, fenced
// by the archived position (projstore.Store.Forget): an event folded
// since keeps its session, which the next sweep archives again. The fold
// goroutine then drops the removed sessions from its cache (take), so a
// later event finds no session. A failure keeps the sessions in Redis
// and is retried at the next interval; /readyz reports it meanwhile.
//
// Safe for concurrent use: start and stop are called from the rebalance
// callbacks, take from the fold goroutine.
type sweeper struct {
	store  Store
	bucket *archive.Remote
	topic  string
	// changelog is the snapshot changelog's topic, where an archived
	// session's last record says so; "" with the changelog off.
	changelog string
	// auth signs the archived records.
	auth   *systemAuth
	retain time.Duration
	// tombs is how long a tombstone is kept (Config.TombstoneRetention; 0:
	// for ever), tombsEvery how often a partition's expired tombstones
	// are looked for (a pass over every tombstone).
	tombs, tombsEvery time.Duration
	interval          time.Duration
	deadline          time.Duration // of a round (Config.ArchiveRound)
	clock             Clock
	log               *slog.Logger
	obs               archiveObserver
	batch             int
	// budget is the bytes of history entries a round holds at once
	// (sessionlog.Reader.Histories); larger histories are streamed.
	budget int64
	reader *sessionlog.Reader
	cl     *kgo.Client
	ctx    context.Context
	// beforeForget, when set (tests), is called before archived sessions
	// are removed from Redis.
	beforeForget func(ids []string)

	mu      sync.Mutex
	parts   map[int32]*partSweeper
	removed []projstore.Archived // removed from Redis, not yet dropped from the cache
	// untombed are the tombstones removed (past their retention), not yet
	// dropped from the cache.
	untombed []projstore.Tombstone
	failing  map[int32]string // the partitions whose last sweep failed, and why
	msg      atomic.Pointer[string]
}

// archiveObserver sees the sweeps; Telemetry implements it.
type archiveObserver interface {
	// ArchiveDue is called when a sweep of a partition starts, with the
	// sessions due then (before any work that may hang or fail).
	ArchiveDue(partition int32, due int64)
	// ArchiveSwept is called after each sweep of a partition: how many
	// sessions it removed from Redis, how many were due when it started,
	// and its error.
	ArchiveSwept(partition int32, archived int, due int64, err error)
}

type nopArchiveObserver struct{}

func (nopArchiveObserver) ArchiveDue(int32, int64)               {}
func (nopArchiveObserver) ArchiveSwept(int32, int, int64, error) {}

type partSweeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// newSweeper returns the sweeper of a projector's client cl, archiving
// into bucket under ctx, or nil when sessions are kept for ever.
func newSweeper(cfg Config, store Store, bucket *archive.Remote, clock Clock, obs Observer, log *slog.Logger,
	cl *kgo.Client, ctx context.Context) *sweeper {
	if cfg.RetainClosed <= 0 || bucket == nil {
		return nil
	}
	s := &sweeper{store: store, bucket: bucket, topic: cfg.Topic, retain: cfg.RetainClosed, interval: cfg.ArchiveSweep,
		clock: clock, log: log.With("sweep", "archive"), obs: nopArchiveObserver{}, batch: 500,
		budget: sessionlog.DefaultHistoryBudget, reader: &sessionlog.Reader{Kafka: cfg.Kafka, Topic: cfg.Topic}, cl: cl, ctx: ctx,
		parts: map[int32]*partSweeper{}, failing: map[int32]string{}}
	if cfg.ChangelogEnabled {
		s.changelog = changelog.Topic(cfg.Topic)
	}
	if s.interval <= 0 {
		s.interval = defaultArchiveSweep
	}
	if s.deadline = cfg.ArchiveRound; s.deadline <= 0 {
		s.deadline = defaultArchiveRound
	}
	if s.tombs = cfg.TombstoneRetention; s.tombs > 0 {
		s.tombsEvery = max(s.interval, min(s.tombs/10, time.Hour))
	}
	if o, ok := obs.(archiveObserver); ok {
		s.obs = o
	}
	return s
}

// start begins sweeping a partition (on assignment).
func (s *sweeper) start(id int32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parts[id] != nil {
		return
	}
	ps := &partSweeper{done: make(chan struct{})}
	var ctx context.Context
	ctx, ps.cancel = context.WithCancel(s.ctx)
	s.parts[id] = ps
	go func() {
		defer close(ps.done)
		s.run(ctx, id)
	}()
}

// stop stops sweeping partitions (on revocation, loss and shutdown) and
// waits for their goroutines: a sweep in flight is abandoned before its
// removal, or its removal stands (it is fenced).
func (s *sweeper) stop(ids ...int32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	var stopped []*partSweeper
	for _, id := range ids {
		if ps := s.parts[id]; ps != nil {
			ps.cancel()
			stopped = append(stopped, ps)
			delete(s.parts, id)
		}
		s.setFailing(id, "")
	}
	s.mu.Unlock()
	for _, ps := range stopped {
		<-ps.done
	}
}

func (s *sweeper) stopAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	ids := make([]int32, 0, len(s.parts))
	for id := range s.parts {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	s.stop(ids...)
}

// take returns the sessions removed from Redis, and the tombstones
// removed, since the last call, for the fold goroutine to drop from its
// cache.
func (s *sweeper) take() ([]projstore.Archived, []projstore.Tombstone) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out, tombs := s.removed, s.untombed
	s.removed, s.untombed = nil, nil
	return out, tombs
}

// err is the readiness error while a partition's sweep fails, or nil.
func (s *sweeper) err() error {
	if s == nil {
		return nil
	}
	if m := s.msg.Load(); m != nil {
		return errors.New(*m)
	}
	return nil
}

// setFailing records why a partition's sweep failed ("": it did not);
// s.mu is held.
func (s *sweeper) setFailing(id int32, why string) {
	if why == "" {
		if _, ok := s.failing[id]; !ok {
			return
		}
		delete(s.failing, id)
	} else {
		s.failing[id] = why
	}
	if len(s.failing) == 0 {
		s.msg.Store(nil)
		return
	}
	var msg string
	for p, w := range s.failing {
		msg = fmt.Sprintf("archiving closed sessions into %s fails (partition %d and %d more): %s; they stay in Redis until it works",
			s.bucket, p, len(s.failing)-1, w)
		break
	}
	s.msg.Store(&msg)
}

// run is a partition's sweep loop: a sweep at once, then one every
// interval.
func (s *sweeper) run(ctx context.Context, id int32) {
	var expired time.Time // when the partition's tombstones were last expired
	for ctx.Err() == nil {
		n, due, err := s.sweep(ctx, id)
		if err == nil && s.tombs > 0 && (expired.IsZero() || s.clock.Now().Sub(expired) >= s.tombsEvery) {
			err = s.expireTombstones(ctx, id)
			if err == nil {
				expired = s.clock.Now()
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, snapshot.ErrNotOwner) {
			// A newer owner has the partition (projstore's epoch.go): it
			// sweeps it; this one stops until the partition is its again.
			s.log.Warn("a newer owner took the partition over: its archive sweep stops here", "partition", id)
			return
		}
		s.obs.ArchiveSwept(id, n, due, err)
		s.mu.Lock()
		if err != nil {
			s.setFailing(id, err.Error())
		} else {
			s.setFailing(id, "")
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("archiving closed sessions: they stay in Redis; retrying at the next sweep", "partition", id, "err", err)
		} else if n > 0 {
			s.log.Info("archived closed sessions and removed them from Redis", "partition", id, "sessions", n)
		}
		t := s.clock.NewTimer(s.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// sweep archives and removes a partition's due sessions, in rounds of at
// most batch, and returns how many it removed and how many were due. Each
// round has its deadline (Config.ArchiveRound), counted from its last
// progress (withStall): a hung archive, Redis or log read ends it with an
// error, never holds the partition's sweep, and a session of any size is
// archived as long as its read and write move.
func (s *sweeper) sweep(ctx context.Context, id int32) (removed int, due int64, err error) {
	before := s.clock.Now().Add(-s.retain)
	for round := 0; ; round++ {
		rctx, progress, cancel := withStall(ctx, s.deadline)
		closed, n, err := s.store.DueClosed(rctx, s.topic, id, before, s.batch)
		if round == 0 {
			due = n
			if err == nil {
				s.obs.ArchiveDue(id, due) // now: the round may hang or fail
			}
		}
		if err != nil || len(closed) == 0 {
			cancel()
			return removed, due, s.late(rctx, err)
		}
		progress()
		k, err := s.round(rctx, id, closed, progress)
		err = s.late(rctx, err)
		cancel()
		removed += k
		if err != nil || len(closed) < s.batch || k == 0 {
			return removed, due, err
		}
	}
}

// expireTombstones removes the partition's tombstones older than the
// tombstone retention (CORREX_TOMBSTONE_RETENTION, docs/retention.md): their ids may be used again. Fenced
// like the sweep (projstore.Store.ExpireTombstones).
func (s *sweeper) expireTombstones(ctx context.Context, id int32) error {
	rctx, cancel := context.WithTimeout(ctx, s.deadline)
	defer cancel()
	gone, err := s.store.ExpireTombstones(rctx, id, s.clock.Now().Add(-s.tombs))
	if err != nil {
		return s.late(rctx, fmt.Errorf("removing tombstones older than %v: %w", s.tombs, err))
	}
	n := len(gone)
	s.mu.Lock()
	s.untombed = append(s.untombed, gone...)
	s.mu.Unlock()
	if n > 0 {
		s.log.Info("removed tombstones past their retention: their ids may be used again", "partition", id, "tombstones", n, "retention", s.tombs)
	}
	return nil
}

// late names the round's deadline in err when the round ran into it.
func (s *sweeper) late(rctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(rctx), errStalled) {
		return fmt.Errorf("the round made no progress for %v: %w", s.deadline, err)
	}
	return err
}

// errStalled is the cause of a round's context ended by withStall.
var errStalled = errors.New("no progress within the round's deadline")

// withStall returns a context that ends (cause errStalled) once d has
// passed without a call to progress, and the function that ends it.
//
// A sweep round's deadline is a stall bound, not a bound on its total:
// a session of 400,000 events is read from the log and written to the
// archive in one streamed call that may take minutes, and any fixed total
// would fail it on every round for ever (while its session stayed in
// Redis). What a hung archive, Redis or broker does is stop moving, and
// that is what ends the round: the round calls progress after each step
// (the due sessions read, their snapshots, each object) and for each
// entry of a history as it is yielded to the archive's writer, which
// takes it only as fast as the bucket does. The check costs an atomic
// store per call; the timer wakes at most once per d, and ends the
// context d after the last progress, to the timer's precision.
func withStall(ctx context.Context, d time.Duration) (context.Context, func(), context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	var last atomic.Int64 // monotonic nanoseconds since base
	base := time.Now()
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		if left := d - (time.Since(base) - time.Duration(last.Load())); left > 0 {
			t.Reset(left)
			return
		}
		cancel(errStalled)
	})
	progress := func() { last.Store(int64(time.Since(base))) }
	return ctx, progress, func() { t.Stop(); cancel(context.Canceled) }
}

// round archives one batch of due sessions and removes them from Redis,
// calling progress as it moves (withStall).
func (s *sweeper) round(ctx context.Context, id int32, closed []projstore.ClosedSession, progress func()) (int, error) {
	ids := make([]string, len(closed))
	for i, c := range closed {
		ids[i] = c.SessionID
	}
	snaps, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("reading snapshots: %w", err)
	}
	progress()
	var todo []*snapshot.Snapshot
	var gone []projstore.Archived // no snapshot: only their closed entries go
	for i, sn := range snaps {
		switch {
		case sn == nil:
			gone = append(gone, projstore.Archived{SessionID: ids[i]})
		case sn.Terminal() && sn.Position.Partition == id:
			todo = append(todo, sn)
		}
	}
	if len(gone) > 0 {
		if _, err := s.store.Forget(ctx, s.topic, id, gone); err != nil {
			return 0, err
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	if err := s.bucket.Status(); err != nil {
		return 0, err // at once: no log read for objects that cannot be written
	}
	if err := s.archive(ctx, id, todo, progress); err != nil {
		return 0, err
	}
	ended := make(map[string]time.Time, len(closed))
	for _, c := range closed {
		ended[c.SessionID] = c.Ended
	}
	if s.changelog != "" {
		keys, err := s.auth.wait(ctx)
		if err != nil {
			return 0, err
		}
		recs := make([]*kgo.Record, len(todo))
		for i, sn := range todo {
			recs[i] = changelog.ArchivedRecordFinal(s.changelog, sn.ID, sn.Position,
				changelog.Final{State: sn.State.String(), Version: sn.Version, EndedMs: ended[sn.ID].UnixMilli()})
			keys.Sign(recs[i])
		}
		if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return 0, fmt.Errorf("producing the changelog's archived records: %w", err)
		}
		progress()
	}
	archived := make([]projstore.Archived, len(todo))
	for i, sn := range todo {
		archived[i] = projstore.Archived{SessionID: sn.ID, Position: sn.Position,
			Tombstone: projstore.Tombstone{State: sn.State, Version: sn.Version, Ended: ended[sn.ID]}}
	}
	if s.beforeForget != nil {
		s.beforeForget(ids)
	}
	out, err := s.store.Forget(ctx, s.topic, id, archived)
	if err != nil {
		return 0, err
	}
	n := 0
	s.mu.Lock()
	for i, o := range out {
		if o == projstore.ForgetRemoved {
			n++
			s.removed = append(s.removed, archived[i])
		}
	}
	s.mu.Unlock()
	return n, nil
}

// archive writes the object of each of the terminal sessions todo, all on
// partition id, its history streamed from the events log into the
// archive's writer (held in memory up to s.budget bytes of entries for
// all of them, one at a time beyond), calling progress for each entry.
func (s *sweeper) archive(ctx context.Context, id int32, todo []*snapshot.Snapshot, progress func()) error {
	now := s.clock.Now()
	var failed error // an object's, returned as it is
	err := s.reader.Histories(ctx, id, todo, s.budget, func(sn *snapshot.Snapshot, h sessionlog.History) error {
		o := &archive.Object{Snapshot: sn, ArchivedAt: now}
		if !h.Complete {
			// The log's start passed the session's first offset (a finite
			// retention): the object says its history is incomplete.
			o.Truncated = &archive.Truncation{EarliestOffset: h.EarliestOffset}
		}
		var read error
		err := s.bucket.PutStream(ctx, o, func(yield func(wire.HistoryEntry) error) error {
			read = h.Each(func(e wire.HistoryEntry) error {
				progress()
				return yield(e)
			})
			return read
		})
		switch {
		case err == nil:
			progress()
			return nil
		case read != nil && errors.Is(err, read):
			failed = fmt.Errorf("reading %s's history from the events log: %w", sn.ID, read)
		default:
			failed = err
		}
		return failed
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		return fmt.Errorf("reading the histories from the events log: %w", err)
	}
	return nil
}
