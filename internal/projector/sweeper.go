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
// histories from the events log (one read of the partition per round,
// sessionlog.Reader.Histories); writes each object (archive.Store.Put);
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
	bucket *archive.Store
	topic  string
	// changelog is the snapshot changelog's topic, where an archived
	// session's last record says so; "" with the changelog off.
	changelog string
	retain    time.Duration
	interval  time.Duration
	clock     Clock
	log       *slog.Logger
	obs       archiveObserver
	batch     int
	reader    *sessionlog.Reader
	cl        *kgo.Client
	ctx       context.Context
	// beforeForget, when set (tests), is called before archived sessions
	// are removed from Redis.
	beforeForget func(ids []string)

	mu      sync.Mutex
	parts   map[int32]*partSweeper
	removed []projstore.Archived // removed from Redis, not yet dropped from the cache
	failing map[int32]string     // the partitions whose last sweep failed, and why
	msg     atomic.Pointer[string]
}

// archiveObserver sees the sweeps; Telemetry implements it.
type archiveObserver interface {
	// ArchiveSwept is called after each sweep of a partition: how many
	// sessions it removed from Redis, how many were due when it started,
	// and its error.
	ArchiveSwept(partition int32, archived int, due int64, err error)
}

type nopArchiveObserver struct{}

func (nopArchiveObserver) ArchiveSwept(int32, int, int64, error) {}

type partSweeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// newSweeper returns the sweeper of a projector's client cl, archiving
// into bucket under ctx, or nil when sessions are kept for ever.
func newSweeper(cfg Config, store Store, bucket *archive.Store, clock Clock, obs Observer, log *slog.Logger,
	cl *kgo.Client, ctx context.Context) *sweeper {
	if cfg.RetainClosed <= 0 || bucket == nil {
		return nil
	}
	s := &sweeper{store: store, bucket: bucket, topic: cfg.Topic, retain: cfg.RetainClosed, interval: cfg.ArchiveSweep,
		clock: clock, log: log.With("sweep", "archive"), obs: nopArchiveObserver{}, batch: 500,
		reader: &sessionlog.Reader{Kafka: cfg.Kafka, Topic: cfg.Topic}, cl: cl, ctx: ctx,
		parts: map[int32]*partSweeper{}, failing: map[int32]string{}}
	if cfg.ChangelogEnabled {
		s.changelog = changelog.Topic(cfg.Topic)
	}
	if s.interval <= 0 {
		s.interval = defaultArchiveSweep
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

// take returns the sessions removed from Redis since the last call, for
// the fold goroutine to drop from its cache.
func (s *sweeper) take() []projstore.Archived {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.removed
	s.removed = nil
	return out
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
	for ctx.Err() == nil {
		n, due, err := s.sweep(ctx, id)
		if ctx.Err() != nil {
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
// most batch, and returns how many it removed and how many were due.
func (s *sweeper) sweep(ctx context.Context, id int32) (removed int, due int64, err error) {
	before := s.clock.Now().Add(-s.retain)
	for round := 0; ; round++ {
		closed, n, err := s.store.DueClosed(ctx, s.topic, id, before, s.batch)
		if round == 0 {
			due = n
		}
		if err != nil || len(closed) == 0 {
			return removed, due, err
		}
		k, err := s.round(ctx, id, closed)
		removed += k
		if err != nil || len(closed) < s.batch || k == 0 {
			return removed, due, err
		}
	}
}

// round archives one batch of due sessions and removes them from Redis.
func (s *sweeper) round(ctx context.Context, id int32, closed []projstore.ClosedSession) (int, error) {
	ids := make([]string, len(closed))
	for i, c := range closed {
		ids[i] = c.SessionID
	}
	snaps, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return 0, fmt.Errorf("reading snapshots: %w", err)
	}
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
	histories, err := s.reader.Histories(ctx, id, todo)
	if err != nil {
		return 0, fmt.Errorf("reading the histories from the events log: %w", err)
	}
	now := s.clock.Now()
	for _, sn := range todo {
		if err := s.bucket.Put(ctx, &archive.Object{Snapshot: sn, History: histories[sn.ID], ArchivedAt: now}); err != nil {
			return 0, err
		}
	}
	if s.changelog != "" {
		recs := make([]*kgo.Record, len(todo))
		for i, sn := range todo {
			recs[i] = changelog.ArchivedRecord(s.changelog, sn.ID, sn.Position)
		}
		if err := s.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return 0, fmt.Errorf("producing the changelog's archived records: %w", err)
		}
	}
	archived := make([]projstore.Archived, len(todo))
	for i, sn := range todo {
		archived[i] = projstore.Archived{SessionID: sn.ID, Position: sn.Position}
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
