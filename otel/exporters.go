package correxotel

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// OTLPSpanExporter and OTLPMetricExporter build an OTLP exporter for a
// protocol, "grpc" or "http/protobuf", with no options: the endpoint,
// headers, TLS, compression and timeout come from the OTEL_EXPORTER_OTLP_*
// variables, read by the exporters themselves.
type (
	OTLPSpanExporter   func(ctx context.Context, protocol string) (sdktrace.SpanExporter, error)
	OTLPMetricExporter func(ctx context.Context, protocol string) (sdkmetric.Exporter, error)
)

// otlpExporters are the OTLP exporters a program links, nil until
// RegisterOTLP.
var otlpExporters struct {
	sync.RWMutex
	span   OTLPSpanExporter
	metric OTLPMetricExporter
}

// RegisterOTLP makes the otlp exporter of OTEL_TRACES_EXPORTER and
// OTEL_METRICS_EXPORTER available to Setup. The package otel/otlpexport
// calls it when it is imported; a program imports that package rather than
// calling RegisterOTLP itself. See the package documentation.
func RegisterOTLP(span OTLPSpanExporter, metric OTLPMetricExporter) {
	otlpExporters.Lock()
	defer otlpExporters.Unlock()
	otlpExporters.span, otlpExporters.metric = span, metric
}

// otlpLinked reports whether RegisterOTLP was called.
func otlpLinked() bool {
	otlpExporters.RLock()
	defer otlpExporters.RUnlock()
	return otlpExporters.span != nil && otlpExporters.metric != nil
}

// otlpNotLinked is the reason Config.Validate gives for an otlp exporter
// in a program that does not link one.
const otlpNotLinked = "this program does not link the OTLP exporters (a blank import of " + otlpPackage + " registers them)"

// otlpPackage is the package that registers the OTLP exporters.
const otlpPackage = "github.com/correx/sessions/otel/otlpexport"

// PrometheusReader builds the Prometheus side of a Telemetry: a metric
// reader exporting into a registry of its own and the handler serving it at
// /metrics, the registry holding the Go runtime and process collectors too
// when runtime is set.
type PrometheusReader func(runtime bool) (sdkmetric.Reader, http.Handler, error)

// prometheusReader is the Prometheus exporter a program links, nil until
// RegisterPrometheus.
var prometheusReader struct {
	sync.RWMutex
	build PrometheusReader
}

// RegisterPrometheus makes the Prometheus exporter available to Setup and
// NewForTest: every Telemetry then serves its metrics at MetricsHandler.
// The package otel/promexport calls it when it is imported; a program
// imports that package rather than calling RegisterPrometheus itself.
func RegisterPrometheus(build PrometheusReader) {
	prometheusReader.Lock()
	defer prometheusReader.Unlock()
	prometheusReader.build = build
}

// registeredPrometheus is what RegisterPrometheus registered, or nil.
func registeredPrometheus() PrometheusReader {
	prometheusReader.RLock()
	defer prometheusReader.RUnlock()
	return prometheusReader.build
}

// promPackage is the package that registers the Prometheus exporter.
const promPackage = "github.com/correx/sessions/otel/promexport"

// promNotLinked is the reason Config.Validate gives for
// OTEL_METRICS_EXPORTER=prometheus in a program that does not link it, and
// what its MetricsHandler answers.
const promNotLinked = "this program does not link the Prometheus exporter (a blank import of " + promPackage + " registers it)"

// notLinkedHandler is MetricsHandler in a program without the Prometheus
// exporter.
func notLinkedHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, promNotLinked, http.StatusNotFound)
	})
}

// newSpanExporter builds the span exporter called name (already validated)
// and returns it with a label for Telemetry.exporters.
func newSpanExporter(ctx context.Context, name, protocol string, console io.Writer) (sdktrace.SpanExporter, string, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	label := name
	switch name {
	case exporterOTLP:
		label += "/" + protocol
		otlpExporters.RLock()
		build := otlpExporters.span
		otlpExporters.RUnlock()
		if build == nil {
			// Unreachable: selection() refuses otlp when nothing is registered.
			err = fmt.Errorf("%w: %s", ErrInvalidConfig, otlpNotLinked)
		} else {
			exp, err = build(ctx, protocol)
		}
	case exporterConsole:
		exp, err = stdouttrace.New(stdouttrace.WithWriter(console))
	default:
		// Unreachable: selection() admits only the names above.
		err = fmt.Errorf("%w: unknown span exporter %q", ErrInvalidConfig, name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("building %s span exporter: %w", label, err)
	}
	return exp, label, nil
}

// newMetricExporter is newSpanExporter for metrics; the exporter is read by a
// periodic reader, whose interval comes from OTEL_METRIC_EXPORT_INTERVAL
// (default 60s).
func newMetricExporter(ctx context.Context, name, protocol string, console io.Writer) (sdkmetric.Exporter, string, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	label := name
	switch name {
	case exporterOTLP:
		label += "/" + protocol
		otlpExporters.RLock()
		build := otlpExporters.metric
		otlpExporters.RUnlock()
		if build == nil {
			err = fmt.Errorf("%w: %s", ErrInvalidConfig, otlpNotLinked)
		} else {
			exp, err = build(ctx, protocol)
		}
	case exporterConsole:
		exp, err = stdoutmetric.New(stdoutmetric.WithWriter(console))
	default:
		err = fmt.Errorf("%w: unknown metric exporter %q", ErrInvalidConfig, name)
	}
	if err != nil {
		return nil, "", fmt.Errorf("building %s metric exporter: %w", label, err)
	}
	return exp, label, nil
}

// lockedWriter serialises writes: the console span and metric exporters
// write from different goroutines, and a bytes.Buffer or a file shared with
// other output should see whole documents, not interleaved ones.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLockedWriter(w io.Writer) *lockedWriter {
	if w == nil {
		w = os.Stdout
	}
	return &lockedWriter{w: w}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serialExporter serialises the calls to an exporter that two callers
// share: the batch span processor and LifecycleSpans.Export.
type serialExporter struct {
	mu  sync.Mutex
	exp sdktrace.SpanExporter
}

func (s *serialExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exp.ExportSpans(ctx, spans)
}

func (s *serialExporter) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exp.Shutdown(ctx)
}

// recorderExporter hands exported spans to a span recorder, as if each had
// just ended: NewForTest's LifecycleSpans record where its SDK spans do.
type recorderExporter struct{ rec *tracetest.SpanRecorder }

func (r recorderExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		r.rec.OnEnd(s)
	}
	return nil
}

func (recorderExporter) Shutdown(context.Context) error { return nil }
