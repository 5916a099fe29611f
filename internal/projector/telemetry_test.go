package projector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	start := func(hook func(crashPoint) bool) *running {
		p := New(e.config("a"), e.store("tel"), WithLogger(testLog()), WithObserver(obs))
		p.crash.hook = hook
		c, cancel := contextWithCancel()
		r := &running{p: p, stop: cancel, done: make(chan error, 1)}
		go func() { r.done <- p.Run(c) }()
		return r
	}
	r := start(crashAt(crashBeforePut, 1))
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

// blockingExporter holds every export until release is closed, then counts
// the lifecycle spans it receives.
type blockingExporter struct {
	release chan struct{}
	spans   atomic.Int64
}

func (b *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, s := range spans {
		if s.Name() == correxotel.SpanTransition {
			b.spans.Add(1)
		}
	}
	return nil
}

func (b *blockingExporter) Shutdown(context.Context) error { return nil }

// foldTransitions feeds obs n applied transitions of one session, each
// ending a pause (a correx.session.paused.duration measurement).
func foldTransitions(obs *Telemetry, n int) {
	e := &fsm.Event{SessionID: "s", Type: fsm.SessionStarted, OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	s := &snapshot.Snapshot{}
	s.ID, s.CorrelationID = "s", "s"
	for i := range n {
		s.Version = uint64(i + 1)
		obs.Folded(&kgo.Record{Partition: 1, Offset: int64(i)}, e, s,
			fsm.Outcome{Result: fsm.Applied, From: fsm.StatePaused, To: fsm.StateActive, Closed: time.Second})
	}
}

// newBlockedTelemetry is an observer whose only exporter holds every export
// until release is closed.
func newBlockedTelemetry(t *testing.T) (*Telemetry, *correxotel.Telemetry, *blockingExporter) {
	t.Helper()
	exp := &blockingExporter{release: make(chan struct{})}
	tel, err := correxotel.Setup(ctx, correxotel.Config{ServiceName: "test", Getenv: func(string) string { return "" }, SpanExporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(ctx) })
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	return obs, tel, exp
}

// scrapeCounter reads a counter, or a histogram's count, from tel's
// /metrics.
func scrapeCounter(t *testing.T, tel *correxotel.Telemetry, name string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		total += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return total
}

// TestStuckExporterDropsCountedSpans folds far more transitions than the
// span queue holds while the exporter is stuck: the fold goes on (it waits
// once, then drops), every span is either exported once the exporter
// recovers or counted in correx.projector.spans.dropped, never lost
// silently, and the histograms lose nothing.
func TestStuckExporterDropsCountedSpans(t *testing.T) {
	obs, tel, exp := newBlockedTelemetry(t)
	defer obs.Close()
	const folded = 70 * 1024
	foldTransitions(obs, folded)
	close(exp.release)
	obs.Drain()
	if err := tel.TracerProvider.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	exported := exp.spans.Load()
	dropped := scrapeCounter(t, tel, "correx_projector_spans_dropped_total")
	if exported+int64(dropped) != folded || dropped == 0 {
		t.Fatalf("%d spans exported and %v counted as dropped for %d folded; want every span accounted for, some dropped",
			exported, dropped, folded)
	}
	if paused := scrapeCounter(t, tel, "correx_session_paused_duration_seconds"); paused != folded {
		t.Errorf("%v paused durations recorded for %d folded: the measurements of dropped spans must be kept", paused, folded)
	}
	if waits := scrapeCounter(t, tel, "correx_projector_spans_waits_total"); waits != 1 {
		t.Errorf("the fold waited %v times for room, want once: later chunks are dropped at once while the exporter is stuck", waits)
	}
	t.Logf("%d exported, %v dropped", exported, dropped)
}

// TestCloseIsBoundedWithAStuckExporter: Close gives a stuck exporter
// closeWait, then drops and counts what is left.
func TestCloseIsBoundedWithAStuckExporter(t *testing.T) {
	obs, tel, exp := newBlockedTelemetry(t)
	obs.closeWait = 50 * time.Millisecond
	foldTransitions(obs, 3*chunkSpans)
	obs.Close()
	if got := scrapeCounter(t, tel, "correx_projector_spans_dropped_total"); got != 3*chunkSpans || exp.spans.Load() != 0 {
		t.Fatalf("after Close: %v dropped, %d exported; want all %d dropped", got, exp.spans.Load(), 3*chunkSpans)
	}
}

// TestSpanParentFromRecordHeaders: a lifecycle span continues the trace its
// record's headers carry, tracestate included; a tracestate larger than
// records are meant to carry is not kept, the parent still is.
func TestSpanParentFromRecordHeaders(t *testing.T) {
	tel, rec, _ := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	long := "big=" + strings.Repeat("x", correxotel.MaxRecordTraceStateBytes)
	e := &fsm.Event{SessionID: "s", Type: fsm.SessionStarted, OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	s := &snapshot.Snapshot{}
	s.ID = "s"
	for i, tracestate := range []string{"vendor=abc", long} {
		s.Version = uint64(i + 1)
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")},
			{Key: "traceparent", Value: []byte(traceparent)}, {Key: "tracestate", Value: []byte(tracestate)}}}
		obs.Folded(r, e, s, fsm.Outcome{Result: fsm.Applied, From: fsm.StateCreated, To: fsm.StateActive})
	}
	obs.Drain()
	var parents []trace.SpanContext
	for _, sp := range rec.Ended() {
		if sp.Name() == correxotel.SpanTransition {
			parents = append(parents, sp.Parent())
		}
	}
	if len(parents) != 2 {
		t.Fatalf("%d transition spans, want 2", len(parents))
	}
	for i, want := range []string{"vendor=abc", ""} {
		p := parents[i]
		if p.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || p.SpanID().String() != "b7ad6b7169203331" ||
			!p.IsRemote() || !p.IsSampled() || p.TraceState().String() != want {
			t.Errorf("span %d: parent %s/%s remote=%v sampled=%v tracestate %q; want the header's, tracestate %q",
				i, p.TraceID(), p.SpanID(), p.IsRemote(), p.IsSampled(), p.TraceState(), want)
		}
	}
}

// TestQueuedSpanKeepsNoRecord: a span waiting for the exporter does not
// keep its record alive (a record keeps its whole fetched batch).
func TestQueuedSpanKeepsNoRecord(t *testing.T) {
	obs, _, exp := newBlockedTelemetry(t)
	defer obs.Close()
	defer close(exp.release)
	freed := make(chan struct{})
	func() {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}
		runtime.SetFinalizer(r, func(*kgo.Record) { close(freed) })
		s := &snapshot.Snapshot{}
		s.ID, s.Version = "s", 1
		obs.Folded(r, &fsm.Event{SessionID: "s", Type: fsm.SessionStarted}, s, fsm.Outcome{Result: fsm.Applied, From: fsm.StateCreated, To: fsm.StateActive})
	}()
	for range 100 {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the record of a queued span was never freed")
}

// TestCustomEventSpanNamesItsType: a span of a custom event (here, one
// rejected after the session ended) carries the event's own type name in
// event.type, as the change feed does, not the generic custom type.
func TestCustomEventSpanNamesItsType(t *testing.T) {
	tel, rec, _ := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	e := &fsm.Event{SessionID: "s", Type: fsm.EventCustom, Custom: "x.acme.Reviewed", ID: fsm.EventID{7},
		OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	s := &snapshot.Snapshot{}
	s.ID, s.CorrelationID, s.State, s.Version = "s", "s", fsm.StateCompleted, 4
	obs.Folded(&kgo.Record{Partition: 1, Offset: 9}, e, s,
		fsm.Outcome{Result: fsm.Rejected, Reason: fsm.ReasonAfterTerminal, From: fsm.StateCompleted})
	obs.Drain()
	var types []string
	for _, sp := range rec.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == correxotel.AttrEventType {
				types = append(types, sp.Name()+" "+kv.Value.AsString())
			}
		}
	}
	if len(types) != 1 || !strings.HasSuffix(types[0], " x.acme.Reviewed") {
		t.Fatalf("spans with event.type: %q, want one naming x.acme.Reviewed", types)
	}
}

// TestEveryRejectionReasonReachesTheMetric folds one rejection for each of
// fsm's rejection reasons: correx.projector.events{outcome="rejected"}
// counts each under its own reason, none is lost.
func TestEveryRejectionReasonReachesTheMetric(t *testing.T) {
	tel, _, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	e := &fsm.Event{SessionID: "s", Type: fsm.SessionStarted, OccurredAt: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	s := &snapshot.Snapshot{}
	s.ID, s.CorrelationID, s.State = "s", "s", fsm.StateActive
	want := map[string]int64{}
	n := 0
	for r := range fsm.Rejections() {
		n++
		want[r.String()] = int64(n) // a distinct count per reason
		for range n {
			obs.Folded(&kgo.Record{Partition: 1}, e, s, fsm.Outcome{Result: fsm.Rejected, Reason: r, From: fsm.StateActive, To: fsm.StateActive})
		}
	}
	if len(want) != fsm.NumReasons-2 {
		t.Fatalf("fsm.Rejections lists %d reasons, want every reason but none and unknown_session (%d)", len(want), fsm.NumReasons-2)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "correx.projector.events" || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				if o, _ := p.Attributes.Value("correx.outcome"); o.AsString() == "rejected" {
					r, _ := p.Attributes.Value("correx.reason")
					got[r.AsString()] += p.Value
				}
			}
		}
	}
	for r, n := range want {
		if got[r] != n {
			t.Errorf("correx.projector.events{outcome=rejected, reason=%s} = %d, want %d", r, got[r], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rejected by reason: %v, want %v", got, want)
	}
}

// histograms returns the count and sum of every data point of the float64
// histogram name in rm, by the value of the attribute key.
func histograms(rm *metricdata.ResourceMetrics, name, key string) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Histogram[float64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				v, _ := p.Attributes.Value(attribute.Key(key))
				c := out[v.String()]
				out[v.String()] = [2]float64{c[0] + float64(p.Count), c[1] + p.Sum}
			}
		}
	}
	return out
}

// counters returns the int64 sum name in rm by the value of key.
func counters(rm *metricdata.ResourceMetrics, name, key string) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				v, _ := p.Attributes.Value(attribute.Key(key))
				out[v.String()] += p.Value
			}
		}
	}
	return out
}

// TestCloseApprovalAndCascadeMetrics folds closes, approval decisions and
// cascaded cancellations, and reads back what the histograms and the
// counter hold: the session's duration and its time suspended (PAUSED and
// AWAITING_APPROVAL) at its close, by terminal state; each approval wait
// under its decision; and each child a parent's close reached, with the
// time from that close to the child's CANCELLING, by reason. A
// cancellation a client sent, or a cascaded one that was rejected, is no
// propagation.
func TestCloseApprovalAndCascadeMetrics(t *testing.T) {
	tel, _, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	now := t0
	obs.now = func() time.Time { return now }
	n := byte(0)
	foldID := func(id fsm.EventID, typ fsm.EventType, f fsm.Fields, at time.Time, s *snapshot.Snapshot, out fsm.Outcome) {
		if out.Result == 0 {
			out.Result = fsm.Applied
		}
		s.Version++
		obs.Folded(&kgo.Record{}, &fsm.Event{ID: id, SessionID: s.ID, Type: typ, Fields: f, OccurredAt: at}, s, out)
	}
	fold := func(typ fsm.EventType, f fsm.Fields, at time.Time, s *snapshot.Snapshot, out fsm.Outcome) {
		n++
		foldID(fsm.EventID{0x01, n}, typ, f, at, s, out)
	}
	// cascade folds a cancellation the cascade produced: its id is derived.
	cascade := func(f fsm.Fields, at time.Time, s *snapshot.Snapshot, out fsm.Outcome) {
		n++
		foldID(derivedID(fsm.CancellationRequested, s.ID, fsm.EventID{0x02, n}), fsm.CancellationRequested, f, at, s, out)
	}
	session := func(id string, paused, awaiting time.Duration) *snapshot.Snapshot {
		s := &snapshot.Snapshot{}
		s.ID, s.CreatedAt = id, t0.UnixNano()
		s.Durations[fsm.StatePaused], s.Durations[fsm.StateAwaitingApproval] = int64(paused), int64(awaiting)
		return s
	}
	// Closes.
	fold(fsm.SessionCompleted, fsm.Fields{}, t0.Add(10*time.Second), session("a", 3*time.Second, 2*time.Second),
		fsm.Outcome{From: fsm.StateActive, To: fsm.StateCompleted})
	fold(fsm.SessionCompleted, fsm.Fields{}, t0.Add(20*time.Second), session("b", 0, 500*time.Millisecond),
		fsm.Outcome{From: fsm.StateActive, To: fsm.StateCompleted})
	fold(fsm.SessionFailed, fsm.Fields{}, t0.Add(4*time.Second), session("c", time.Second, 0),
		fsm.Outcome{From: fsm.StatePaused, To: fsm.StateFailed})
	// Approval decisions.
	s := session("d", 0, 0)
	for _, d := range []struct {
		typ  fsm.EventType
		to   fsm.State
		wait time.Duration
	}{
		{fsm.ApprovalGranted, fsm.StateActive, 2 * time.Second}, {fsm.ApprovalGranted, fsm.StateActive, 4 * time.Second},
		{fsm.ApprovalDenied, fsm.StateActive, 3 * time.Second}, {fsm.TimeoutExpired, fsm.StateFailed, 60 * time.Second},
		{fsm.CancellationRequested, fsm.StateCancelling, 7 * time.Second},
	} {
		fold(d.typ, fsm.Fields{}, t0, s, fsm.Outcome{From: fsm.StateAwaitingApproval, To: d.to, ApprovalWait: d.wait})
	}
	// Cascaded cancellations, folded later than the parent's close.
	kid := session("k", 0, 0)
	now = t0.Add(1500 * time.Millisecond)
	cascade(fsm.Fields{Reason: ReasonParentCompleted}, t0, kid, fsm.Outcome{From: fsm.StateActive, To: fsm.StateCancelling})
	now = t0.Add(2500 * time.Millisecond)
	cascade(fsm.Fields{Reason: ReasonParentCompleted}, t0, kid, fsm.Outcome{From: fsm.StateCreated, To: fsm.StateCancelling})
	now = t0.Add(250 * time.Millisecond)
	cascade(fsm.Fields{Reason: ReasonParentCancelled}, t0, kid, fsm.Outcome{From: fsm.StatePaused, To: fsm.StateCancelling})
	now = t0.Add(3 * time.Second) // a child created after its parent closed
	cascade(fsm.Fields{Reason: ReasonParentClosed}, t0, kid, fsm.Outcome{From: fsm.StateCreated, To: fsm.StateCancelling})
	// A client's, with the same reason, and a cascade's that was rejected.
	fold(fsm.CancellationRequested, fsm.Fields{Reason: ReasonParentCompleted}, t0, kid,
		fsm.Outcome{From: fsm.StateActive, To: fsm.StateCancelling})
	cascade(fsm.Fields{Reason: ReasonParentCompleted}, t0, kid,
		fsm.Outcome{Result: fsm.Rejected, Reason: fsm.ReasonInvalidTransition, From: fsm.StateCancelling, To: fsm.StateCancelling})
	obs.Drain()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	check("correx.session.duration", histograms(&rm, "correx.session.duration", "session.state"),
		map[string][2]float64{"COMPLETED": {2, 30}, "FAILED": {2, 4}})
	check("correx.session.suspension.duration", histograms(&rm, "correx.session.suspension.duration", "session.state"),
		map[string][2]float64{"COMPLETED": {2, 5.5}, "FAILED": {2, 1}})
	check("correx.session.approval.wait", histograms(&rm, "correx.session.approval.wait", "correx.decision"),
		map[string][2]float64{"granted": {2, 6}, "denied": {1, 3}, "expired": {1, 60}, "cancelled": {1, 7}})
	check("correx.session.cancellation.propagation", histograms(&rm, "correx.session.cancellation.propagation", "correx.reason"),
		map[string][2]float64{ReasonParentCompleted: {2, 4}, ReasonParentCancelled: {1, 0.25}, ReasonParentClosed: {1, 3}})
	check("correx.session.cancellations.propagated", counters(&rm, "correx.session.cancellations.propagated", "correx.reason"),
		map[string]int64{ReasonParentCompleted: 2, ReasonParentCancelled: 1, ReasonParentClosed: 1})
}

// scrapeSeries reads every series of a counter or gauge family from tel's
// /metrics, keyed by its labels as the exposition prints them
// (`name="value",...`, sorted), the otel_scope_* labels left out.
func scrapeSeries(t *testing.T, tel *correxotel.Telemetry, name string) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range fams[name].GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			if !strings.HasPrefix(l.GetName(), "otel_scope_") {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
		}
		out[strings.Join(labels, ",")] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return out
}

// TestAlertedMetricsFromTheStart: the series the chart's alerts read are
// exported by a projector that has done nothing yet, at 0, every reason of
// the dead-letter counters included (increase() and rate() see nothing of
// a series whose first sample is already 1); the stalled gauge follows the
// projector's stalls.
func TestAlertedMetricsFromTheStart(t *testing.T) {
	tel, _, _ := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	for _, name := range []string{"correx_projector_dead_letters_total", "correx_projector_dead_letters_refused_total"} {
		got := scrapeSeries(t, tel, name)
		if len(got) != len(dlqReasons) {
			t.Errorf("%s: %d series %v, want one per reason (%d)", name, len(got), got, len(dlqReasons))
		}
		for _, r := range dlqReasons {
			if v, ok := got[fmt.Sprintf("correx_reason=%q", r)]; !ok || v != 0 {
				t.Errorf("%s{correx_reason=%q}: %v (exported %v), want 0", name, r, v, ok)
			}
		}
	}
	for _, name := range []string{"correx_projector_restore_gaps_total", "correx_projector_restores_total",
		"correx_projector_rebuilds_total", "correx_projector_stalled"} {
		if got := scrapeSeries(t, tel, name); len(got) != 1 || got[""] != 0 {
			t.Errorf("%s: %v, want one series at 0", name, got)
		}
	}

	p := New(Config{}, nil, WithObserver(obs))
	stalled := func() float64 { return scrapeSeries(t, tel, "correx_projector_stalled")[""] }
	p.st.stalls.stall(3, "a checkpoint beyond the end of the log")
	p.st.stalls.stall(5, "a checkpoint beyond the end of the log")
	p.st.stalls.rebuild(7, "Redis lost the checkpoint") // a rebuild is no stall
	if got := stalled(); got != 2 {
		t.Errorf("correx_projector_stalled with partitions 3 and 5 stalled: %v, want 2", got)
	}
	p.st.stalls.clear(3)
	if got := stalled(); got != 1 {
		t.Errorf("correx_projector_stalled after partition 3 was cleared: %v, want 1", got)
	}
	obs.DeadLettered(&kgo.Record{}, ReasonUndecodable)
	if got := scrapeSeries(t, tel, "correx_projector_dead_letters_total")[fmt.Sprintf("correx_reason=%q", ReasonUndecodable)]; got != 1 {
		t.Errorf("correx_projector_dead_letters_total{correx_reason=%q} after one: %v, want 1", ReasonUndecodable, got)
	}
}

// TestLagLeavesWithThePartition: a partition the projector no longer owns
// leaves correx.projector.lag, so that only its owner reports it (a value
// kept by the previous owner would stay what it was when it left).
func TestLagLeavesWithThePartition(t *testing.T) {
	tel, _, _ := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	p := New(Config{}, nil, WithObserver(obs))
	for _, id := range []int32{1, 2} {
		p.st.addPartition(id)
		obs.Checkpointed(snapshot.Checkpoint{Partition: id, Offset: 10, HighWatermark: 10 + 100*int64(id)})
	}
	want := map[string]float64{`messaging_destination_partition_id="1"`: 100, `messaging_destination_partition_id="2"`: 200}
	if got := scrapeSeries(t, tel, "correx_projector_lag"); !maps.Equal(got, want) {
		t.Fatalf("correx_projector_lag: %v, want %v", got, want)
	}
	p.st.drop([]int32{1})
	delete(want, `messaging_destination_partition_id="1"`)
	if got := scrapeSeries(t, tel, "correx_projector_lag"); !maps.Equal(got, want) {
		t.Errorf("correx_projector_lag after partition 1 left: %v, want %v", got, want)
	}
}
