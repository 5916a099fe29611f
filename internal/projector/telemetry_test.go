package projector

import (
	"errors"
	"testing"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TestReplayEmitsTheSameSpans crashes a projector after it folded (and
// emitted spans) but before it wrote anything, restarts it, and requires
// that every transition emitted twice has one span ID, one trace ID and
// the same times: a crash and replay never produce a second, different span.
func TestReplayEmitsTheSameSpans(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(4, 60))
	tel, rec, _ := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	start := func(hook func(string) bool) *running {
		p := New(e.config("a"), e.store("tel"), WithLogger(testLog()), WithObserver(obs))
		p.crash.hook = hook
		c, cancel := contextWithCancel()
		r := &running{p: p, stop: cancel, done: make(chan error, 1)}
		go func() { r.done <- p.Run(c) }()
		return r
	}
	r := start(crashAt("before-put", 1))
	if err := <-r.done; !errors.Is(err, errCrashed) {
		t.Fatalf("first run: %v", err)
	}
	r = start(nil)
	e.waitCaughtUp("tel", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	obs.Drain()

	type key struct {
		session string
		to      string
		event   string
	}
	type emitted struct {
		sc         trace.SpanContext
		start, end time.Time
	}
	groups := map[key][]emitted{}
	for _, s := range rec.Ended() {
		if s.Name() != correxotel.SpanTransition {
			continue
		}
		a := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			a[kv.Key] = kv.Value.String()
		}
		k := key{a[correxotel.AttrSessionID], a[correxotel.AttrStateTo], a[correxotel.AttrEventID]}
		groups[k] = append(groups[k], emitted{s.SpanContext(), s.StartTime(), s.EndTime()})
	}
	twice := 0
	for k, g := range groups {
		if len(g) > 1 {
			twice++
		}
		for _, x := range g[1:] {
			if x.sc.SpanID() != g[0].sc.SpanID() || x.sc.TraceID() != g[0].sc.TraceID() || !x.start.Equal(g[0].start) || !x.end.Equal(g[0].end) {
				t.Fatalf("%v emitted as two different spans: %v and %v", k, g[0], x)
			}
		}
	}
	if twice == 0 {
		t.Fatal("no transition was replayed: the test did not exercise a replay")
	}
	t.Logf("%d transitions, %d emitted again on replay with the same span", len(groups), twice)
}
