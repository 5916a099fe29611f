package fsm_test

import (
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// TestDeadlines restates docs/timeouts.md's table: which kinds are armed in
// each state, and from which time.
func TestDeadlines(t *testing.T) {
	const (
		fromBudget = iota + 1 // entering the state, less the execution already used
		fromUpdated
		fromEntered
	)
	type armed map[fsm.TimeoutKind]int
	running := armed{fsm.TimeoutExecution: fromBudget, fsm.TimeoutInactivity: fromUpdated}
	want := map[fsm.State]armed{
		fsm.StateCreated:          running,
		fsm.StateInitializing:     running,
		fsm.StateActive:           running,
		fsm.StatePaused:           {fsm.TimeoutInactivity: fromUpdated}, // suspended: the execution clock stops
		fsm.StateRecovering:       {fsm.TimeoutExecution: fromBudget, fsm.TimeoutInactivity: fromUpdated, fsm.TimeoutRecovery: fromEntered},
		fsm.StateAwaitingApproval: {fsm.TimeoutApproval: fromEntered},
		fsm.StateCancelling:       {fsm.TimeoutCancellation: fromEntered}, // the table rejects every other timeout there
		fsm.StateCancelled:        {},
		fsm.StateFailed:           {},
		fsm.StateCompleted:        {},
	}
	durations := map[fsm.TimeoutKind]time.Duration{fsm.TimeoutExecution: time.Hour, fsm.TimeoutInactivity: 2 * time.Minute,
		fsm.TimeoutApproval: 3 * time.Minute, fsm.TimeoutRecovery: 4 * time.Minute, fsm.TimeoutCancellation: 5 * time.Second}
	for st, kinds := range want {
		t.Run(st.String(), func(t *testing.T) {
			b := reach(t, st)
			if st == fsm.StateActive {
				b.apply(fsm.ModelRequested, fsm.Fields{}) // moves UpdatedAt past StateEnteredAt
			}
			s := &b.s
			for k, d := range durations {
				s.Timeouts[k] = d
			}
			got := fsm.Deadlines(s, fsm.Timeouts{})
			for _, k := range fsm.TimeoutKinds() {
				var start int64
				switch kinds[k] {
				case fromBudget:
					start = s.StateEnteredAt - s.ExecutionUsed()
				case fromUpdated:
					start = s.UpdatedAt
				case fromEntered:
					start = s.StateEnteredAt
				}
				wantAt := int64(0)
				if start != 0 {
					wantAt = start + int64(durations[k])
				}
				if got[k] != wantAt {
					t.Errorf("%s: got %d, want %d", k, got[k], wantAt)
				}
			}
		})
	}
}

func TestNextDeadlineDefaults(t *testing.T) {
	b := reach(t, fsm.StateCancelling)
	s := &b.s
	d, ok := fsm.NextDeadline(s, fsm.DefaultTimeouts())
	if !ok || d.Kind != fsm.TimeoutCancellation || d.At != s.StateEnteredAt+int64(5*time.Minute) {
		t.Fatalf("got %+v %v, want cancellation 5m after entering CANCELLING", d, ok)
	}
	s.Timeouts[fsm.TimeoutExecution] = time.Second // not armed in CANCELLING
	if d, _ := fsm.NextDeadline(s, fsm.DefaultTimeouts()); d.Kind != fsm.TimeoutCancellation {
		t.Fatalf("got %+v, want the cancellation deadline", d)
	}
	p := reach(t, fsm.StateActive)
	p.s.Timeouts[fsm.TimeoutInactivity] = time.Hour
	defaults := fsm.DefaultTimeouts()
	defaults[fsm.TimeoutExecution] = time.Second
	if d, _ := fsm.NextDeadline(&p.s, defaults); d.Kind != fsm.TimeoutExecution || d.At != p.s.CreatedAt+int64(time.Second) {
		t.Fatalf("got %+v, want execution (a default) 1s after creation, before its own inactivity", d)
	}
	p.apply(fsm.SessionPaused, fsm.Fields{})
	if d, _ := fsm.NextDeadline(&p.s, defaults); d.Kind != fsm.TimeoutInactivity {
		t.Fatalf("PAUSED: got %+v, want inactivity only (the execution clock stops)", d)
	}
	a := reach(t, fsm.StateActive)
	if d, ok := fsm.NextDeadline(&a.s, fsm.DefaultTimeouts()); !ok || d.Kind != fsm.TimeoutInactivity || d.At != a.s.UpdatedAt+int64(24*time.Hour) {
		t.Fatalf("ACTIVE with no durations of its own: got %+v %v, want inactivity (the default, 24h) after its last event", d, ok)
	}
	unbounded := fsm.DefaultTimeouts()
	unbounded[fsm.TimeoutInactivity] = 0
	if d, ok := fsm.NextDeadline(&a.s, unbounded); ok {
		t.Fatalf("ACTIVE with no durations, inactivity disabled: got %+v, want none armed", d)
	}
	if eff := a.s.Timeouts.Effective(fsm.DefaultTimeouts()); eff[fsm.TimeoutCancellation] != 5*time.Minute ||
		eff[fsm.TimeoutInactivity] != 24*time.Hour || eff[fsm.TimeoutExecution] != 0 {
		t.Fatalf("effective: got %v", eff)
	}
}

// TestArmedKindsAreApplied: a deadline armed in a state fires a timeout the
// table applies there, so a fired deadline never comes back rejected (and
// re-armed as it was, firing again and again).
func TestArmedKindsAreApplied(t *testing.T) {
	var all fsm.Timeouts
	for _, k := range fsm.TimeoutKinds() {
		all[k] = time.Minute
	}
	for _, st := range fsm.States() {
		if st.Terminal() {
			continue
		}
		for _, k := range fsm.TimeoutKinds() {
			b := reach(t, st)
			b.s.Timeouts = all
			if fsm.Deadlines(&b.s, fsm.Timeouts{})[k] == 0 {
				continue
			}
			if o := b.apply(fsm.TimeoutExpired, fsm.Fields{Timeout: k, ArmedVersion: b.s.Version, HasArmedVersion: true}); o.Result != fsm.Applied {
				t.Errorf("%s armed in %s: the fold answers %+v", k, st, o)
			}
		}
	}
}

// TestExecutionBudget: the execution timeout is a budget of running time
// (docs/timeouts.md): time in PAUSED and AWAITING_APPROVAL does not count,
// and on returning to a state that counts the deadline is the rest of the
// budget from then.
func TestExecutionBudget(t *testing.T) {
	b := reach(t, fsm.StateActive) // CREATED 250ms, ACTIVE entered at +250ms
	b.s.Timeouts[fsm.TimeoutExecution] = 10 * time.Second
	at := func() int64 { return fsm.Deadlines(&b.s, fsm.Timeouts{})[fsm.TimeoutExecution] }
	if got, want := at(), b.s.CreatedAt+int64(10*time.Second); got != want {
		t.Fatalf("ACTIVE: got %d, want %d (creation + 10s)", got, want)
	}
	b.apply(fsm.SessionPaused, fsm.Fields{}) // ACTIVE for 250ms: 500ms used
	if got := at(); got != 0 {
		t.Fatalf("PAUSED: execution armed at %d, want none", got)
	}
	b.apply(fsm.SessionResumed, fsm.Fields{}) // PAUSED for 250ms: not counted
	if used := b.s.ExecutionUsed(); used != int64(500*time.Millisecond) {
		t.Fatalf("used %v, want 500ms", time.Duration(used))
	}
	if got, want := at(), b.s.StateEnteredAt+int64(9500*time.Millisecond); got != want {
		t.Fatalf("resumed: got %d, want %d (resume + 9.5s)", got, want)
	}
	b.apply(fsm.ApprovalRequested, fsm.Fields{})
	if got := at(); got != 0 {
		t.Fatalf("AWAITING_APPROVAL: execution armed at %d, want none", got)
	}
}

// TestForcedCancellationDeadline: a forced cancellation's deadline is its
// request plus the forced grace, an escalation's is the escalation plus the
// grace, and a graceful one keeps the cancellation timeout.
func TestForcedCancellationDeadline(t *testing.T) {
	b := reach(t, fsm.StateActive)
	b.apply(fsm.CancellationRequested, fsm.Fields{Mode: fsm.CancelGraceful})
	d := fsm.DeadlinesWith(&b.s, fsm.DefaultTimeouts(), 3*time.Second)
	if want := b.s.StateEnteredAt + int64(5*time.Minute); d[fsm.TimeoutCancellation] != want {
		t.Fatalf("graceful: got %d, want %d", d[fsm.TimeoutCancellation], want)
	}
	entered := b.s.StateEnteredAt
	o := b.apply(fsm.CancellationRequested, fsm.Fields{Mode: fsm.CancelForced})
	if o.Result != fsm.Applied || b.s.State != fsm.StateCancelling || b.s.StateEnteredAt != entered {
		t.Fatalf("escalation: %+v, state %s entered %d (was %d)", o, b.s.State, b.s.StateEnteredAt, entered)
	}
	d = fsm.DeadlinesWith(&b.s, fsm.DefaultTimeouts(), 3*time.Second)
	if want := b.s.Cancellation.EscalatedAt + int64(3*time.Second); b.s.Cancellation.EscalatedAt == 0 || d[fsm.TimeoutCancellation] != want {
		t.Fatalf("escalated: got %d, want %d", d[fsm.TimeoutCancellation], want)
	}
	f := reach(t, fsm.StatePaused)
	f.apply(fsm.CancellationRequested, fsm.Fields{Mode: fsm.CancelForced})
	if got, ok := fsm.NextDeadline(&f.s, fsm.DefaultTimeouts()); !ok || got.Kind != fsm.TimeoutCancellation || got.At != f.s.StateEnteredAt {
		t.Fatalf("forced with the default grace (0s): got %+v, want cancellation at the request", got)
	}
}
