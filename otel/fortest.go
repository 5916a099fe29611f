package correxotel

import (
	"fmt"

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
// instruments from a private Prometheus registry where otel/promexport is
// linked (a test that scrapes it imports that package); the ID generator honours
// WithSpanID and WithTraceID. service.name is "test".
//
// The caller owns the result and should Shutdown it (t.Cleanup), although
// nothing leaks if it does not: there is no exporter and no goroutine.
func NewForTest() (*Telemetry, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	res := resource.NewSchemaless(semconv.ServiceName("test"))

	handler, labels := notLinkedHandler(), []string{"traces:recorder", "metrics:manual"}
	metricOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(reader), httpMetricsView()}
	if build := registeredPrometheus(); build != nil {
		promReader, h, err := build(false)
		if err != nil {
			// A new registry of its own cannot collide: this is a bug here,
			// not bad input.
			panic(fmt.Sprintf("correxotel: prometheus exporter on a new registry: %v", err))
		}
		handler, labels = h, append(labels, "metrics:prometheus")
		metricOpts = append(metricOpts, sdkmetric.WithReader(promReader))
	}
	sampler := sdktrace.AlwaysSample()
	return &Telemetry{
		TracerProvider: sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sampler),
			sdktrace.WithIDGenerator(idGenerator{}),
			sdktrace.WithSpanProcessor(spans),
		),
		MeterProvider: sdkmetric.NewMeterProvider(metricOpts...),
		Propagator:    newPropagator(),
		resource:      res,
		sampler:       sampler,
		spanSinks:     []sdktrace.SpanExporter{recorderExporter{spans}},
		handler:       handler,
		exporters:     labels,
	}, spans, reader
}
