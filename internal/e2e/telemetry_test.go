package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/testwait"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestLifecycleTelemetry sends a scripted session through the pipeline with
// a client trace and checks the spans (their parents and links back to the
// client's request), the attributes, and the metric data points.
func TestLifecycleTelemetry(t *testing.T) {
	tel, rec, reader := correxotel.NewForTest()
	srv := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: 3, Log: quietLog(),
		Projector: func(c *projector.Config) {
			c.FlushInterval = 20 * time.Millisecond
			// The events are dated 2026-11-29: the default inactivity and
			// approval timeouts (24h after the last event, after the request)
			// would have passed, and end the sessions.
			c.Timeouts[fsm.TimeoutInactivity] = 0
			c.Timeouts[fsm.TimeoutApproval] = 0
		},
		Runtime: func(name string) service.Runtime {
			return service.Runtime{Log: quietLog(), Telemetry: tel, Metrics: tel.MetricsHandler(),
				WrapHTTP: func(op string, h http.Handler) http.Handler { return correxotel.HTTPHandler(tel, op, h) }}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })

	clientCtx, client := tel.Tracer("client").Start(context.Background(), "client.request")
	traceID := client.SpanContext().TraceID()
	script := []struct {
		typ, payload string
	}{
		{"SessionCreated", `{"goal":"trace me"}`}, {"SessionStarted", `{}`}, {"SessionPaused", `{}`},
		{"SessionResumed", `{}`}, {"ApprovalRequested", `{}`}, {"ApprovalGranted", `{}`},
		{"SessionResumed", `{}`}, // rejected: ACTIVE
		{"SessionCompleted", `{}`},
	}
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var position string
	for i, s := range script {
		body := fmt.Sprintf(`{"sessionId":"tel-1","type":%q,"occurredAt":%q,"payload":%s}`, s.typ,
			at.Add(time.Duration(i)*time.Second).Format(time.RFC3339), s.payload)
		req, _ := http.NewRequestWithContext(clientCtx, http.MethodPost, st.IngestURL+"/v1/events", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		tel.Propagator.Inject(clientCtx, propagationHeader(req.Header))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("%s: %d %s", s.typ, resp.StatusCode, raw)
		}
		var ans struct{ Position string }
		_ = json.Unmarshal(raw, &ans)
		position = ans.Position
	}
	client.End()
	resp, err := http.Get(st.QueryURL + "/v1/sessions/tel-1?minPosition=" + position + "&wait=10s")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("query: %v %v", err, resp)
	}
	resp.Body.Close()
	// The read above is answered once the checkpoint passes the last
	// event; the transition spans are made off the fold path, and the flush
	// span ends after the checkpoint: wait until they have ended.
	testwait.Until(t, "the transition spans and a flush span linking to them", 30*time.Second, func() bool {
		n, linked := 0, false
		for _, s := range rec.Ended() {
			switch {
			case s.Name() == correxotel.SpanTransition:
				n++
			case s.Name() == "projector.flush" && len(s.Links()) > 0:
				linked = true
			}
		}
		return n >= 7 && linked // the script's seven transitions
	})

	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	// Every transition span: in the client's trace, its parent the Kafka
	// publish span of its record, whose ancestors lead to the ingest
	// request and to the client's span.
	wantTransitions := [][2]string{{"", "CREATED"}, {"CREATED", "ACTIVE"}, {"ACTIVE", "PAUSED"}, {"PAUSED", "ACTIVE"},
		{"ACTIVE", "AWAITING_APPROVAL"}, {"AWAITING_APPROVAL", "ACTIVE"}, {"ACTIVE", "COMPLETED"}}
	var transitions []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == correxotel.SpanTransition {
			transitions = append(transitions, s)
		}
	}
	if len(transitions) != len(wantTransitions) {
		t.Fatalf("%d transition spans, want %d", len(transitions), len(wantTransitions))
	}
	seen := map[string]bool{}
	for _, s := range transitions {
		attrs := attrMap(s.Attributes())
		key := attrs["session.state.from"] + ">" + attrs["session.state.to"]
		seen[key] = true
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("%s: trace %s, want the client's %s", key, s.SpanContext().TraceID(), traceID)
		}
		for _, k := range []string{"session.id", "event.type", "event.id", "correlation.id"} {
			if attrs[k] == "" {
				t.Errorf("%s: attribute %s missing", key, k)
			}
		}
		if attrs["session.id"] != "tel-1" || attrs["correlation.id"] != "tel-1" {
			t.Errorf("%s: attributes %v", key, attrs)
		}
		parent, ok := byID[s.Parent().SpanID()]
		if !ok || parent.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s: parent is not the record's publish span", key)
			continue
		}
		if !descendsFrom(byID, parent, client.SpanContext().SpanID()) {
			t.Errorf("%s: the publish span does not descend from the client's span", key)
		}
		// The span ID is derived from the session and its version.
		found := false
		for v := uint64(1); v <= 7; v++ {
			found = found || s.SpanContext().SpanID() == correxotel.DeriveSpanID("tel-1", v)
		}
		if !found {
			t.Errorf("%s: span ID %s is not derived from the session", key, s.SpanContext().SpanID())
		}
		// Timed from occurredAt: it ends at the event.
		if s.EndTime().Year() != 2026 {
			t.Errorf("%s: ends at %v, not at the event's occurredAt", key, s.EndTime())
		}
	}
	for _, w := range wantTransitions {
		if !seen[w[0]+">"+w[1]] {
			t.Errorf("no span for %s -> %s", w[0], w[1])
		}
	}
	// The rejected event: a span event with its reason, in the client's trace.
	rejected := 0
	for _, s := range spans {
		if s.Name() != correxotel.SpanRejected {
			continue
		}
		for _, ev := range s.Events() {
			if ev.Name == correxotel.EventRejected && attrMap(ev.Attributes)["session.rejection.reason"] == "invalid_transition" &&
				s.SpanContext().TraceID() == traceID {
				rejected++
			}
		}
	}
	if rejected != 1 {
		t.Errorf("%d rejection span events, want 1", rejected)
	}
	// A flush span links to persisted transitions; Redis calls are its children.
	linked := false
	for _, s := range spans {
		if s.Name() == "projector.flush" && len(s.Links()) > 0 {
			linked = true
		}
	}
	if !linked {
		t.Error("no projector.flush span links to the transitions it persisted")
	}

	// Metric data points.
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	hists := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sums[m.Name+attrKey(dp.Attributes)] += dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					hists[m.Name] += dp.Count
				}
			}
		}
	}
	for k, want := range map[string]int64{
		"correx.projector.events{correx.outcome=applied}":                                          7,
		"correx.projector.events{correx.outcome=rejected,correx.reason=invalid_transition}":        1,
		"correx.session.transitions{session.state.from=ACTIVE,session.state.to=PAUSED}":            1,
		"correx.session.transitions{session.state.from=AWAITING_APPROVAL,session.state.to=ACTIVE}": 1,
		"correx.session.transitions{session.state.to=CREATED}":                                     1,
	} {
		if sums[k] != want {
			t.Errorf("%s = %d, want %d", k, sums[k], want)
		}
	}
	for _, name := range []string{"correx.session.paused.duration", "correx.session.approval.wait", "correx.session.duration"} {
		if hists[name] != 1 {
			t.Errorf("%s has %d observations, want 1", name, hists[name])
		}
	}
	if hists["correx.projector.flush.duration"] == 0 {
		t.Error("no flush duration observed")
	}

	// Every service's /metrics parses as Prometheus text and has its metrics.
	wantMetrics := map[string][]string{
		st.ProjectorURL: {"correx_projector_events_total", "correx_session_transitions_total", "messaging_client_consumed_messages_total",
			"correx_projector_flush_duration_seconds", "correx_projector_lag", "correx_session_duration_seconds",
			"correx_session_approval_wait_seconds", "correx_session_paused_duration_seconds"},
		st.QueryURL:  {"http_server_request_duration_seconds"},
		st.IngestURL: {"http_server_request_duration_seconds"},
	}
	for url, names := range wantMetrics {
		families := scrape(t, url+"/metrics")
		for _, n := range names {
			if _, ok := families[n]; !ok {
				t.Errorf("%s/metrics lacks %s", url, n)
			}
		}
	}
}

func propagationHeader(h http.Header) headerCarrier { return headerCarrier(h) }

type headerCarrier http.Header

func (c headerCarrier) Get(k string) string { return http.Header(c).Get(k) }
func (c headerCarrier) Set(k, v string)     { http.Header(c).Set(k, v) }
func (c headerCarrier) Keys() []string {
	var out []string
	for k := range c {
		out = append(out, k)
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

func attrKey(set attribute.Set) string {
	if set.Len() == 0 {
		return ""
	}
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func descendsFrom(byID map[trace.SpanID]sdktrace.ReadOnlySpan, s sdktrace.ReadOnlySpan, ancestor trace.SpanID) bool {
	for range 10 {
		p := s.Parent().SpanID()
		if p == ancestor {
			return true
		}
		next, ok := byID[p]
		if !ok {
			return false
		}
		s = next
	}
	return false
}

func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s does not parse: %v", url, err)
	}
	out := map[string]bool{}
	for name := range families {
		out[name] = true
	}
	return out
}

var _ sdkmetric.Reader = (*sdkmetric.ManualReader)(nil)
