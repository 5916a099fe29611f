package projector

import (
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/testwait"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestTimeoutTelemetry fires one deadline and feeds one stale timeout:
// correx.timeouts.fired counts the kind, correx.timeouts.superseded the
// stale one, correx.timeouts.lag records the firing, and a session.timeout
// span in the session's derived trace is ended.
func TestTimeoutTelemetry(t *testing.T) {
	e := newTimeoutEnv(t)
	tel, rec, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	at := clockStart.Add(-time.Second)
	e.produce([]fsm.Event{e.event("m", fsm.SessionCreated, at, timeouts(fsm.TimeoutInactivity, 2*time.Second))})
	r := e.start(nil, WithObserver(obs))
	defer r.halt()
	e.waitCaughtUp(e.prefix, 30*time.Second)
	cl := e.client()
	defer cl.Close()
	stale := timeoutRecord(topic, projstore.ArmedDeadline{SessionID: "m", Kind: fsm.TimeoutInactivity, At: at.UnixNano(), Version: 7})
	e.systemKeys().Sign(stale) // as the firer signs it
	if err := cl.ProduceSync(ctx, stale).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.advanceUntil("the inactivity timeout", 500*time.Millisecond, func() bool {
		s := e.get("m")
		return s != nil && s.State == fsm.StateCancelling && s.Counters.SupersededTimeouts == 1
	})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var lags uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if k, ok := p.Attributes.Value("correx.timeout"); ok {
						got[m.Name+"/"+k.AsString()] += p.Value
					} else {
						got[m.Name] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				if m.Name == "correx.timeouts.lag" {
					for _, p := range d.DataPoints {
						lags += p.Count
					}
				}
			}
		}
	}
	if got["correx.timeouts.fired/inactivity"] != 1 || got["correx.timeouts.superseded"] != 1 || lags != 1 {
		t.Fatalf("fired %d, superseded %d, lag samples %d; want 1, 1, 1", got["correx.timeouts.fired/inactivity"], got["correx.timeouts.superseded"], lags)
	}
	// The firer ends the span once its produce is acknowledged, which
	// races with the fold of the record it produced: the span may end
	// just after the session is seen CANCELLING.
	var span sdktrace.ReadOnlySpan
	testwait.Until(t, "a session.timeout span ended", 10*time.Second, func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "session.timeout" {
				span = s
			}
		}
		return span != nil
	})
	if span.SpanContext().TraceID() != correxotel.DeriveTraceID("m") || len(span.Links()) != 1 {
		t.Fatalf("session.timeout in trace %v with %d links, want the session's derived trace and a link", span.SpanContext().TraceID(), len(span.Links()))
	}
}
