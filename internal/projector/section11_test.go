package projector

import (
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// quiet moves the clock by d and waits until every partition's firer waits
// again and the log is folded: whatever the move fired is in the snapshots.
func (e *timeoutEnv) quiet(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	testwait.Until(e.t, "every partition's firer waiting again", 30*time.Second, func() bool { return e.clock.waitingSinceAdvance() >= 4 })
	e.waitSettled(e.prefix)
}

// state returns sid's state, or StateNone when it is not stored.
func (e *timeoutEnv) state(sid string) fsm.State {
	if s := e.get(sid); s != nil {
		return s.State
	}
	return fsm.StateNone
}

// TestSection11ExecutionBudget: the execution timeout is a budget of
// running time (11.4). Running 4m, paused 30m, running 3m, awaiting
// approval 20m, then running: the budget of 10m is used up 3m after the
// grant, 57m later than it would run out by the wall, and the timeout
// fires then, not a moment before.
func TestSection11ExecutionBudget(t *testing.T) {
	e := newTimeoutEnv(t)
	t0 := clockStart
	sid := "budget"
	e.produce([]fsm.Event{
		e.event(sid, fsm.SessionCreated, t0, timeouts(fsm.TimeoutExecution, 10*time.Minute)),
		e.event(sid, fsm.SessionStarted, t0, fsm.Fields{}),
		e.event(sid, fsm.SessionPaused, t0.Add(4*time.Minute), fsm.Fields{}),
		e.event(sid, fsm.SessionResumed, t0.Add(34*time.Minute), fsm.Fields{}),
		e.event(sid, fsm.ApprovalRequested, t0.Add(37*time.Minute), fsm.Fields{RequestID: "r-1", HasRequestID: true}),
		e.event(sid, fsm.ApprovalGranted, t0.Add(57*time.Minute), fsm.Fields{RequestID: "r-1", HasRequestID: true}),
	})
	r := e.start(nil)
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	want := t0.Add(60 * time.Minute) // 4m + 3m + 3m of running time
	if s := e.get(sid); s == nil || s.State != fsm.StateActive || s.ExecutionUsed() != int64(7*time.Minute) {
		t.Fatalf("after the grant: %+v", s)
	}
	// By the wall the budget ran out at t0+10m, and after the pause at
	// t0+40m: neither fires, nor does a second before the budget's end.
	for _, at := range []time.Duration{10*time.Minute + time.Second, 30 * time.Minute, 19*time.Minute + 58*time.Second} {
		e.quiet(at)
		if st := e.state(sid); st != fsm.StateActive {
			t.Fatalf("clock at %v (%v before the budget ends): %v, want ACTIVE", e.clock.Now(), want.Sub(e.clock.Now()), st)
		}
	}
	if got := e.clock.Now(); !got.Equal(want.Add(-time.Second)) {
		t.Fatalf("clock at %v, want %v", got, want.Add(-time.Second))
	}
	e.quiet(time.Second)
	s := e.get(sid)
	if s.State != fsm.StateCancelling || s.Cancellation.Timeout != fsm.TimeoutExecution {
		t.Fatalf("at the budget's end: %v, cancellation %+v; want CANCELLING by the execution timeout", s.State, s.Cancellation)
	}
	if got := time.Unix(0, s.Cancellation.RequestedAt).UTC(); !got.Equal(want) {
		t.Fatalf("execution timeout at %v, want %v", got, want)
	}
}

// TestSection11ForcedCancel: a forced CancellationRequested ends the
// session CANCELLED, forced, with the default grace of 0, within a second
// of the request by the projector's clock (11.6), and its children get
// forced cancellations and end the same way.
func TestSection11ForcedCancel(t *testing.T) {
	e := newTimeoutEnv(t)
	t0 := clockStart
	e.produce([]fsm.Event{
		e.event("fp", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("fp", fsm.SessionStarted, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("fk1", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{ParentSessionID: "fp"}),
		e.event("fk1", fsm.SessionStarted, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("fk2", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{ParentSessionID: "fp"}),
	})
	r := e.start(nil)
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	e.produce([]fsm.Event{e.event("fp", fsm.CancellationRequested, t0, fsm.Fields{Reason: "stop", Mode: fsm.CancelForced})})
	ids := []string{"fp", "fk1", "fk2"}
	e.advanceUntil("the family cancelled", 50*time.Millisecond, func() bool {
		for _, id := range ids {
			if e.state(id) != fsm.StateCancelled {
				return false
			}
		}
		return true
	})
	if d := e.clock.Now().Sub(t0); d > time.Second {
		t.Errorf("cancelled %v after the request, want within a second", d)
	}
	for _, id := range ids {
		s := e.get(id)
		cn := s.Cancellation
		if cn.Mode != fsm.CancelForced || !cn.Forced || cn.CompletedAt != t0.UnixNano() {
			t.Errorf("%s: cancellation %+v, want forced, completed at %v", id, cn, t0)
		}
		if id != "fp" && cn.Reason != ReasonParentCancelled {
			t.Errorf("%s: reason %q, want %s", id, cn.Reason, ReasonParentCancelled)
		}
		if s.Counters.Rejected != 0 {
			t.Errorf("%s: %d rejected", id, s.Counters.Rejected)
		}
	}
}

// escalated reports the index of s's CANCELLING->CANCELLING transition, or -1.
func escalated(s *snapshot.Snapshot) int {
	for i := range s.NumTransitions() {
		if t := s.TransitionAt(i); t.From == fsm.StateCancelling && t.To == fsm.StateCancelling {
			return i
		}
	}
	return -1
}

// TestSection11Escalation: a forced request escalates a graceful
// CANCELLING (11.6): a CANCELLING -> CANCELLING transition is recorded,
// and the session ends CANCELLED at the forced deadline (the escalation,
// grace 0), not when the graceful cancellation timeout (5m) would have
// ended it. The escalation reaches the children its graceful
// cancellation cancelled: each gets a forced cancellation of its own,
// which escalates it in turn.
func TestSection11Escalation(t *testing.T) {
	e := newTimeoutEnv(t)
	t0 := clockStart
	e.produce([]fsm.Event{
		e.event("ep", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("ep", fsm.SessionStarted, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("ek", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{ParentSessionID: "ep"}),
		e.event("ek", fsm.SessionStarted, t0.Add(-time.Minute), fsm.Fields{}),
		e.event("eg", fsm.SessionCreated, t0.Add(-time.Minute), fsm.Fields{ParentSessionID: "ek"}),
		e.event("ep", fsm.CancellationRequested, t0, fsm.Fields{Reason: "stop"}),
	})
	r := e.start(nil)
	defer r.halt()
	e.waitSettled(e.prefix)
	e.quiet(time.Minute)
	ids := []string{"ep", "ek", "eg"}
	for _, id := range ids {
		if s := e.get(id); s == nil || s.State != fsm.StateCancelling || s.Cancellation.Mode != fsm.CancelGraceful {
			t.Fatalf("%s before the escalation: %+v, want CANCELLING, graceful", id, s)
		}
	}
	forcedAt := t0.Add(time.Minute)
	e.produce([]fsm.Event{e.event("ep", fsm.CancellationRequested, forcedAt, fsm.Fields{Reason: "now", Mode: fsm.CancelForced})})
	e.advanceUntil("the parent cancelled", 100*time.Millisecond, func() bool { return e.state("ep") == fsm.StateCancelled })
	e.quiet(time.Second)
	if d := e.clock.Now().Sub(forcedAt); d > 2*time.Second {
		t.Errorf("clock %v after the forced request, want within 2s", d)
	}
	for _, id := range ids {
		s := e.get(id)
		cn := s.Cancellation
		if s.State != fsm.StateCancelled || cn.Mode != fsm.CancelForced || !cn.Forced || cn.EscalatedAt != forcedAt.UnixNano() ||
			cn.CompletedAt != forcedAt.UnixNano() || cn.RequestedAt != t0.UnixNano() {
			t.Errorf("%s: %v, cancellation %+v; want CANCELLED, escalated and completed at %v, requested at %v",
				id, s.State, cn, forcedAt, t0)
			continue
		}
		if i := escalated(s); i < 0 || s.TransitionAt(i).At != forcedAt.UnixNano() {
			t.Errorf("%s: no CANCELLING -> CANCELLING transition at %v", id, forcedAt)
		}
		if s.Counters.Rejected != 0 {
			t.Errorf("%s: %d rejected", id, s.Counters.Rejected)
		}
	}
}

// TestSection11ReplacementRefusals: a successor whose predecessor refuses
// the replacement ends FAILED with failure category policy, code
// replacement_refused and the refusal's reason (11.2), for each reason,
// end to end: the successor's creation, the derived SessionReplaced, the
// predecessor's refusal and the derived ReplacementRefused.
func TestSection11ReplacementRefusals(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xb1)
	infra := fsm.Fields{Reason: "node lost", Category: "infrastructure"}
	failed := func(id string, f fsm.Fields, extra fsm.Fields) []fsm.Event {
		return []fsm.Event{ev(id, fsm.SessionCreated, extra), ev(id, fsm.SessionStarted, fsm.Fields{}), ev(id, fsm.SessionFailed, f)}
	}
	succ := func(id, pred string) fsm.Event {
		return ev(id, fsm.SessionCreated, fsm.Fields{PredecessorSessionID: pred})
	}
	var setup []fsm.Event
	setup = append(setup, ev("rp-active", fsm.SessionCreated, fsm.Fields{}), ev("rp-active", fsm.SessionStarted, fsm.Fields{}))
	setup = append(setup, failed("rp-provider", fsm.Fields{Reason: "503", Category: "provider"}, fsm.Fields{})...)
	setup = append(setup, failed("rp-base", infra, fsm.Fields{})...)
	setup = append(setup, failed("rp-replaced", infra, fsm.Fields{})...)
	e.produce(setup)
	r := e.start(e.config("a"), "refuse", nil)
	defer r.halt()
	e.waitSettled("refuse")
	// rp-chain replaces rp-base, and rp-replaced gets its successor.
	e.produce([]fsm.Event{succ("rp-chain", "rp-base"), succ("rs-first", "rp-replaced")})
	e.waitSettled("refuse")
	e.produce([]fsm.Event{ev("rp-chain", fsm.SessionStarted, fsm.Fields{}), ev("rp-chain", fsm.SessionFailed, infra)})
	e.waitSettled("refuse")
	st := e.store("refuse")
	for _, id := range []string{"rp-chain", "rs-first"} {
		if s, err := st.Get(ctx, id); err != nil || s.Replacement.Status != fsm.ReplacementStatusLinked {
			t.Fatalf("%s: %+v %v, want linked", id, s, err)
		}
	}
	cases := []struct{ successor, predecessor, reason string }{
		{"rs-not-failed", "rp-active", fsm.RefusalNotFailed},
		{"rs-not-infra", "rp-provider", fsm.RefusalNotInfrastructure},
		{"rs-chain", "rp-chain", fsm.RefusalChain},
		{"rs-second", "rp-replaced", fsm.RefusalAlreadyReplaced},
		{"rs-orphan", "rp-none", fsm.RefusalUnknownPredecessor},
	}
	var events []fsm.Event
	for _, c := range cases {
		events = append(events, succ(c.successor, c.predecessor))
	}
	e.produce(events)
	e.waitSettled("refuse")
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			s, err := st.Get(ctx, c.successor)
			if err != nil {
				t.Fatal(err)
			}
			f := s.Failure
			if s.State != fsm.StateFailed || f.Category != fsm.FailurePolicy || f.Code != fsm.RefusalCode || f.Reason != c.reason {
				t.Errorf("%s: %v, failure %+v; want FAILED policy/%s %q", c.successor, s.State, f, fsm.RefusalCode, c.reason)
			}
			if s.Replacement.Status != fsm.ReplacementStatusRefused || s.Replacement.Reason != c.reason {
				t.Errorf("%s: replacement %+v, want refused %q", c.successor, s.Replacement, c.reason)
			}
		})
	}
}

// TestSection11ApprovalRequestID: a decision naming another request than
// the pending one is rejected approval_mismatch through the pipeline, and
// leaves the session AWAITING_APPROVAL; the decision naming the pending
// request applies (11.7).
func TestSection11ApprovalRequestID(t *testing.T) {
	e := newEnv(t, 4)
	ev := eventsOf(0xa7)
	req := func(id string) fsm.Fields { return fsm.Fields{RequestID: id, HasRequestID: true} }
	wrong := ev("ap", fsm.ApprovalGranted, req("r-other"))
	e.produce([]fsm.Event{ev("ap", fsm.SessionCreated, fsm.Fields{}), ev("ap", fsm.SessionStarted, fsm.Fields{}),
		ev("ap", fsm.ApprovalRequested, req("r-1")), wrong})
	r := e.start(e.config("a"), "appr", nil)
	defer r.halt()
	e.waitSettled("appr")
	st := e.store("appr")
	s, err := st.Get(ctx, "ap")
	if err != nil {
		t.Fatal(err)
	}
	if s.State != fsm.StateAwaitingApproval || s.NumRejections() != 1 || s.RejectionAt(0).Reason != fsm.ReasonApprovalMismatch ||
		s.RejectionAt(0).EventID != wrong.ID || s.NumDecisions() != 0 {
		t.Fatalf("after the mismatched decision: %v, %d rejections, %d decisions; want AWAITING_APPROVAL, one approval_mismatch",
			s.State, s.NumRejections(), s.NumDecisions())
	}
	e.produce([]fsm.Event{ev("ap", fsm.ApprovalGranted, req("r-1"))})
	e.waitSettled("appr")
	if s, err = st.Get(ctx, "ap"); err != nil {
		t.Fatal(err)
	}
	if s.State != fsm.StateActive || s.NumRejections() != 1 || s.NumDecisions() != 1 || s.DecisionAt(0).RequestID != "r-1" {
		t.Fatalf("after the matching decision: %v, %d rejections, %d decisions; want ACTIVE, the grant of r-1",
			s.State, s.NumRejections(), s.NumDecisions())
	}
}
