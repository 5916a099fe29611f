// Package correxotel owns the telemetry plumbing every correx-sessions binary
// shares:
//
//   - tracer and meter providers (Setup), built from the standard OTEL_*
//     environment variables, with no global state unless a binary asks for
//     it (Telemetry.SetGlobal);
//   - the Prometheus handler behind each service's /metrics
//     (Telemetry.MetricsHandler), always on where otel/promexport is
//     linked, on a registry private to the Telemetry;
//   - W3C Trace Context and Baggage propagation, over HTTP (HTTPHandler) and
//     Kafka record headers (InjectRecord, ExtractRecord, KafkaHooks; a
//     record carries at most MaxRecordBaggageBytes of baggage and
//     MaxRecordTraceStateBytes of tracestate, so a client's headers are not
//     repeated in full for every event); the Redis client's instrumentation
//     is in the subpackage otelredis (otelredis.Instrument), so that a
//     program without Redis does not link its client;
//   - deterministic span and trace IDs for lifecycle spans (DeriveSpanID,
//     DeriveTraceID, WithSpanID, WithTraceID), so that replaying a
//     transition after a crash re-emits the same span rather than a second,
//     different one;
//   - lifecycle spans built as finished records and exported in batches,
//     past the SDK's per-span machinery (LifecycleSpans), sampled by the
//     same sampler and sent to the same exporters as every other span;
//   - a clean Telemetry.Shutdown that flushes what is pending;
//   - NewForTest, recording spans and metrics in memory for other packages'
//     tests.
//
// The package lives in the directory otel/ but is named
// correxotel, so that a file importing it and go.opentelemetry.io/otel
// renames neither, as franz-go's kotel and go-redis's redisotel do.
//
// # Environment
//
// Read through Config.Getenv (os.Getenv by default), validated all at once by
// Config.Validate, values case-insensitive:
//
//	OTEL_TRACES_EXPORTER          otlp, console, none (default): comma-separated
//	OTEL_METRICS_EXPORTER         otlp, console, prometheus, none (default);
//	                              Prometheus /metrics is on whatever this says,
//	                              so "prometheus" and "none" add nothing
//	OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
//	OTEL_EXPORTER_OTLP_PROTOCOL   grpc (default) or http/protobuf; the
//	                              signal's own variable wins
//	OTEL_SERVICE_NAME             overrides Config.ServiceName
//	OTEL_RESOURCE_ATTRIBUTES      key=value,... (values percent-encoded);
//	                              overrides Config's attributes and adds others,
//	                              but not OTEL_SERVICE_NAME
//
// The OTLP default is grpc, as this project chose, although the
// specification suggests http/protobuf.
//
// The OTLP exporters themselves (gRPC and HTTP, which both link gRPC) are
// registered by the subpackage otlpexport, and the Prometheus exporter
// behind MetricsHandler by the subpackage promexport; the service binaries
// import both. A program that imports neither (pkg/testkit) links the
// console exporters only: an otlp or prometheus selection fails at Setup
// (and Config.Validate) with an *EnvError naming the package to import, and
// MetricsHandler answers 404 naming promexport. The default OTLP protocol
// stays grpc either way: see otlpexport's documentation.
//
// Read from the real process environment by the SDK and the exporters, not
// through Getenv: OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT, _HEADERS,
// _TIMEOUT, _COMPRESSION, _CERTIFICATE and the rest of the OTLP exporter
// settings; OTEL_BSP_* for the batch span processor;
// OTEL_METRIC_EXPORT_INTERVAL and OTEL_METRIC_EXPORT_TIMEOUT for the periodic
// reader; OTEL_SPAN_*_LIMIT. Re-implementing them here would only let them
// drift from the SDK's.
//
// One exception: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
// parentbased_always_on) are read here, also from the real process
// environment, exactly as the SDK reads them (TestParseSamplerMatchesTheSDK
// compares the decisions), because the TracerProvider keeps the sampler it
// builds to itself and LifecycleSpans must use the same one: Setup builds
// it once and gives it to both.
//
// # Deterministic IDs
//
// The providers use an ID generator that is random unless the context a
// span is started with carries IDs set by WithSpanID or WithTraceID. A
// lifecycle span for the transition that brought a session to version v is
// started with WithSpanID(ctx, DeriveSpanID(sessionID, v)): whether the
// projector emits it the first time or again while replaying after a crash,
// the backend receives the same span ID (and, when the parent is the same
// record's producer span or DeriveTraceID, the same trace ID) and keeps one
// span.
//
// # Lifecycle spans
//
// A lifecycle span (session.transition, session.event) is a deterministic
// record: its IDs come from the session and version, its times from the
// event, its attributes from the fold. Started and ended through the SDK,
// each cost a recording span, its option and attribute slices, a context
// for the requested IDs, a snapshot at End and a slot in the batch span
// processor's queue: about 17 allocations and 4 KB per span
// (BenchmarkLifecycleSpans), and the processor's queue drops spans without
// counting them when it fills. LifecycleSpans builds the same spans (a test
// holds them equal to the SDK's, field for field) as read-only records in a
// SpanBatch whose slabs a whole batch shares, and Export hands them to the
// exporters 512 at a time: about 0.8 KB per span and a handful of
// allocations per batch. The caller owns the queueing and so decides what happens when
// exporters fall behind; the projector's choice is in its Telemetry.
//
// sdktrace.ReadOnlySpan has an unexported method so that only the SDK
// implements it. A record embeds the interface (nil) to have that method,
// as the SDK's own tracetest snapshots do, and implements every exported
// one; a test calls each method, so that a method a later SDK release adds
// fails the test rather than panics in an exporter. RecordTransition and
// RecordRejection remain: they are the reference the records are held
// equal to, and emit a single span where no batch is at hand.
package correxotel
