package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// firer fires the armed deadlines of the partitions this projector owns
// (docs/timeouts.md). One goroutine per owned partition, started on assignment
// and stopped on revocation or loss, so firing scales with the group and
// moves with ownership. Each reads its partition's due entries from the
// deadline store (score <= now), produces a TimeoutExpired for each on the
// session's own key, waits for the broker's acknowledgement, then takes
// the entries that still hold what was fired out of what is due, marking
// them fired: the same deadline armed again at the same version (its
// TimeoutExpired was not applied: a duplicate, a rejection) is not fired
// again, so no outcome of the fold can make the firer loop.
//
// It sleeps until the partition's next deadline: the flusher reports each
// partition's earliest deadline after every write (hint), and the earliest
// is read again from Redis every Config.DeadlineResync, which covers what
// another writer armed (a previous owner, a replay). It is the only reader
// of the wall clock (Clock) for what a session does.
//
// A partition fires nothing until its fold has caught up (hold): until
// its checkpoint has reached the end of the log as it was when the
// partition was assigned (adjustOffsets), or when its rebuild began. While
// a partition folds its history again (Redis emptied, a rebuild, a
// restore followed by the log after it), deadlines are armed for states
// the sessions have long left, whose times are past: fired then, each
// would be a TimeoutExpired the first fold never saw, folded as
// superseded, and the sessions' counters would differ from the first
// fold's. Once caught up, what is still armed is what the first fold left
// armed, and it fires as it would have.
//
// Safe for concurrent use: start, stop, hint, hold and checkpointed are
// called from the rebalance callbacks, the fold goroutine and the flush
// goroutine.
type firer struct {
	store  Store
	topic  string
	clock  Clock
	resync time.Duration
	log    *slog.Logger
	obs    timeoutObserver
	crash  *crashPoints
	auth   *systemAuth     // signs the TimeoutExpired records
	batch  int             // entries read and produced per round
	cl     *kgo.Client     // the projector's client, which the firer lives no longer than
	ctx    context.Context // the firing context: every partition's goroutine ends with it

	mu    sync.Mutex
	parts map[int32]*partFirer
}

// timeoutObserver sees deadlines fire; Telemetry implements it. Fired is
// called before the record is produced, from a partition's firing
// goroutine: it may set the record's trace headers, and returns the
// function that ends what it started once the produce is acknowledged.
type timeoutObserver interface {
	TimeoutFired(d projstore.ArmedDeadline, lag time.Duration, rec *kgo.Record) (end func(error))
}

type nopTimeoutObserver struct{}

func (nopTimeoutObserver) TimeoutFired(projstore.ArmedDeadline, time.Duration, *kgo.Record) func(error) {
	return func(error) {}
}

// partFirer is one partition's firing goroutine.
type partFirer struct {
	id      int32
	wake    chan struct{} // a hint arrived
	mu      sync.Mutex
	hinted  time.Time // the earliest deadline hinted since the goroutine last looked
	hasHint bool      // hinted is set
	// until is the checkpoint the partition's fold must reach before
	// anything fires (-1: not known yet, so nothing fires), ckpt the
	// latest checkpoint written (see hold).
	until  int64
	ckpt   int64
	cancel context.CancelFunc
	done   chan struct{}
}

// newFirer returns the firer of a projector's Kafka client cl (Run builds
// it once the client exists), firing under ctx.
func newFirer(cfg Config, store Store, clock Clock, obs Observer, log *slog.Logger, crash *crashPoints,
	cl *kgo.Client, ctx context.Context) *firer {
	f := &firer{store: store, topic: cfg.Topic, clock: clock, resync: cfg.DeadlineResync, log: log, crash: crash,
		batch: 1000, cl: cl, ctx: ctx, parts: map[int32]*partFirer{}, obs: nopTimeoutObserver{}}
	if f.resync <= 0 {
		f.resync = defaultDeadlineResync
	}
	if o, ok := obs.(timeoutObserver); ok {
		f.obs = o
	}
	return f
}

// start begins firing a partition's deadlines (on assignment).
func (f *firer) start(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts[id] != nil {
		return
	}
	pf := &partFirer{id: id, wake: make(chan struct{}, 1), done: make(chan struct{}), until: -1, ckpt: -1}
	var ctx context.Context
	ctx, pf.cancel = context.WithCancel(f.ctx)
	f.parts[id] = pf
	go func() {
		defer close(pf.done)
		f.run(ctx, pf)
	}()
}

// stop stops firing partitions (on revocation, loss and shutdown) and
// waits until their goroutines are done: a produce in flight is abandoned
// (its entry stays armed, so the partition's next owner fires it again,
// a duplicate by eventId if the first one was written).
func (f *firer) stop(ids ...int32) {
	f.mu.Lock()
	var stopped []*partFirer
	for _, id := range ids {
		if pf := f.parts[id]; pf != nil {
			pf.cancel()
			stopped = append(stopped, pf)
			delete(f.parts, id)
		}
	}
	f.mu.Unlock()
	for _, pf := range stopped {
		<-pf.done
	}
}

// stopAll stops every partition.
func (f *firer) stopAll() {
	f.mu.Lock()
	ids := make([]int32, 0, len(f.parts))
	for id := range f.parts {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	f.stop(ids...)
}

// hint tells a partition's goroutine its earliest deadline after a flush
// (the zero time: none). It never blocks.
func (f *firer) hint(id int32, next time.Time) {
	f.mu.Lock()
	pf := f.parts[id]
	f.mu.Unlock()
	if pf == nil {
		return
	}
	pf.mu.Lock()
	if !next.IsZero() && (!pf.hasHint || next.Before(pf.hinted)) {
		pf.hinted, pf.hasHint = next, true
	}
	pf.mu.Unlock()
	select {
	case pf.wake <- struct{}{}:
	default:
	}
}

// hold keeps a partition from firing until its checkpoint reaches until,
// ckpt being its checkpoint now: at assignment, until is the end of the
// log then; at a rebuild's start, the end the rebuild runs to (and ckpt
// 0). It never blocks.
func (f *firer) hold(id int32, until, ckpt int64) {
	if pf := f.part(id); pf != nil {
		pf.mu.Lock()
		pf.until, pf.ckpt = until, ckpt
		pf.mu.Unlock()
		pf.poke()
	}
}

// checkpointed tells a partition's goroutine that its checkpoint reached
// offset (after a write). It never blocks.
func (f *firer) checkpointed(id int32, offset int64) {
	if pf := f.part(id); pf != nil {
		pf.mu.Lock()
		held := pf.ckpt < pf.until
		pf.ckpt = max(pf.ckpt, offset)
		released := held && pf.ckpt >= pf.until
		pf.mu.Unlock()
		if released {
			pf.poke()
		}
	}
}

func (f *firer) part(id int32) *partFirer {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[id]
}

func (pf *partFirer) poke() {
	select {
	case pf.wake <- struct{}{}:
	default:
	}
}

// held reports whether the partition's fold has not caught up yet.
func (pf *partFirer) held() bool {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return pf.until < 0 || pf.ckpt < pf.until
}

func (pf *partFirer) takeHint() (time.Time, bool) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	t, ok := pf.hinted, pf.hasHint
	pf.hinted, pf.hasHint = time.Time{}, false
	return t, ok
}

// run is a partition's firing loop: fire what is due, then sleep until the
// next deadline, a hint or the next resync, whichever comes first. A step
// that fails (step) is retried, from a fresh reading of the clock, with
// backoff; the attempts count again after each step that succeeds.
func (f *firer) run(ctx context.Context, pf *partFirer) {
	log := f.log.With("partition", pf.id)
	var st firing
	for ctx.Err() == nil {
		var wait time.Duration
		var again bool
		if retry(ctx, log, "firing deadlines", func(ctx context.Context) (err error) {
			wait, again, err = f.step(ctx, pf, &st)
			return err
		}) != nil {
			return
		}
		if again {
			continue
		}
		t := f.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-pf.wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// firing is what a partition's firing loop knows between its steps.
type firing struct {
	next   time.Time // the partition's earliest deadline as known; zero: none
	synced time.Time // when next was last read from Redis
}

// step is one step of a partition's firing loop: it reads the next
// deadline again when a resync is due, takes the hints, then fires what is
// due (again: step at once again) or returns how long to sleep. A failed
// firing that ctx's end or a simulated crash explains is final.
func (f *firer) step(ctx context.Context, pf *partFirer, st *firing) (wait time.Duration, again bool, err error) {
	now := f.clock.Now()
	if st.synced.IsZero() || now.Sub(st.synced) >= f.resync {
		n, err := f.store.NextDeadline(ctx, f.topic, pf.id)
		if err != nil {
			return 0, false, fmt.Errorf("reading the next deadline: %w", err)
		}
		st.next, st.synced = n, now
	}
	if t, ok := pf.takeHint(); ok && (st.next.IsZero() || t.Before(st.next)) {
		st.next = t
	}
	if !st.next.IsZero() && !now.Before(st.next) && !pf.held() {
		n, err := f.fire(ctx, pf.id, now)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errCrashed) {
				return 0, false, final(err)
			}
			return 0, false, err
		}
		st.next = n
		return 0, true, nil
	}
	wait = f.resync - now.Sub(st.synced)
	if !st.next.IsZero() && !pf.held() {
		wait = min(wait, st.next.Sub(now))
	}
	return max(wait, 0), false, nil
}

// fire produces TimeoutExpired for the entries of a partition due at now,
// in rounds of at most batch, and returns the next deadline after them.
// An entry is taken out only after its record is acknowledged, and only if
// it still holds what was fired: a crash before that fires it again (the
// same eventId: a duplicate), and a session re-armed meanwhile keeps its
// newer entry. The entry stays marked fired until a newer version re-arms
// or disarms the session (projstore.Store.RemoveFired).
func (f *firer) fire(ctx context.Context, partition int32, now time.Time) (time.Time, error) {
	keys, err := f.auth.wait(ctx)
	if err != nil {
		return time.Time{}, err
	}
	for {
		due, next, err := f.store.DueDeadlines(ctx, f.topic, partition, now, f.batch)
		if err != nil || len(due) == 0 {
			return next, err
		}
		recs := make([]*kgo.Record, len(due))
		ends := make([]func(error), len(due))
		for i, d := range due {
			recs[i] = timeoutRecord(f.topic, d)
			keys.Sign(recs[i])
			ends[i] = f.obs.TimeoutFired(d, now.Sub(d.Due()), recs[i])
		}
		res := f.cl.ProduceSync(ctx, recs...)
		for i, r := range res {
			ends[i](r.Err)
		}
		if err := res.FirstErr(); err != nil {
			return time.Time{}, err
		}
		if f.crash.at(crashFired) {
			return time.Time{}, errCrashed
		}
		if _, err := f.store.RemoveFired(ctx, f.topic, partition, due); err != nil {
			return time.Time{}, err
		}
		if len(due) < f.batch {
			return next, nil
		}
	}
}

// timeoutRecord is the TimeoutExpired of a deadline (docs/timeouts.md): on the
// session's key, occurredAt the deadline (never the wall time), an eventId
// derived from (sessionId, kind, armedVersion), so that firing it again is
// a duplicate, and the system's origin header, without which the projector
// would set a record with that id aside.
func timeoutRecord(topic string, d projstore.ArmedDeadline) *kgo.Record {
	at := d.Due()
	e := fsm.NewEvent(TimeoutEventID(d.SessionID, d.Kind, d.Version), d.SessionID, fsm.TimeoutExpired, at,
		fsm.Fields{Timeout: d.Kind, ArmedVersion: d.Version, HasArmedVersion: true, Deadline: at})
	return &kgo.Record{Topic: topic, Key: []byte(d.SessionID), Value: fsm.AppendRecord(make([]byte, 0, 256), &e),
		Headers: []kgo.RecordHeader{{Key: kafka.HeaderEventType, Value: []byte(e.TypeName())}, kafka.SystemHeader()}}
}

// TimeoutEventID is the eventId of the TimeoutExpired that a deadline of
// kind armed at version of a session produces, derived by
// fsm.DeriveEventID from the type, the session, the kind and the version,
// so every firing of the same deadline, from any replica and after any
// crash, carries the same id. It lies in the space reserved for the ids
// the system derives, which no client can send.
func TimeoutEventID(sessionID string, kind fsm.TimeoutKind, version uint64) fsm.EventID {
	return fsm.DeriveEventID(fsm.TimeoutExpired.String(), sessionID, kind.String(), strconv.FormatUint(version, 10))
}
