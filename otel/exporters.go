package correxotel

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// newSpanExporter builds the span exporter called name (already validated)
// and returns it with a label for Telemetry.exporters. The OTLP exporters
// get no options: their endpoint, headers, TLS, compression and timeout come
// from the OTEL_EXPORTER_OTLP_* variables, read by the exporters themselves.
func newSpanExporter(ctx context.Context, name, protocol string, console io.Writer) (sdktrace.SpanExporter, string, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	label := name
	switch name {
	case exporterOTLP:
		label += "/" + protocol
		if protocol == protocolHTTPProtobuf {
			exp, err = otlptracehttp.New(ctx)
		} else {
			exp, err = otlptracegrpc.New(ctx)
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
		if protocol == protocolHTTPProtobuf {
			exp, err = otlpmetrichttp.New(ctx)
		} else {
			exp, err = otlpmetricgrpc.New(ctx)
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
