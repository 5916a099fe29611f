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
		fromCreated = iota + 1
		fromUpdated
		fromEntered
	)
	type armed map[fsm.TimeoutKind]int
	nonTerminalIdle := armed{fsm.TimeoutExecution: fromCreated, fsm.TimeoutInactivity: fromUpdated}
	want := map[fsm.State]armed{
		fsm.StateCreated:          nonTerminalIdle,
		fsm.StateInitializing:     nonTerminalIdle,
		fsm.StateActive:           nonTerminalIdle,
		fsm.StatePaused:           nonTerminalIdle,
		fsm.StateRecovering:       {fsm.TimeoutExecution: fromCreated, fsm.TimeoutInactivity: fromUpdated, fsm.TimeoutRecovery: fromEntered},
		fsm.StateAwaitingApproval: {fsm.TimeoutExecution: fromCreated, fsm.TimeoutApproval: fromEntered},
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
				case fromCreated:
					start = s.CreatedAt
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
	p := reach(t, fsm.StatePaused)
	p.s.Timeouts[fsm.TimeoutInactivity] = time.Hour
	defaults := fsm.DefaultTimeouts()
	defaults[fsm.TimeoutExecution] = time.Second
	if d, _ := fsm.NextDeadline(&p.s, defaults); d.Kind != fsm.TimeoutExecution || d.At != p.s.CreatedAt+int64(time.Second) {
		t.Fatalf("got %+v, want execution (a default) 1s after creation, before its own inactivity", d)
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
