package correxotel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry is one binary's tracer and meter providers, propagator and
// Prometheus registry. Build it with Setup (or NewForTest), hand its fields
// to the code that creates spans and instruments, and call Shutdown once on
// the way out. Its methods are safe for concurrent use. The exported fields
// are set by the constructor and must not be reassigned.
type Telemetry struct {
	// TracerProvider creates every tracer of the binary. Its span processors
	// batch spans to the exporters OTEL_TRACES_EXPORTER selects.
	TracerProvider *sdktrace.TracerProvider
	// MeterProvider creates every meter of the binary. Its readers are the
	// Prometheus exporter behind MetricsHandler and the periodic reader
	// OTEL_METRICS_EXPORTER selects, if any.
	MeterProvider *sdkmetric.MeterProvider
	// Propagator is W3C Trace Context plus W3C Baggage.
	Propagator propagation.TextMapPropagator

	// resource, sampler and spanSinks are what the TracerProvider was built
	// with, shared with LifecycleSpans: its spans describe the same service,
	// are sampled by the same sampler and go to the same exporters.
	resource  *resource.Resource
	sampler   sdktrace.Sampler
	spanSinks []sdktrace.SpanExporter

	handler http.Handler // MetricsHandler's
	// exporters names what was built, such as "traces:otlp/grpc" and
	// "metrics:prometheus", in construction order; tests assert on it.
	exporters []string

	shutdownOnce sync.Once
	shutdownErr  error
}

// Setup builds the telemetry of one binary from cfg and the OTEL_*
// environment. It validates everything first (see Config.Validate) and
// builds nothing when something is wrong. Exporters connect lazily: Setup
// does not contact a collector, so it neither blocks nor fails when one is
// unreachable. ctx bounds resource detection and exporter construction only.
//
// Setup changes no global state; see SetGlobal.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	sel, err := cfg.selection()
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg, sel)
	if err != nil {
		return nil, err
	}
	console := newLockedWriter(cfg.ConsoleWriter)

	t := &Telemetry{Propagator: newPropagator(), resource: res, sampler: samplerFromEnv(os.Getenv)}

	traceOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(t.sampler),
		sdktrace.WithIDGenerator(idGenerator{}),
	}
	var built []shutdowner // what to release if a later step fails
	fail := func(err error) (*Telemetry, error) {
		for _, s := range built {
			_ = s.Shutdown(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	for _, name := range sel.traces {
		exp, label, err := newSpanExporter(ctx, name, sel.tracesProtocol, console)
		if err != nil {
			return fail(err)
		}
		built = append(built, exp)
		t.exporters = append(t.exporters, "traces:"+label)
		t.spanSinks = append(t.spanSinks, exp) // the OTLP and console exporters are safe for concurrent use
		traceOpts = append(traceOpts, sdktrace.WithBatcher(exp))
	}
	if cfg.SpanExporter != nil {
		// Nothing says a custom exporter is safe for concurrent use (the SDK
		// never calls one concurrently), and the batch span processor and
		// LifecycleSpans.Export both call it: serialise them.
		exp := &serialExporter{exp: cfg.SpanExporter}
		t.exporters = append(t.exporters, "traces:custom")
		t.spanSinks = append(t.spanSinks, exp)
		traceOpts = append(traceOpts, sdktrace.WithBatcher(exp))
	}

	t.handler = notLinkedHandler()
	var promReader sdkmetric.Reader
	if build := registeredPrometheus(); build != nil {
		if promReader, t.handler, err = build(true); err != nil {
			return fail(err)
		}
		t.exporters = append(t.exporters, "metrics:prometheus")
	}
	metricOpts := []sdkmetric.Option{sdkmetric.WithResource(res), httpMetricsView()}
	if promReader != nil {
		metricOpts = append(metricOpts, sdkmetric.WithReader(promReader))
	}
	for _, name := range sel.metrics {
		exp, label, err := newMetricExporter(ctx, name, sel.metricProtocol, console)
		if err != nil {
			return fail(err)
		}
		built = append(built, exp)
		t.exporters = append(t.exporters, "metrics:"+label)
		metricOpts = append(metricOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	t.TracerProvider = sdktrace.NewTracerProvider(traceOpts...)
	t.MeterProvider = sdkmetric.NewMeterProvider(metricOpts...)
	return t, nil
}

type shutdowner interface {
	Shutdown(context.Context) error
}

func newPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// newResource builds service.name and service.version from cfg, then lets
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (read through cfg.Getenv,
// in that order of precedence, lowest first) override and extend them, as
// the SDK's own environment detector does, plus the telemetry.sdk.*
// attributes.
func newResource(ctx context.Context, cfg Config, sel selection) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.ServiceName)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	for _, a := range sel.resourceAttrs {
		attrs = append(attrs, attribute.String(a.key, a.value))
	}
	if sel.serviceName != "" {
		attrs = append(attrs, semconv.ServiceName(sel.serviceName))
	}
	// NewSchemaless keeps the last of duplicate keys, which is the
	// precedence wanted above.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithDetectors(staticDetector{resource.NewSchemaless(attrs...)}),
	)
	if err != nil {
		return nil, fmt.Errorf("building resource: %w", err)
	}
	return res, nil
}

type staticDetector struct{ res *resource.Resource }

func (d staticDetector) Detect(context.Context) (*resource.Resource, error) { return d.res, nil }

// MetricsHandler serves the binary's metrics in the Prometheus text format
// from a registry private to this Telemetry (never the global default
// registry), with the Go runtime and process collectors alongside the
// OpenTelemetry instruments. Mount it at /metrics. In a program that does
// not import otel/promexport it answers 404 with a line naming that
// package.
func (t *Telemetry) MetricsHandler() http.Handler { return t.handler }

// Tracer returns a tracer of t's TracerProvider; name is the instrumentation
// scope, conventionally the package's import path.
func (t *Telemetry) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return t.TracerProvider.Tracer(name, opts...)
}

// Meter returns a meter of t's MeterProvider; name is the instrumentation
// scope, conventionally the package's import path.
func (t *Telemetry) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return t.MeterProvider.Meter(name, opts...)
}

// SetGlobal installs t's providers and propagator as the otel package's
// globals, for libraries that only look there. Setup never does this by
// itself: a binary calls it once, early in main, if it wants it; tests and
// library code should pass t explicitly instead.
func (t *Telemetry) SetGlobal() {
	otel.SetTracerProvider(t.TracerProvider)
	otel.SetMeterProvider(t.MeterProvider)
	otel.SetTextMapPropagator(t.Propagator)
}

// Shutdown flushes pending spans and metrics to the exporters and shuts
// both providers down, traces first, returning their errors joined. ctx
// bounds the flush: give it a deadline, since an exporter whose collector
// is unreachable retries until ctx is done. Only the first call does the
// work; later calls return its result. Spans and measurements recorded
// after Shutdown are dropped.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		t.shutdownErr = errors.Join(
			t.TracerProvider.Shutdown(ctx),
			t.MeterProvider.Shutdown(ctx),
		)
	})
	return t.shutdownErr
}
