package fsm_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

// builder folds events into one session with increasing ids and times.
type builder struct {
	t   testing.TB
	s   fsm.Session
	r   fsm.Reducer
	n   int
	at  time.Time
	out []fsm.Outcome
}

func newBuilder(t testing.TB) *builder { return &builder{t: t, at: t0} }

func (b *builder) id() fsm.EventID {
	b.n++
	var id fsm.EventID
	id[0], id[15] = 0x42, byte(b.n)
	id[14] = byte(b.n >> 8)
	id[6], id[8] = 0x40, 0x80
	return id
}

func (b *builder) apply(t fsm.EventType, f fsm.Fields) fsm.Outcome {
	b.at = b.at.Add(250 * time.Millisecond)
	e := fsm.NewEvent(b.id(), "s-1", t, b.at, f)
	o := b.r.Apply(&b.s, &e)
	b.out = append(b.out, o)
	return o
}

// reach drives a new session into state st along a path the design allows.
func reach(tb testing.TB, st fsm.State) *builder {
	b := newBuilder(tb)
	paths := map[fsm.State][]fsm.EventType{
		fsm.StateCreated:          {fsm.SessionCreated},
		fsm.StateInitializing:     {fsm.SessionCreated, fsm.SessionInitializing},
		fsm.StateActive:           {fsm.SessionCreated, fsm.SessionStarted},
		fsm.StatePaused:           {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused},
		fsm.StateAwaitingApproval: {fsm.SessionCreated, fsm.SessionStarted, fsm.ApprovalRequested},
		fsm.StateCancelling:       {fsm.SessionCreated, fsm.SessionStarted, fsm.CancellationRequested},
		fsm.StateCancelled:        {fsm.SessionCreated, fsm.SessionStarted, fsm.CancellationRequested, fsm.SessionCancelled},
		fsm.StateFailed:           {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionFailed},
		fsm.StateCompleted:        {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionCompleted},
		fsm.StateRecovering:       {fsm.SessionCreated, fsm.SessionStarted, fsm.RecoveryStarted},
	}
	for _, et := range paths[st] {
		if o := b.apply(et, fsm.Fields{}); o.Result != fsm.Applied {
			tb.Fatalf("reach %s: %s: %+v", st, et, o)
		}
	}
	if b.s.State != st {
		tb.Fatalf("reach %s: in %s", st, b.s.State)
	}
	return b
}

// TestTransitionMatrix applies every event (and every timeout kind) in every
// state and checks the outcome against docs/lifecycle.md, written out here
// independently of fsm.Table.
func TestTransitionMatrix(t *testing.T) {
	const (
		C, I, A, P, W = fsm.StateCreated, fsm.StateInitializing, fsm.StateActive, fsm.StatePaused, fsm.StateAwaitingApproval
		K, X, F, D, R = fsm.StateCancelling, fsm.StateCancelled, fsm.StateFailed, fsm.StateCompleted, fsm.StateRecovering
	)
	nonTerminal := []fsm.State{C, I, A, P, W, K, R}
	except := func(set []fsm.State, s fsm.State) []fsm.State {
		var out []fsm.State
		for _, x := range set {
			if x != s {
				out = append(out, x)
			}
		}
		return out
	}
	type row struct {
		event   fsm.EventType
		timeout fsm.TimeoutKind
		from    []fsm.State
		to      fsm.State // 0: the state recovery started from
	}
	rows := []row{
		{fsm.SessionInitializing, 0, []fsm.State{C}, I},
		{fsm.SessionStarted, 0, []fsm.State{C, I}, A},
		{fsm.SessionPaused, 0, []fsm.State{A}, P},
		{fsm.SessionResumed, 0, []fsm.State{P}, A},
		{fsm.ApprovalRequested, 0, []fsm.State{A}, W},
		{fsm.ApprovalGranted, 0, []fsm.State{W}, A},
		{fsm.ApprovalDenied, 0, []fsm.State{W}, A},
		{fsm.CancellationRequested, 0, except(nonTerminal, K), K},
		{fsm.SessionCancelled, 0, []fsm.State{K}, X},
		{fsm.SessionCompleted, 0, []fsm.State{A}, D},
		{fsm.SessionFailed, 0, nonTerminal, F},
		{fsm.RecoveryStarted, 0, []fsm.State{I, A, P, W}, R},
		{fsm.RecoveryCompleted, 0, []fsm.State{R}, 0},
		{fsm.TimeoutExpired, fsm.TimeoutExecution, except(nonTerminal, K), K},
		{fsm.TimeoutExpired, fsm.TimeoutInactivity, except(nonTerminal, K), K},
		{fsm.TimeoutExpired, fsm.TimeoutApproval, []fsm.State{W}, K},
		{fsm.TimeoutExpired, fsm.TimeoutRecovery, []fsm.State{R}, K},
		{fsm.TimeoutExpired, fsm.TimeoutCancellation, []fsm.State{K}, X},
	}
	// +2: SessionCreated, and ReplacementRefused (non-terminal to FAILED),
	// which applies only to a pending successor (the vectors of
	// lifecycle-3.json cover it).
	if got, want := len(fsm.Table()), len(rows)+2; got != want {
		t.Fatalf("fsm.Table has %d rows, the design %d", got, want)
	}
	for _, rw := range rows {
		for _, st := range fsm.States() {
			name := fmt.Sprintf("%s/%s/from_%s", rw.event, rw.timeout, st)
			t.Run(name, func(t *testing.T) {
				b := reach(t, st)
				before := b.s
				o := b.apply(rw.event, fsm.Fields{Timeout: rw.timeout})
				allowed := false
				for _, f := range rw.from {
					allowed = allowed || f == st
				}
				switch {
				case allowed:
					want := rw.to
					if want == 0 {
						want = fsm.StateActive // reach(RECOVERING) recovers from ACTIVE
					}
					if o.Result != fsm.Applied || b.s.State != want {
						t.Fatalf("got %+v in %s, want applied to %s", o, b.s.State, want)
					}
					if b.s.Version != before.Version+1 {
						t.Errorf("version: got %d, want %d", b.s.Version, before.Version+1)
					}
				case st.Terminal():
					if o.Result != fsm.Rejected || o.Reason != fsm.ReasonAfterTerminal {
						t.Fatalf("got %+v, want rejected after_terminal", o)
					}
				default:
					if o.Result != fsm.Rejected || o.Reason != fsm.ReasonInvalidTransition {
						t.Fatalf("got %+v, want rejected invalid_transition", o)
					}
				}
				if o.Result == fsm.Rejected {
					if b.s.State != st || b.s.Version != before.Version || b.s.Counters.Rejected != 1 {
						t.Errorf("rejected event changed the session: state %s version %d rejected %d",
							b.s.State, b.s.Version, b.s.Counters.Rejected)
					}
					if b.s.Digest != before.Digest {
						t.Error("rejected event changed the digest")
					}
				}
			})
		}
	}
}

// TestExecutionEvents checks counters in ACTIVE and the two execution
// rejection reasons everywhere else.
func TestExecutionEvents(t *testing.T) {
	for _, et := range []fsm.EventType{fsm.ModelRequested, fsm.ToolRequested, fsm.ToolCompleted, fsm.RepairStarted} {
		for _, st := range fsm.States() {
			t.Run(et.String()+"/"+st.String(), func(t *testing.T) {
				b := reach(t, st)
				o := b.apply(et, fsm.Fields{ToolFailed: true})
				var want fsm.Reason
				switch st {
				case fsm.StateActive:
				case fsm.StatePaused, fsm.StateAwaitingApproval, fsm.StateCancelling:
					if et == fsm.ToolCompleted { // work in flight is recorded
						if o.Result != fsm.Applied || b.s.Counters.ToolFailures != 1 || b.s.State != st {
							t.Fatalf("got %+v, want applied and counted in %s", o, st)
						}
						return
					}
					want = fsm.ReasonExecutionWhileSuspended
					if st == fsm.StateCancelling {
						want = fsm.ReasonExecutionOutsideActive
					}
				case fsm.StateCancelled, fsm.StateFailed, fsm.StateCompleted:
					want = fsm.ReasonAfterTerminal
				default:
					want = fsm.ReasonExecutionOutsideActive
				}
				if want == fsm.ReasonNone {
					c := b.s.Counters
					got := map[fsm.EventType]uint64{fsm.ModelRequested: c.ModelTurns, fsm.ToolRequested: c.ToolCalls,
						fsm.ToolCompleted: c.ToolFailures, fsm.RepairStarted: c.RepairCycles}[et]
					if o.Result != fsm.Applied || o.From != fsm.StateActive || o.To != fsm.StateActive || got != 1 {
						t.Fatalf("got %+v counter %d, want applied and counted", o, got)
					}
					return
				}
				if o.Result != fsm.Rejected || o.Reason != want {
					t.Fatalf("got %+v, want rejected %s", o, want)
				}
			})
		}
	}
	b := reach(t, fsm.StateActive)
	b.apply(fsm.ToolCompleted, fsm.Fields{ToolFailed: false})
	if b.s.Counters.ToolFailures != 0 {
		t.Errorf("ok tool completion counted as a failure")
	}
}

func TestDuplicateCreate(t *testing.T) {
	b := reach(t, fsm.StateActive)
	if o := b.apply(fsm.SessionCreated, fsm.Fields{Goal: "other"}); o.Reason != fsm.ReasonDuplicateCreate {
		t.Fatalf("got %+v, want duplicate_create", o)
	}
	if b.s.Goal != "" {
		t.Errorf("goal changed to %q", b.s.Goal)
	}
	// After a terminal state the terminal reason wins.
	b = reach(t, fsm.StateCompleted)
	if o := b.apply(fsm.SessionCreated, fsm.Fields{}); o.Reason != fsm.ReasonAfterTerminal {
		t.Fatalf("got %+v, want after_terminal", o)
	}
}

func TestOrphan(t *testing.T) {
	for _, et := range fsm.EventTypes() {
		if et == fsm.SessionCreated {
			continue
		}
		var s fsm.Session
		var r fsm.Reducer
		e := fsm.NewEvent(fsm.EventID{1}, "s-orphan", et, t0, fsm.Fields{Timeout: fsm.TimeoutExecution})
		o := r.Apply(&s, &e)
		if o.Result != fsm.Orphan || o.Reason != fsm.ReasonUnknownSession {
			t.Fatalf("%s: got %+v, want orphan unknown_session", et, o)
		}
		if s.Exists() || s.Counters.Events != 0 || s.NumSeenIDs() != 0 {
			t.Fatalf("%s: orphan changed the session: %+v", et, s)
		}
	}
}

func TestDuplicateWindow(t *testing.T) {
	b := reach(t, fsm.StateActive)
	first := fsm.NewEvent(b.id(), "s-1", fsm.ModelRequested, b.at.Add(time.Second), fsm.Fields{})
	if o := b.r.Apply(&b.s, &first); o.Result != fsm.Applied {
		t.Fatal(o)
	}
	// Within the window: a duplicate, counted, not applied.
	v := b.s.Version
	if o := b.r.Apply(&b.s, &first); o.Result != fsm.Duplicate {
		t.Fatalf("resend: got %+v, want duplicate", o)
	}
	if b.s.Version != v || b.s.Counters.ModelTurns != 1 || b.s.Counters.Duplicates != 1 {
		t.Fatalf("duplicate applied: version %d turns %d dups %d", b.s.Version, b.s.Counters.ModelTurns, b.s.Counters.Duplicates)
	}
	// A rejected event resent is a duplicate (the documented choice).
	b.apply(fsm.SessionPaused, fsm.Fields{})
	bad := fsm.NewEvent(b.id(), "s-1", fsm.ModelRequested, b.at, fsm.Fields{})
	if o := b.r.Apply(&b.s, &bad); o.Result != fsm.Rejected {
		t.Fatal(o)
	}
	if o := b.r.Apply(&b.s, &bad); o.Result != fsm.Duplicate {
		t.Fatalf("resent rejected event: got %+v, want duplicate", o)
	}
	if b.s.Counters.Rejected != 1 {
		t.Fatalf("rejected %d, want 1", b.s.Counters.Rejected)
	}
	b.apply(fsm.SessionResumed, fsm.Fields{})
	// Push the first event out of the window: it is then folded again.
	for range fsm.IDWindow {
		b.apply(fsm.ModelRequested, fsm.Fields{})
	}
	if b.s.NumSeenIDs() != fsm.IDWindow {
		t.Fatalf("window holds %d ids, want %d", b.s.NumSeenIDs(), fsm.IDWindow)
	}
	if b.s.Seen(first.ID) {
		t.Fatal("the oldest id is still in a full window")
	}
	turns := b.s.Counters.ModelTurns
	if o := b.r.Apply(&b.s, &first); o.Result != fsm.Applied || b.s.Counters.ModelTurns != turns+1 {
		t.Fatalf("event older than the window: got %+v", o)
	}
}

func TestBoundedHistory(t *testing.T) {
	b := reach(t, fsm.StateActive)
	for range 100 {
		b.apply(fsm.SessionPaused, fsm.Fields{})
		b.apply(fsm.SessionResumed, fsm.Fields{})
		b.apply(fsm.SessionResumed, fsm.Fields{}) // rejected
	}
	if n := b.s.NumTransitions(); n != fsm.TransitionsKept {
		t.Fatalf("kept %d transitions, want %d", n, fsm.TransitionsKept)
	}
	if n := b.s.NumRejections(); n != fsm.RejectionsKept {
		t.Fatalf("kept %d rejections, want %d", n, fsm.RejectionsKept)
	}
	last := b.s.TransitionAt(fsm.TransitionsKept - 1)
	if last.From != fsm.StatePaused || last.To != fsm.StateActive {
		t.Fatalf("newest transition %+v, want PAUSED->ACTIVE", last)
	}
	for i := 1; i < fsm.TransitionsKept; i++ {
		if b.s.TransitionAt(i).At <= b.s.TransitionAt(i-1).At {
			t.Fatalf("transitions out of order at %d", i)
		}
	}
	if b.s.Counters.Pauses != 100 || b.s.Counters.Rejected != 100 {
		t.Fatalf("pauses %d rejected %d", b.s.Counters.Pauses, b.s.Counters.Rejected)
	}
}

func TestRecoveryReturns(t *testing.T) {
	for _, st := range []fsm.State{fsm.StateInitializing, fsm.StateActive, fsm.StatePaused, fsm.StateAwaitingApproval} {
		b := reach(t, st)
		b.apply(fsm.RecoveryStarted, fsm.Fields{})
		if b.s.Recovery.ResumeTo != st || !b.s.Recovery.Active {
			t.Fatalf("%s: recovery %+v", st, b.s.Recovery)
		}
		o := b.apply(fsm.RecoveryCompleted, fsm.Fields{})
		if o.Result != fsm.Applied || b.s.State != st || b.s.Recovery.Active {
			t.Fatalf("%s: recovery completed into %s: %+v", st, b.s.State, o)
		}
		if o.Closed != 250*time.Millisecond {
			t.Errorf("%s: closed interval %v, want 250ms", st, o.Closed)
		}
	}
}

func TestCancellation(t *testing.T) {
	b := reach(t, fsm.StateActive)
	b.apply(fsm.CancellationRequested, fsm.Fields{Reason: "user", Mode: fsm.CancelForced})
	b.apply(fsm.SessionCancelled, fsm.Fields{})
	c := b.s.Cancellation
	// forced is set only when the cancellation timeout ends the session,
	// whatever the mode (docs/lifecycle.md).
	if !c.Requested || !c.Completed || c.Forced || c.Mode != fsm.CancelForced || c.Reason != "user" ||
		c.CompletedAt-c.RequestedAt != int64(250*time.Millisecond) {
		t.Fatalf("forced-mode cancellation: %+v", c)
	}
	b = reach(t, fsm.StatePaused)
	b.apply(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutInactivity})
	b.apply(fsm.TimeoutExpired, fsm.Fields{Timeout: fsm.TimeoutCancellation})
	c = b.s.Cancellation
	if b.s.State != fsm.StateCancelled || !c.Forced || c.Reason != "timeout:inactivity" || c.Timeout != fsm.TimeoutInactivity {
		t.Fatalf("cancellation by timeout: %s %+v", b.s.State, c)
	}
}

func TestApprovalWaitSpansRecovery(t *testing.T) {
	b := reach(t, fsm.StateAwaitingApproval)
	b.apply(fsm.RecoveryStarted, fsm.Fields{})
	b.apply(fsm.RecoveryCompleted, fsm.Fields{})
	if !b.s.Approval.Pending {
		t.Fatal("recovery ended the pending approval")
	}
	o := b.apply(fsm.ApprovalGranted, fsm.Fields{})
	if o.ApprovalWait != 750*time.Millisecond {
		t.Fatalf("outcome approval wait %v, want 750ms", o.ApprovalWait)
	}
	if b.s.Approval.Pending || b.s.Approval.Waited != int64(750*time.Millisecond) {
		t.Fatalf("approval %+v, want 750ms waited", b.s.Approval)
	}
}

func TestNegativeIntervalsClamp(t *testing.T) {
	var s fsm.Session
	var r fsm.Reducer
	e1 := fsm.NewEvent(fsm.EventID{1}, "s", fsm.SessionCreated, t0, fsm.Fields{})
	e2 := fsm.NewEvent(fsm.EventID{2}, "s", fsm.SessionStarted, t0.Add(-time.Hour), fsm.Fields{})
	r.Apply(&s, &e1)
	if o := r.Apply(&s, &e2); o.Result != fsm.Applied || o.Closed != 0 || s.Durations[fsm.StateCreated] != 0 {
		t.Fatalf("got %+v, durations %v", o, s.Durations)
	}
}

// TestStateKeepingRules restates the replacement rules of docs/lifecycle.md for
// every state: SessionReplaced applies only in FAILED (and only once), and
// never changes the state.
func TestStateKeepingRules(t *testing.T) {
	for _, st := range fsm.States() {
		b := reach(t, st)
		if st == fsm.StateFailed {
			if o := b.apply(fsm.SessionReplaced, fsm.Fields{SuccessorSessionID: "s-next"}); o.Reason != fsm.ReasonInvalidReplacement ||
				o.Refusal != fsm.RefusalNotInfrastructure {
				t.Fatalf("%s with an unknown failure: got %+v, want invalid_replacement (not_infrastructure)", st, o)
			}
			b.s.Failure.Category = fsm.FailureInfrastructure
		}
		v := b.s.Version
		o := b.apply(fsm.SessionReplaced, fsm.Fields{SuccessorSessionID: "s-next"})
		if st == fsm.StateFailed {
			if o.Result != fsm.Applied || b.s.SuccessorSessionID != "s-next" || b.s.Version != v+1 || b.s.State != st {
				t.Fatalf("%s: got %+v successor %q", st, o, b.s.SuccessorSessionID)
			}
			if o := b.apply(fsm.SessionReplaced, fsm.Fields{SuccessorSessionID: "s-other"}); o.Reason != fsm.ReasonInvalidReplacement {
				t.Fatalf("%s: second replacement got %+v", st, o)
			}
			continue
		}
		if o.Result != fsm.Rejected || o.Reason != fsm.ReasonInvalidReplacement || b.s.State != st || b.s.SuccessorSessionID != "" {
			t.Fatalf("%s: got %+v, want invalid_replacement", st, o)
		}
	}
}
