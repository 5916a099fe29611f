package projector

import (
	"fmt"
	"testing"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestEveryTransitionIsVisible walks every row of the transition table
// (fsm.Table, and fsm.Escalation, the forced escalation of a graceful
// CANCELLING, CANCELLING -> CANCELLING) from every state it applies in
// that client events reach, and finds each transition it makes in all
// three places a transition shows: the change feed (what /v1/watch,
// pkg/feed and webhooks read), a session.transition span, and the
// correx.session.transitions counter.
func TestEveryTransitionIsVisible(t *testing.T) {
	e := newEnv(t, 4)
	tel, rec, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	paths := map[fsm.State][]fsm.EventType{
		fsm.StateNone:             nil,
		fsm.StateCreated:          {fsm.SessionCreated},
		fsm.StateInitializing:     {fsm.SessionCreated, fsm.SessionInitializing},
		fsm.StateActive:           {fsm.SessionCreated, fsm.SessionStarted},
		fsm.StatePaused:           {fsm.SessionCreated, fsm.SessionStarted, fsm.SessionPaused},
		fsm.StateAwaitingApproval: {fsm.SessionCreated, fsm.SessionStarted, fsm.ApprovalRequested},
		fsm.StateRecovering:       {fsm.SessionCreated, fsm.SessionStarted, fsm.RecoveryStarted},
		fsm.StateCancelling:       {fsm.SessionCreated, fsm.SessionStarted, fsm.CancellationRequested},
	}
	type walked struct{ session, typ, from, to string }
	var want []walked
	var events []fsm.Event
	n := 0
	ev := func(sid string, typ fsm.EventType, f fsm.Fields) fsm.Event {
		n++
		var id fsm.EventID
		id[0], id[1], id[14], id[15] = 0x7e, 0x31, byte(n>>8), byte(n)
		id[6], id[8] = 0x40, 0x80
		return fsm.NewEvent(id, sid, typ, time.Date(2026, 12, 1, 9, 0, 0, n*int(time.Millisecond), time.UTC), f)
	}
	rules := append(fsm.Table(), fsm.Escalation())
	for i, r := range rules {
		for from, path := range paths {
			if !r.From.Has(from) {
				continue
			}
			if r.Event == fsm.ReplacementRefused {
				continue // a system event: walked below from its cause
			}
			sid := fmt.Sprintf("vis-%d-%s", i, from)
			for _, typ := range path {
				events = append(events, ev(sid, typ, fsm.Fields{}))
			}
			f := fsm.Fields{Timeout: r.Timeout}
			if i == len(rules)-1 {
				f.Mode = fsm.CancelForced
			}
			events = append(events, ev(sid, r.Event, f))
			to := r.To
			if r.Resume {
				to = fsm.StateActive // the recovery started in ACTIVE
			}
			w := walked{sid, r.Event.String(), "", to.String()}
			if from != fsm.StateNone {
				w.from = from.String()
			}
			want = append(want, w)
		}
	}
	// ReplacementRefused: the system's answer to a successor naming a
	// predecessor nobody created fails the successor.
	events = append(events, ev("vis-successor", fsm.SessionCreated, fsm.Fields{PredecessorSessionID: "vis-nobody"}))
	want = append(want, walked{"vis-successor", fsm.ReplacementRefused.String(), fsm.StateCreated.String(), fsm.StateFailed.String()})
	if len(want) < len(rules) {
		t.Fatalf("walked %d transitions for %d rows", len(want), len(rules))
	}
	e.produce(events)
	r := e.startWith(e.feedConfig("a"), "vis", func(p *Projector) { p.obs = obs })
	e.waitSettled("vis")
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	obs.Drain()

	key := func(w walked) string { return w.session + " " + w.typ + " " + w.from + "->" + w.to }
	inFeed := map[string]bool{}
	for _, rc := range e.readAll(feed.Topic(topic)) {
		var c feed.Change
		if err := feed.Decode(rc.Value, &c); err != nil {
			t.Fatal(err)
		}
		if c.Outcome == feed.Applied {
			inFeed[key(walked{c.SessionID, c.Type, c.From, c.To})] = true
		}
	}
	inSpans := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.Name() != correxotel.SpanTransition {
			continue
		}
		var w walked
		for _, a := range s.Attributes() {
			switch a.Key {
			case correxotel.AttrSessionID:
				w.session = a.Value.AsString()
			case correxotel.AttrEventType:
				w.typ = a.Value.AsString()
			case correxotel.AttrStateFrom:
				w.from = a.Value.AsString()
			case correxotel.AttrStateTo:
				w.to = a.Value.AsString()
			}
		}
		inSpans[key(w)] = true
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "correx.session.transitions" || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				from, _ := p.Attributes.Value(correxotel.AttrStateFrom)
				to, _ := p.Attributes.Value(correxotel.AttrStateTo)
				counted[from.AsString()+"->"+to.AsString()] += p.Value
			}
		}
	}
	needed := map[string]int64{}
	for _, w := range want {
		needed[w.from+"->"+w.to]++
		if !inFeed[key(w)] {
			t.Errorf("%s: no change record", key(w))
		}
		if !inSpans[key(w)] {
			t.Errorf("%s: no span", key(w))
		}
	}
	for pair, n := range needed {
		if counted[pair] < n {
			t.Errorf("correx.session.transitions %s: %d, want at least the %d walked", pair, counted[pair], n)
		}
	}
	t.Logf("%d transitions walked over %d rows, each in the change feed, the spans and the counter", len(want), len(rules))
}
