package projector

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// manualClock is a Clock that moves only when the test advances it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c       chan time.Time
	at      time.Time
	made    time.Time // the clock's time when the timer was made
	stopped atomic.Bool
}

func (t *manualTimer) C() <-chan time.Time { return t.c }
func (t *manualTimer) Stop() bool          { return !t.stopped.Swap(true) }

func newManualClock(start time.Time) *manualClock { return &manualClock{now: start} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: make(chan time.Time, 1), at: c.now.Add(d), made: c.now}
	if d <= 0 {
		t.c <- c.now
		t.stopped.Store(true)
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock by d and fires the timers now due.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped.Load():
		case !t.at.After(c.now):
			if !t.stopped.Swap(true) {
				t.c <- c.now
			}
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

// waitingSinceAdvance reports how many timers made since the clock last
// moved are waiting: a firer waits on one once it has fired what was due.
func (c *manualClock) waitingSinceAdvance() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped.Load() && t.made.Equal(c.now) {
			n++
		}
	}
	return n
}

var clockStart = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// timeoutEnv is a projector environment whose deadlines fire by a manual clock.
type timeoutEnv struct {
	*env
	clock  *manualClock
	prefix string
	n      int // event ids issued
}

func newTimeoutEnv(t *testing.T) *timeoutEnv {
	return &timeoutEnv{env: newEnv(t, 4), clock: newManualClock(clockStart), prefix: "to"}
}

func (e *timeoutEnv) config() Config {
	cfg := e.env.config("t")
	cfg.Timeouts = fsm.DefaultTimeouts()
	cfg.DeadlineResync = 50 * time.Millisecond
	return cfg
}

func (e *timeoutEnv) start(hook func(crashPoint) bool, opts ...Option) *running {
	p := New(e.config(), e.store(e.prefix), append([]Option{WithLogger(testLog()), WithClock(e.clock)}, opts...)...)
	p.crash.hook = hook
	c, cancel := contextWithCancel()
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	return r
}

func (e *timeoutEnv) event(sid string, t fsm.EventType, at time.Time, f fsm.Fields) fsm.Event {
	e.n++
	var id fsm.EventID
	id[0], id[14], id[15] = 0x7e, byte(e.n>>8), byte(e.n)
	id[6], id[8] = 0x40, 0x80
	return fsm.NewEvent(id, sid, t, at, f)
}

func timeouts(kind fsm.TimeoutKind, d time.Duration) fsm.Fields {
	var t fsm.Timeouts
	t[kind] = d
	return fsm.Fields{Timeouts: t}
}

func (e *timeoutEnv) get(sid string) *snapshot.Snapshot {
	e.t.Helper()
	s, err := e.store(e.prefix).Get(ctx, sid)
	if err != nil {
		return nil
	}
	return s
}

// advanceUntil moves the clock in steps of step until cond holds.
func (e *timeoutEnv) advanceUntil(what string, step time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for p := int32(0); p < 4; p++ {
				n, err := e.store(e.prefix).NextDeadline(ctx, topic, p)
				e.t.Logf("partition %d: next deadline %v %v", p, n, err)
			}
			e.t.Fatalf("timed out waiting for %s (clock at %v)", what, e.clock.Now())
		}
		e.clock.Advance(step)
		time.Sleep(10 * time.Millisecond) // the scenario: the clock moves a step per 10 ms, and the firers run in between
	}
}

// TestEveryTimeoutKindFires arms each kind on its own session and moves the
// clock past the deadlines: each session is cancelled by its own kind,
// then the default cancellation timeout (5m) ends it CANCELLED, forced.
func TestEveryTimeoutKindFires(t *testing.T) {
	e := newTimeoutEnv(t)
	at := clockStart.Add(-time.Second)
	var events []fsm.Event
	setups := map[fsm.TimeoutKind][]fsm.EventType{
		fsm.TimeoutExecution:    {fsm.SessionStarted},
		fsm.TimeoutInactivity:   {fsm.SessionStarted},
		fsm.TimeoutApproval:     {fsm.SessionStarted, fsm.ApprovalRequested},
		fsm.TimeoutRecovery:     {fsm.SessionStarted, fsm.RecoveryStarted},
		fsm.TimeoutCancellation: {fsm.SessionStarted, fsm.CancellationRequested},
	}
	for kind, types := range setups {
		sid := "to-" + kind.String()
		events = append(events, e.event(sid, fsm.SessionCreated, at, timeouts(kind, 10*time.Second)))
		for i, typ := range types {
			events = append(events, e.event(sid, typ, at.Add(time.Duration(i+1)*time.Millisecond), fsm.Fields{}))
		}
	}
	e.produce(events)
	r := e.start(nil)
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	for kind := range setups {
		sid := "to-" + kind.String()
		if s := e.get(sid); s == nil || s.State.Terminal() || s.State == fsm.StateCancelled {
			t.Fatalf("%s: fired before its deadline: %+v", sid, s)
		}
	}
	e.advanceUntil("every session cancelled", 2*time.Second, func() bool {
		for kind := range setups {
			if s := e.get("to-" + kind.String()); s == nil || s.State != fsm.StateCancelled {
				if e.clock.Now().After(clockStart.Add(20 * time.Minute)) {
					j, _ := s.MarshalJSON()
					t.Logf("%s", j)
				}
				return false
			}
		}
		return true
	})
	for kind := range setups {
		s := e.get("to-" + kind.String())
		if kind == fsm.TimeoutCancellation { // requested by the client, completed by the timeout at its deadline
			want := at.Add(10*time.Second + 2*time.Millisecond)
			if !s.Cancellation.Forced || s.Cancellation.CompletedAt != want.UnixNano() {
				t.Errorf("%s: completed at %v (forced %v), want forced at %v", s.ID, time.Unix(0, s.Cancellation.CompletedAt).UTC(), s.Cancellation.Forced, want)
			}
			continue
		}
		if s.Cancellation.Timeout != kind || !s.Cancellation.Forced {
			t.Errorf("%s: cancelled by %s (forced %v), want %s then the cancellation timeout", s.ID, s.Cancellation.Timeout, s.Cancellation.Forced, kind)
		}
		wantDeadline := at.Add(10 * time.Second).Add(time.Duration(len(setups[kind])) * time.Millisecond)
		if kind == fsm.TimeoutExecution {
			wantDeadline = at.Add(10 * time.Second)
		}
		if got := time.Unix(0, s.Cancellation.RequestedAt).UTC(); !got.Equal(wantDeadline) {
			t.Errorf("%s: requested at %v, want the deadline %v (occurredAt is the deadline, not the wall time)", s.ID, got, wantDeadline)
		}
	}
	if next, err := e.store(e.prefix).NextDeadline(ctx, topic, 0); err != nil || !next.IsZero() {
		// partition 0 may or may not hold a session; any armed entry left would be a leak
		for p := int32(0); p < 4; p++ {
			if n, _ := e.store(e.prefix).NextDeadline(ctx, topic, p); !n.IsZero() {
				t.Errorf("partition %d still has a deadline at %v after every session ended", p, n)
			}
		}
	}
}

// TestMovedOnIsNeverTimedOut: an event just before the deadline wins. The
// deadline armed at the earlier version, fired late, is superseded, and
// the session is cancelled only by the deadline re-armed from that event.
func TestMovedOnIsNeverTimedOut(t *testing.T) {
	e := newTimeoutEnv(t)
	at := clockStart.Add(-time.Second)
	created := e.event("quiet", fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 5*time.Second))
	started := e.event("quiet", fsm.SessionStarted, at, fsm.Fields{})
	e.produce([]fsm.Event{created, started})
	r := e.start(nil)
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	s := e.get("quiet")
	armedV := s.Version
	deadline := at.Add(5 * time.Second)
	// The session moves on 1 ms before its deadline, and the stale deadline
	// fires anyway (as a firer that read it just before the re-arm would).
	e.produce([]fsm.Event{e.event("quiet", fsm.ModelRequested, deadline.Add(-time.Millisecond), fsm.Fields{})})
	e.waitCaughtUp(e.prefix, 30*time.Second)
	cl := e.client()
	defer cl.Close()
	stale := timeoutRecord(topic, projstore.ArmedDeadline{SessionID: "quiet", Kind: fsm.TimeoutInactivity, At: deadline.UnixNano(), Version: armedV})
	e.systemKeys().Sign(stale) // as the firer signs it
	if err := cl.ProduceSync(ctx, stale).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(deadline.Sub(clockStart) + time.Second) // past the stale deadline, before the re-armed one
	// A (wrong) firing of the old deadline happens before its partition's
	// firer waits again: once every firer waits, anything fired is folded
	// by the next catch-up.
	testwait.Until(t, "every partition's firer waiting again", 30*time.Second, func() bool { return e.clock.waitingSinceAdvance() >= 4 })
	e.waitCaughtUp(e.prefix, 30*time.Second)
	s = e.get("quiet")
	if s.State != fsm.StateActive || s.Counters.SupersededTimeouts != 1 {
		t.Fatalf("after the stale deadline: state %s, superseded %d; want ACTIVE, 1", s.State, s.Counters.SupersededTimeouts)
	}
	e.advanceUntil("the re-armed deadline fires", 500*time.Millisecond, func() bool {
		s := e.get("quiet")
		return s != nil && s.State == fsm.StateCancelling
	})
	if s := e.get("quiet"); s.Cancellation.RequestedAt != deadline.Add(-time.Millisecond+5*time.Second).UnixNano() {
		t.Fatalf("cancelled at %v, want 5s after the last event", time.Unix(0, s.Cancellation.RequestedAt).UTC())
	}
}

// TestDeadlinesSurviveCrashes kills the projector at random points (while
// folding, around every step of a write, right after a firing before its
// entry is removed) while deadlines are due, and restarts it: every session
// ends CANCELLED through exactly one inactivity and one cancellation
// timeout, and none is lost.
func TestDeadlinesSurviveCrashes(t *testing.T) {
	e := newTimeoutEnv(t)
	const sessions = 60
	at := clockStart.Add(-time.Second)
	var events []fsm.Event
	for i := range sessions {
		sid := fmt.Sprintf("c-%02d", i)
		f := timeouts(fsm.TimeoutInactivity, 2*time.Second)
		f.Timeouts[fsm.TimeoutCancellation] = 3 * time.Second
		events = append(events, e.event(sid, fsm.SessionCreated, at, f),
			e.event(sid, fsm.SessionStarted, at.Add(time.Duration(i)*100*time.Millisecond), fsm.Fields{}))
	}
	e.produce(events)
	points := []crashPoint{crashFold, crashBeforePut, crashAfterPut, crashAfterDeadlines, crashBeforeCheckpoint, crashAfterCheckpoint, crashFired}
	rng := rand.New(rand.NewPCG(7, 7))
	crashes := 0
	done := func() bool {
		for i := range sessions {
			if s := e.get(fmt.Sprintf("c-%02d", i)); s == nil || s.State != fsm.StateCancelled {
				return false
			}
		}
		return true
	}
	for round := 0; !done(); round++ {
		if round > 200 {
			t.Fatalf("not all sessions cancelled after %d rounds", round)
		}
		point := points[rng.IntN(len(points))]
		r := e.start(crashAt(point, int64(1+rng.IntN(3))))
		for step := 0; step < 10; step++ {
			// Real time between the steps of the test clock, so that the
			// crash points fall at different moments of the firing.
			e.clock.Advance(250 * time.Millisecond)
			time.Sleep(15 * time.Millisecond) // the scenario: the crash falls somewhere in the firing
		}
		select {
		case err := <-r.done:
			if err != nil {
				crashes++
			}
		default:
			if err := r.halt(); err != nil && err != errCrashed {
				t.Fatalf("round %d: %v", round, err)
			} else if err == errCrashed {
				crashes++
			}
		}
	}
	t.Logf("%d crashes", crashes)
	r := e.start(nil)
	e.waitCaughtUp(e.prefix, 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	fired := e.firedRecords()
	for i := range sessions {
		s := e.get(fmt.Sprintf("c-%02d", i))
		var cancelling, cancelled int
		for j := range s.NumTransitions() {
			switch tr := s.TransitionAt(j); tr.To {
			case fsm.StateCancelling:
				cancelling++
			case fsm.StateCancelled:
				cancelled++
			}
		}
		if cancelling != 1 || cancelled != 1 || s.Cancellation.Timeout != fsm.TimeoutInactivity || !s.Cancellation.Forced {
			t.Errorf("%s: %d CANCELLING, %d CANCELLED, timeout %s, forced %v", s.ID, cancelling, cancelled, s.Cancellation.Timeout, s.Cancellation.Forced)
		}
		if want := uint64(fired[s.ID]) - 2; s.Counters.Duplicates+s.Counters.SupersededTimeouts != want {
			t.Errorf("%s: %d timeouts produced, %d duplicates + %d superseded, want %d", s.ID, fired[s.ID], s.Counters.Duplicates, s.Counters.SupersededTimeouts, want)
		}
	}
	if crashes == 0 {
		t.Fatal("no crash happened")
	}
}

// firedRecords counts the TimeoutExpired records in the topic by session.
func (e *timeoutEnv) firedRecords() map[string]int {
	e.t.Helper()
	ends := endOffsets(e.t, e.brokers)
	cl := e.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var total, want int64
	for _, end := range ends {
		want += end
	}
	out := map[string]int{}
	for total < want {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			total++
			var ev fsm.Event
			if fsm.DecodeRecord(r.Value, &ev) == nil && ev.Type == fsm.TimeoutExpired {
				out[ev.SessionID]++
			}
		})
	}
	return out
}

// TestCrashBetweenSnapshotsAndDeadlines crashes a write after its
// snapshots are stored and before their deadlines are: the restart replays
// records its snapshots already reflect, and must arm them all the same.
func TestCrashBetweenSnapshotsAndDeadlines(t *testing.T) {
	for _, point := range []crashPoint{crashAfterPut, crashAfterDeadlines, crashFired} {
		t.Run(point.String(), func(t *testing.T) {
			e := newTimeoutEnv(t)
			at := clockStart.Add(-time.Second)
			var events []fsm.Event
			for i := range 20 {
				sid := fmt.Sprintf("k-%02d", i)
				events = append(events, e.event(sid, fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 2*time.Second)))
			}
			e.produce(events)
			r := e.start(crashAt(point, 1))
			if point == crashFired {
				e.advanceUntil("a crash after firing", time.Second, func() bool { return r.p.crash.crashed.Load() })
			}
			if err := <-r.done; err != errCrashed {
				t.Fatalf("got %v, want the simulated crash", err)
			}
			r = e.start(nil)
			defer r.halt()
			e.advanceUntil("every session cancelling", 500*time.Millisecond, func() bool {
				for i := range 20 {
					if s := e.get(fmt.Sprintf("k-%02d", i)); s == nil || s.State != fsm.StateCancelling {
						return false
					}
				}
				return true
			})
		})
	}
}

// takesTheFirersID returns a record for sid, written to the topic by
// another producer than the projector, that carries the eventId the firer
// will give the session's deadline of kind armed at version, in an event
// the table rejects in CREATED (so it leaves the session at that version).
// With system set it also carries the header the projector and the firer
// set on what they produce.
// idleSessions creates n sessions named by format (with their index) at
// clockStart-1s with a 5 s inactivity timeout, starts a projector and waits
// until it folded them; it returns the projector and the creation time.
func (e *timeoutEnv) idleSessions(format string, n int) (*running, time.Time) {
	at := clockStart.Add(-time.Second)
	var events []fsm.Event
	for i := range n {
		events = append(events, e.event(fmt.Sprintf(format, i), fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 5*time.Second)))
	}
	e.produce(events)
	r := e.start(nil)
	e.waitCaughtUp(e.prefix, 30*time.Second)
	return r, at
}

// systemKeys reads the system key the projector keeps in the topic's
// <topic>.system (systemkey.Ensure without creating it).
func (e *env) systemKeys() *systemkey.Keys {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	k, err := systemkey.Ensure(ctx, kadm.NewClient(cl), cl, systemkey.Source{Kafka: e.config("keys").Kafka, Events: topic})
	if err != nil || k == nil {
		e.t.Fatalf("the system key: %v, %v", k, err)
	}
	return k
}

// forgeTimeouts writes straight to the topic, for each of the n sessions
// idleSessions made, a record with the id the firer will use for its
// inactivity timeout (takesTheFirersID), with the system's header or not.
// With signed, the record also carries a MAC under the system key, as
// only the system can write it.
func (e *timeoutEnv) forgeTimeouts(format string, n int, at time.Time, system bool, signed ...bool) {
	e.t.Helper()
	cl := e.client()
	defer cl.Close()
	var keys *systemkey.Keys
	if len(signed) > 0 && signed[0] {
		keys = e.systemKeys()
	}
	for i := range n {
		sid := fmt.Sprintf(format, i)
		rec := takesTheFirersID(sid, fsm.TimeoutInactivity, e.get(sid).Version, at.Add(time.Millisecond), system)
		keys.Sign(rec)
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func takesTheFirersID(sid string, kind fsm.TimeoutKind, version uint64, at time.Time, system bool) *kgo.Record {
	e := fsm.NewEvent(TimeoutEventID(sid, kind, version), sid, fsm.SessionCompleted, at, fsm.Fields{})
	r := &kgo.Record{Topic: topic, Key: []byte(sid), Value: fsm.AppendRecord(nil, &e)}
	if system {
		r.Headers = append(r.Headers, kafka.SystemHeader())
	}
	return r
}

// TestAnUnappliedTimeoutIsNotFiredAgain: a deadline whose TimeoutExpired
// the fold does not apply (here a duplicate: a record that carries the
// system's header and the firer's id came first, as a producer that
// forges the header could write it) leaves the session at the version it was
// armed at, and the write re-arms the same deadline. It is fired once, not
// again and again.
func TestAnUnappliedTimeoutIsNotFiredAgain(t *testing.T) {
	e := newTimeoutEnv(t)
	const sessions = 20
	r, at := e.idleSessions("storm-%02d", sessions)
	defer r.halt()
	e.forgeTimeouts("storm-%02d", sessions, at, true, true)
	e.waitCaughtUp(e.prefix, 30*time.Second)
	e.clock.Advance(10 * time.Second)
	testwait.Until(t, "every firing folded", 30*time.Second, func() bool {
		for i := range sessions {
			if s := e.get(fmt.Sprintf("storm-%02d", i)); s == nil || s.Counters.Duplicates == 0 {
				return false
			}
		}
		return true
	})
	// Each write of the duplicates re-arms the deadline and wakes the
	// firer; give it writes and resyncs to fire again.
	for range 5 {
		e.waitCaughtUp(e.prefix, 30*time.Second)
		e.clock.Advance(e.config().DeadlineResync)
	}
	e.waitCaughtUp(e.prefix, 30*time.Second)
	fired, total := e.firedRecords(), 0
	for i := range sessions {
		sid := fmt.Sprintf("storm-%02d", i)
		total += fired[sid]
		if s := e.get(sid); fired[sid] != 1 || s.Counters.Duplicates != 1 || s.State != fsm.StateCreated {
			t.Errorf("%s: %d TimeoutExpired produced, %d duplicates, %s; want 1, 1, CREATED", sid, fired[sid], s.Counters.Duplicates, s.State)
		}
	}
	t.Logf("%d TimeoutExpired records for %d sessions", total, sessions)
}

// TestAFoldFromTheStartFiresNothingPast: a read model lost and folded
// again from the log's start an hour later, in batches small enough that
// the sessions' passing states are written (and their deadlines armed) on
// the way, fires none of the deadlines those states armed, which are past
// by then: every session's events and superseded timeouts are what the
// first fold counted.
func TestAFoldFromTheStartFiresNothingPast(t *testing.T) {
	e := newTimeoutEnv(t)
	var events []fsm.Event
	for i := range 12 {
		sid := fmt.Sprintf("past-%02d", i)
		at := clockStart.Add(time.Duration(i) * time.Second)
		events = append(events,
			e.event(sid, fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 10*time.Minute)),
			e.event(sid, fsm.SessionStarted, at.Add(time.Second), fsm.Fields{}),
			e.event(sid, fsm.ModelRequested, at.Add(2*time.Second), fsm.Fields{}),
			e.event(sid, fsm.SessionCompleted, at.Add(3*time.Second), fsm.Fields{}))
	}
	e.produce(events)
	cfg := e.config()
	cfg.MaxPollRecords, cfg.FlushSize = 1, 1 // a write per event: every passing state's deadline is armed
	run := func() {
		p := New(cfg, e.store(e.prefix), WithLogger(testLog()), WithClock(e.clock))
		c, cancel := contextWithCancel()
		r := &running{p: p, stop: cancel, done: make(chan error, 1)}
		go func() { r.done <- p.Run(c) }()
		e.waitCaughtUp(e.prefix, 60*time.Second)
		// Anything a firer fired is folded once every firer waits again.
		testwait.Until(t, "every partition's firer waiting", 30*time.Second, func() bool { return e.clock.waitingSinceAdvance() >= 4 })
		e.waitCaughtUp(e.prefix, 60*time.Second)
		if err := r.halt(); err != nil {
			t.Fatal(err)
		}
	}
	counted := func() map[string][2]uint64 {
		out := map[string][2]uint64{}
		for i := range 12 {
			sid := fmt.Sprintf("past-%02d", i)
			s := e.get(sid)
			if s == nil || s.State != fsm.StateCompleted {
				t.Fatalf("%s: %+v, want COMPLETED", sid, s)
			}
			out[sid] = [2]uint64{s.Counters.Events, s.Counters.SupersededTimeouts}
		}
		return out
	}
	run() // the first fold, at the sessions' own time: nothing is due
	first := counted()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour) // every deadline armed on the way is past
	run()                      // the fold from the log's start
	if again := counted(); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("[events superseded] per session after the fold from the start: %v; the first fold: %v", again, first)
	}
}
