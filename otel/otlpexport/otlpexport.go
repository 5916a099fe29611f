// Package otlpexport registers the OTLP exporters, over gRPC and over
// HTTP with protobuf bodies, with correxotel: the otlp value of
// OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER. The binaries that set up
// telemetry (cmd/ingest, cmd/projector, cmd/query, cmd/devstack) import it
// for that effect alone:
//
//	import _ "github.com/correx/sessions/otel/otlpexport"
//
// correxotel itself links the console and Prometheus exporters only, and
// no gRPC, so that a program which runs the services in-process without
// exporting over OTLP (pkg/testkit) does not link the OTLP exporters: the
// HTTP exporters link gRPC too (their configuration shares its types), and
// the exporters cost pkg/testkit 54 packages.
//
// The protocol's default is unchanged: grpc, as before the exporters moved
// here, so that the service binaries behave as they did. A program that does
// not import this package and whose environment selects otlp, whatever the
// protocol, fails at Setup (and Config.Validate) with an *EnvError on
// OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER that names this package,
// rather than falling back to another protocol or exporting nothing.
package otlpexport

import (
	"context"

	correxotel "github.com/correx/sessions/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// protocolHTTPProtobuf is the value of OTEL_EXPORTER_OTLP_PROTOCOL that
// selects HTTP; correxotel passes "grpc" for the other one it accepts.
const protocolHTTPProtobuf = "http/protobuf"

func init() {
	correxotel.RegisterOTLP(newSpanExporter, newMetricExporter)
}

func newSpanExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	if protocol == protocolHTTPProtobuf {
		return otlptracehttp.New(ctx)
	}
	return otlptracegrpc.New(ctx)
}

func newMetricExporter(ctx context.Context, protocol string) (sdkmetric.Exporter, error) {
	if protocol == protocolHTTPProtobuf {
		return otlpmetrichttp.New(ctx)
	}
	return otlpmetricgrpc.New(ctx)
}
