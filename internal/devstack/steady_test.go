package devstack

import (
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/pkg/fsm"
)

// TestDemoReachesSteadyState folds 40 rounds of the demo's workload (2,000
// sessions at the default -demo-sessions, what `make run` sends in a few
// minutes) and looks at each session once all its events are folded: none
// stays in CREATED, and every one left open (an invalid event moved it off
// its path) has a timeout armed that ends it at most two minutes after its
// last event. The open sessions at any time are then bounded by what the
// demo sends in those minutes, not by how long it has run.
func TestDemoReachesSteadyState(t *testing.T) {
	c := DefaultConfig()
	st := &Stack{IngestURL: "http://ingest", QueryURL: "http://query"}
	const rounds = 40
	created, open := 0, map[fsm.State]int{}
	for round := range uint64(rounds) {
		for id, events := range loadgen.Generate(demoLoad(st, c, 1000+round)) {
			s := loadgen.Expected(events)
			if s.State == fsm.StateCreated {
				created++
				continue
			}
			if s.State.Terminal() {
				continue
			}
			open[s.State]++
			d, ok := fsm.NextDeadline(&s, fsm.DefaultTimeouts())
			if limit := s.UpdatedAt + int64(2*time.Minute); !ok || d.At > limit {
				t.Errorf("%s stays %s: its next deadline %+v (armed %v) is later than two minutes after its last event", id, s.State, d, ok)
			}
		}
	}
	if created > 0 {
		t.Errorf("%d of %d sessions stay in CREATED", created, rounds*c.DemoSessions)
	}
	t.Logf("%d rounds of %d sessions: %d in CREATED, open until a timeout ends them: %v", rounds, c.DemoSessions, created, open)
}
