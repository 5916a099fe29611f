package correxotel

import (
	"errors"
	"fmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
)

// The environment variables this package reads through Config.Getenv. Others
// (exporter endpoints, headers and timeouts, the sampler, batch and export
// intervals) are read from the real process environment by the SDK and the
// exporters themselves; see the package documentation.
const (
	envTracesExporter     = "OTEL_TRACES_EXPORTER"
	envMetricsExporter    = "OTEL_METRICS_EXPORTER"
	envProtocol           = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol     = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envMetricsProtocol    = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	envServiceName        = "OTEL_SERVICE_NAME"
	envResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
)

// The values those variables take.
const (
	exporterOTLP            = "otlp"
	exporterConsole         = "console"
	exporterNone            = "none"
	exporterPrometheus      = "prometheus"
	protocolGRPC            = "grpc"
	protocolHTTPProtobuf    = "http/protobuf"
	defaultOTLPProtocol     = protocolGRPC
	resourceAttributeSyntax = "want comma-separated key=value pairs with percent-encoded values"
)

var (
	allowedTraceExporters  = []string{exporterOTLP, exporterConsole, exporterNone}
	allowedMetricExporters = []string{exporterOTLP, exporterConsole, exporterPrometheus, exporterNone}
	allowedProtocols       = []string{protocolGRPC, protocolHTTPProtobuf}
)

// Config says what a binary is called; everything else comes from the
// standard OTEL_* environment variables. The zero value is not valid: a
// ServiceName is required.
type Config struct {
	// ServiceName is the service.name resource attribute, such as "ingest".
	// Required. OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES,
	// overrides it, so that an operator can rename a deployment without a
	// rebuild.
	ServiceName string

	// ServiceVersion is the service.version resource attribute. Default: unset.
	// service.version in OTEL_RESOURCE_ATTRIBUTES overrides it.
	ServiceVersion string

	// Getenv reads the OTEL_* variables this package interprets itself (the
	// exporter selections, OTLP protocols, service name and resource
	// attributes). Default (nil): os.Getenv. Tests inject a map lookup.
	Getenv func(string) string

	// ConsoleWriter receives the output of the console exporters, one JSON
	// document per span or per metric export. Default (nil): os.Stdout. The
	// package serialises writes to it, so it need not be safe for concurrent
	// use.
	ConsoleWriter io.Writer
	// SpanExporter, when set, receives every span, as the exporters
	// OTEL_TRACES_EXPORTER selects do: spans made through the SDK from a
	// batch span processor, lifecycle spans from LifecycleSpans.Export. Calls
	// to it are serialised. Benchmarks use it to measure instrumentation
	// apart from an exporter's encoding.
	SpanExporter sdktrace.SpanExporter
}

// selection is what the environment asks for, once validated.
type selection struct {
	traces         []string // exporter names in the order given, without "none"
	metrics        []string // exporter names in the order given, without "none" and "prometheus"
	tracesProtocol string   // set when traces includes otlp
	metricProtocol string   // set when metrics includes otlp
	resourceAttrs  []resourceAttr
	serviceName    string // OTEL_SERVICE_NAME, trimmed; "" when unset
}

type resourceAttr struct{ key, value string }

func (c Config) getenv(key string) string {
	if c.Getenv == nil {
		return os.Getenv(key)
	}
	return c.Getenv(key)
}

// Validate reports every problem with c and with the OTEL_* variables it
// reads through c.Getenv, joined into one error; each wraps
// ErrInvalidConfig, and those about a variable are *EnvError.
func (c Config) Validate() error {
	_, err := c.selection()
	return err
}

func (c Config) selection() (selection, error) {
	var (
		s    selection
		errs []error
		err  error
	)
	if strings.TrimSpace(c.ServiceName) == "" {
		errs = append(errs, fmt.Errorf("%w: ServiceName is required", ErrInvalidConfig))
	}
	if s.traces, err = exporterList(envTracesExporter, c.getenv(envTracesExporter), allowedTraceExporters); err != nil {
		errs = append(errs, err)
	}
	if s.metrics, err = exporterList(envMetricsExporter, c.getenv(envMetricsExporter), allowedMetricExporters); err != nil {
		errs = append(errs, err)
	}
	// The Prometheus endpoint is always on where it is linked; naming it
	// changes nothing there, and is an error where it is not.
	if slices.Contains(s.metrics, exporterPrometheus) && registeredPrometheus() == nil {
		errs = append(errs, &EnvError{Var: envMetricsExporter, Value: c.getenv(envMetricsExporter), Reason: promNotLinked})
	}
	s.metrics = slices.DeleteFunc(s.metrics, func(v string) bool { return v == exporterPrometheus })
	if slices.Contains(s.traces, exporterOTLP) {
		if s.tracesProtocol, err = c.protocol(envTracesProtocol); err != nil {
			errs = append(errs, err)
		} else if !otlpLinked() {
			errs = append(errs, &EnvError{Var: envTracesExporter, Value: c.getenv(envTracesExporter), Reason: otlpNotLinked})
		}
	}
	if slices.Contains(s.metrics, exporterOTLP) {
		if s.metricProtocol, err = c.protocol(envMetricsProtocol); err != nil {
			errs = append(errs, err)
		} else if !otlpLinked() {
			errs = append(errs, &EnvError{Var: envMetricsExporter, Value: c.getenv(envMetricsExporter), Reason: otlpNotLinked})
		}
	}
	if s.resourceAttrs, err = parseResourceAttributes(c.getenv(envResourceAttributes)); err != nil {
		errs = append(errs, err)
	}
	s.serviceName = strings.TrimSpace(c.getenv(envServiceName))
	return s, errors.Join(errs...)
}

// exporterList parses a comma-separated OTEL_*_EXPORTER value. Values are
// case-insensitive, as the specification asks of enumerations; empty
// elements are skipped; "none" must stand alone. The result never holds
// "none" and holds each exporter once.
func exporterList(name, raw string, allowed []string) ([]string, error) {
	var out []string
	none := false
	for _, v := range strings.Split(raw, ",") {
		v = strings.ToLower(strings.TrimSpace(v))
		switch {
		case v == "":
			continue
		case !slices.Contains(allowed, v):
			return nil, &EnvError{Var: name, Value: raw, Reason: fmt.Sprintf("unsupported exporter %q", v), Allowed: allowed}
		case v == exporterNone:
			none = true
		case !slices.Contains(out, v):
			out = append(out, v)
		}
	}
	if none && len(out) > 0 {
		return nil, &EnvError{Var: name, Value: raw, Reason: `"none" cannot be combined with other exporters`, Allowed: allowed}
	}
	return out, nil
}

// protocol returns the OTLP protocol for one signal: the signal's own
// variable, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc.
func (c Config) protocol(signalVar string) (string, error) {
	name, raw := signalVar, c.getenv(signalVar)
	if strings.TrimSpace(raw) == "" {
		name, raw = envProtocol, c.getenv(envProtocol)
	}
	v := strings.ToLower(strings.TrimSpace(raw))
	switch v {
	case "":
		return defaultOTLPProtocol, nil
	case protocolGRPC, protocolHTTPProtobuf:
		return v, nil
	}
	return "", &EnvError{Var: name, Value: raw, Reason: fmt.Sprintf("unsupported OTLP protocol %q", v), Allowed: allowedProtocols}
}

// parseResourceAttributes reads OTEL_RESOURCE_ATTRIBUTES as the SDK's own
// detector does (comma-separated key=value, values percent-decoded), except
// that a malformed value is an error rather than a partly applied resource:
// the specification says to discard the whole value on a decoding error, and
// failing loudly at start-up is kinder than a silently missing attribute.
func parseResourceAttributes(raw string) ([]resourceAttr, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var out []resourceAttr
	for _, pair := range strings.Split(raw, ",") {
		k, v, found := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !found || k == "" {
			return nil, &EnvError{Var: envResourceAttributes, Value: raw, Reason: fmt.Sprintf("malformed pair %q, %s", pair, resourceAttributeSyntax)}
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, &EnvError{Var: envResourceAttributes, Value: raw, Reason: fmt.Sprintf("bad percent-encoding in %q, %s", pair, resourceAttributeSyntax)}
		}
		out = append(out, resourceAttr{key: k, value: val})
	}
	return out, nil
}
