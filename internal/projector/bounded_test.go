package projector

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
)

// TestEveryNonTerminalStateHasADeadline: with the service defaults alone
// (DefaultConfig's timeouts, no timeouts of the session's own), a session
// in each non-terminal state has a deadline armed in the stored state,
// which the firer will fire, and the snapshot's API form shows it
// (`deadline` non-null), so no session stays open for ever by default.
func TestEveryNonTerminalStateHasADeadline(t *testing.T) {
	e := newTimeoutEnv(t)
	defaults := DefaultConfig().Timeouts
	paths := map[fsm.State][]fsm.EventType{
		fsm.StateCreated:          {fsm.SessionCreated},
		fsm.StateInitializing:     {fsm.SessionCreated, fsm.SessionInitializing},
		fsm.StateActive:           {fsm.SessionCreated, fsm.SessionStarted},
		fsm.StatePaused:           {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused},
		fsm.StateAwaitingApproval: {fsm.SessionCreated, fsm.SessionStarted, fsm.ApprovalRequested},
		fsm.StateRecovering:       {fsm.SessionCreated, fsm.SessionStarted, fsm.RecoveryStarted},
		fsm.StateCancelling:       {fsm.SessionCreated, fsm.SessionStarted, fsm.CancellationRequested},
	}
	for _, st := range fsm.States() {
		if _, ok := paths[st]; !ok && !st.Terminal() {
			t.Fatalf("non-terminal state %s has no path here", st)
		}
	}
	at := clockStart.Add(-time.Minute)
	var events []fsm.Event
	for st, types := range paths {
		for i, typ := range types {
			events = append(events, e.event("b-"+st.String(), typ, at.Add(time.Duration(i)*time.Millisecond), fsm.Fields{}))
		}
	}
	e.produce(events)
	cfg := e.config()
	cfg.Timeouts = defaults
	p := New(cfg, e.store(e.prefix), WithLogger(testLog()), WithClock(e.clock))
	c, cancel := contextWithCancel()
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)

	armed := map[string]bool{}
	for part := int32(0); part < 4; part++ {
		ds, _, err := e.store(e.prefix).DueDeadlines(ctx, topic, part, at.Add(100*365*24*time.Hour), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			armed[d.SessionID] = true
		}
	}
	for st := range paths {
		sid := "b-" + st.String()
		s := e.get(sid)
		if s == nil || s.State != st {
			t.Fatalf("%s: got %+v, want state %s", sid, s, st)
		}
		if !armed[sid] {
			t.Errorf("%s: no deadline armed in the stored state with the service defaults", st)
		}
		s.TimeoutDefaults = defaults
		b, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Deadline *struct {
				Kind string `json:"kind"`
			} `json:"deadline"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if v.Deadline == nil {
			t.Errorf("%s: snapshot deadline null with the service defaults: %s", st, b)
		} else {
			t.Logf("%s: deadline %s", st, v.Deadline.Kind)
		}
	}
}
