package correxotel

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// NewForTest returns a Telemetry for other packages' tests, wired like
// Setup's but reading no environment: every span is sampled and handed,
// synchronously as it ends (a lifecycle span: as LifecycleSpans.Export
// exports it), to the returned SpanRecorder; the returned ManualReader
// collects metric data points on demand; MetricsHandler serves the same
// instruments from a private Prometheus registry; the ID generator honours
// WithSpanID and WithTraceID. service.name is "test".
//
// The caller owns the result and should Shutdown it (t.Cleanup), although
// nothing leaks if it does not: there is no exporter and no goroutine.
func NewForTest() (*Telemetry, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	res := resource.NewSchemaless(semconv.ServiceName("test"))

	registry := prometheus.NewRegistry()
	promReader, err := otelprom.New(
		otelprom.WithRegisterer(registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		// Registering on a fresh registry cannot collide: this is a bug here,
		// not bad input.
		panic(fmt.Sprintf("correxotel: prometheus exporter on a new registry: %v", err))
	}
	sampler := sdktrace.AlwaysSample()
	return &Telemetry{
		TracerProvider: sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sampler),
			sdktrace.WithIDGenerator(idGenerator{}),
			sdktrace.WithSpanProcessor(spans),
		),
		MeterProvider: sdkmetric.NewMeterProvider(
			sdkmetric.WithResource(res),
			sdkmetric.WithReader(reader),
			sdkmetric.WithReader(promReader),
			httpMetricsView(),
		),
		Propagator: newPropagator(),
		resource:   res,
		sampler:    sampler,
		spanSinks:  []sdktrace.SpanExporter{recorderExporter{spans}},
		registry:   registry,
		handler:    newMetricsHandler(registry),
		exporters:  []string{"traces:recorder", "metrics:manual", "metrics:prometheus"},
	}, spans, reader
}
