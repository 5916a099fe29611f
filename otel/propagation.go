package correxotel

import (
	"context"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// recordCarrier adapts a record's headers to propagation.TextMapCarrier.
// Keys match exactly (Kafka header keys are case-sensitive; the W3C
// propagators use lower case), and Set replaces the first header with the
// key rather than adding a second, so re-injecting into a record that is
// produced again does not leave two traceparent headers. kotel's own
// RecordCarrier behaves the same, so records written by either are read by
// both.
type recordCarrier struct{ r *kgo.Record }

var _ propagation.TextMapCarrier = recordCarrier{}

func (c recordCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c recordCarrier) Set(key, value string) {
	for i, h := range c.r.Headers {
		if h.Key == key {
			c.r.Headers[i].Value = []byte(value)
			return
		}
	}
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c recordCarrier) Keys() []string {
	keys := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		keys[i] = h.Key
	}
	return keys
}

// InjectRecord writes the span context and baggage of ctx into r's headers
// with prop (normally Telemetry.Propagator), replacing headers of the same
// keys; baggage and tracestate are bounded by MaxRecordBaggageBytes and
// MaxRecordTraceStateBytes. A client with KafkaHooks installed need not
// call it: the hooks inject the context set in r.Context when the record is
// produced, with the same bounds.
func InjectRecord(ctx context.Context, prop propagation.TextMapPropagator, r *kgo.Record) {
	recordPropagator{prop}.Inject(ctx, recordCarrier{r})
}

// ExtractRecord returns ctx extended with the remote span context and
// baggage found in r's headers by prop (normally Telemetry.Propagator). A
// span started from the result continues the producer's trace. Headers are
// only read.
func ExtractRecord(ctx context.Context, prop propagation.TextMapPropagator, r *kgo.Record) context.Context {
	return prop.Extract(ctx, recordCarrier{r})
}

// KafkaHooks returns a kgo option installing franz-go's kotel hooks with t's
// providers and propagator (never the globals). Producing a record starts a
// "<topic> publish" producer span as a child of r.Context and injects it into
// the record's headers (baggage and tracestate bounded as InjectRecord
// bounds them); fetching one starts a "<topic> receive" span that
// continues the trace found in the headers and leaves it in r.Context for
// the consumer's own spans. kotel also records the client's connection,
// byte and batch metrics. opts (such as kotel.ClientID or
// kotel.ConsumerGroup, which add span attributes) are applied after ours.
func KafkaHooks(t *Telemetry, opts ...kotel.TracerOpt) kgo.Opt {
	tracerOpts := append([]kotel.TracerOpt{
		kotel.TracerProvider(t.TracerProvider),
		kotel.TracerPropagator(recordPropagator{t.Propagator}),
	}, opts...)
	k := kotel.NewKotel(
		kotel.WithTracer(kotel.NewTracer(tracerOpts...)),
		kotel.WithMeter(kotel.NewMeter(kotel.MeterProvider(t.MeterProvider))),
	)
	return kgo.WithHooks(k.Hooks()...)
}

// HTTPHandler wraps h with otelhttp using t's providers and propagator (never
// the globals): each request gets a server span named operation that
// continues the trace of an incoming traceparent header, the request context
// carries that span and the request's baggage, and the http.server.*
// metrics are recorded, with only the attributes httpMetricAttributes
// keeps (the route is the mux's pattern, never the path; nothing comes from
// the Host header).
func HTTPHandler(t *Telemetry, operation string, h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, operation,
		otelhttp.WithTracerProvider(t.TracerProvider),
		otelhttp.WithMeterProvider(t.MeterProvider),
		otelhttp.WithPropagators(t.Propagator),
	)
}

// httpMetricAttributes are the only attributes the http.server.* (and
// http.client.*) metrics keep: those whose values the service bounds. The
// method is one of nine or _OTHER, the scheme http or https, the protocol
// HTTP/1.0-1.9 or 2, the status and the error type the service's own, and
// the route the pattern the request matched. otelhttp also sets
// server.address and server.port from the Host header, which any client
// chooses freely: kept, each distinct value would add series to every
// scrape for the life of the process.
var httpMetricAttributes = []attribute.Key{
	semconv.HTTPRequestMethodKey, semconv.URLSchemeKey, semconv.NetworkProtocolNameKey,
	semconv.NetworkProtocolVersionKey, semconv.HTTPResponseStatusCodeKey, semconv.HTTPRouteKey,
	semconv.ErrorTypeKey,
}

// httpMetricsView applies httpMetricAttributes to otelhttp's instruments;
// every meter provider of the package has it.
func httpMetricsView() sdkmetric.Option {
	return sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Scope: instrumentation.Scope{Name: otelhttp.ScopeName}},
		sdkmetric.Stream{AttributeFilter: attribute.NewAllowKeysFilter(httpMetricAttributes...)}))
}
