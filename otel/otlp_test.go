package correxotel_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	correxotel "github.com/correx/sessions/otel"
	_ "github.com/correx/sessions/otel/otlpexport"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The variables and values the cases set, as correxotel names them.
const (
	envTracesExporter    = "OTEL_TRACES_EXPORTER"
	envMetricsExporter   = "OTEL_METRICS_EXPORTER"
	envProtocol          = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol    = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envMetricsProtocol   = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"
)

// received is what a fake collector was sent.
type received struct {
	mu      sync.Mutex
	spans   []string // span names
	metrics []string // metric names
}

func (r *received) addTraces(req *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s.GetName())
			}
		}
	}
}

func (r *received) addMetrics(req *colmetricpb.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				r.metrics = append(r.metrics, m.GetName())
			}
		}
	}
}

func (r *received) names() (spans, metrics []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans), slices.Clone(r.metrics)
}

type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	r *received
}

func (g grpcTraces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.r.addTraces(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type grpcMetrics struct {
	colmetricpb.UnimplementedMetricsServiceServer
	r *received
}

func (g grpcMetrics) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	g.r.addMetrics(req)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// startGRPCCollector serves OTLP/gRPC on a loopback port and returns its
// "http://host:port" endpoint (the scheme makes the exporter use plaintext).
func startGRPCCollector(t *testing.T, r *received) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcTraces{r: r})
	colmetricpb.RegisterMetricsServiceServer(srv, grpcMetrics{r: r})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// startHTTPCollector serves OTLP/HTTP with protobuf bodies and returns its
// base URL.
func startHTTPCollector(t *testing.T, r *received) string {
	t.Helper()
	handle := func(req proto.Message, add func(), resp proto.Message) http.HandlerFunc {
		return func(w http.ResponseWriter, hr *http.Request) {
			body, err := io.ReadAll(hr.Body)
			if err != nil || hr.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
				http.Error(w, "want an OTLP protobuf body", http.StatusBadRequest)
				return
			}
			add()
			out, _ := proto.Marshal(resp)
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, hr *http.Request) {
		req := &coltracepb.ExportTraceServiceRequest{}
		handle(req, func() { r.addTraces(req) }, &coltracepb.ExportTraceServiceResponse{})(w, hr)
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, hr *http.Request) {
		req := &colmetricpb.ExportMetricsServiceRequest{}
		handle(req, func() { r.addMetrics(req) }, &colmetricpb.ExportMetricsServiceResponse{})(w, hr)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestOTLPExporters sends a span and a metric through each protocol
// selection to in-process collectors. Endpoints are read by the exporters
// from the real environment, hence t.Setenv and no t.Parallel; the
// protocol selection goes through Getenv.
func TestOTLPExporters(t *testing.T) {
	cases := []struct {
		name        string
		env         map[string]string // through Getenv
		traces      string            // "grpc" or "http": which collector the endpoint names
		metrics     string
		wantLabels  []string
		splitTarget bool // per-signal endpoint variables instead of the shared one
	}{
		{
			name:       "grpc by default",
			env:        map[string]string{},
			traces:     "grpc",
			metrics:    "grpc",
			wantLabels: []string{"traces:otlp/grpc", "metrics:prometheus", "metrics:otlp/grpc"},
		},
		{
			name:       "http/protobuf for both",
			env:        map[string]string{envProtocol: "http/protobuf"},
			traces:     "http",
			metrics:    "http",
			wantLabels: []string{"traces:otlp/http/protobuf", "metrics:prometheus", "metrics:otlp/http/protobuf"},
		},
		{
			name:       "signal variables override the shared one",
			env:        map[string]string{envProtocol: "grpc", envTracesProtocol: "HTTP/PROTOBUF", envMetricsProtocol: "http/protobuf"},
			traces:     "http",
			metrics:    "http",
			wantLabels: []string{"traces:otlp/http/protobuf", "metrics:prometheus", "metrics:otlp/http/protobuf"},
		},
		{
			name:        "each signal its own protocol",
			env:         map[string]string{envTracesProtocol: "grpc", envMetricsProtocol: "http/protobuf"},
			traces:      "grpc",
			metrics:     "http",
			wantLabels:  []string{"traces:otlp/grpc", "metrics:prometheus", "metrics:otlp/http/protobuf"},
			splitTarget: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var viaGRPC, viaHTTP received
			endpoints := map[string]string{
				"grpc": startGRPCCollector(t, &viaGRPC),
				"http": startHTTPCollector(t, &viaHTTP),
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
			if tc.splitTarget {
				t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoints[tc.traces])
				metricsURL := endpoints[tc.metrics]
				if tc.metrics == "http" {
					metricsURL += "/v1/metrics" // per-signal HTTP URLs are used as-is
				}
				t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metricsURL)
			} else {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoints[tc.traces])
			}

			env := map[string]string{envTracesExporter: "otlp", envMetricsExporter: "otlp"}
			for k, v := range tc.env {
				env[k] = v
			}
			tel, err := correxotel.Setup(context.Background(), correxotel.Config{ServiceName: "projector", Getenv: correxotel.EnvMap(env)})
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			if !slices.Equal(correxotel.Exporters(tel), tc.wantLabels) {
				t.Errorf("exporters = %q, want %q", correxotel.Exporters(tel), tc.wantLabels)
			}
			_, span := tel.Tracer("correxotel.test").Start(context.Background(), "otlp.span")
			span.End()
			correxotel.CountEvents(t, tel, 1)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}

			byName := map[string]*received{"grpc": &viaGRPC, "http": &viaHTTP}
			if spans, _ := byName[tc.traces].names(); !slices.Contains(spans, "otlp.span") {
				t.Errorf("%s collector received spans %q, want otlp.span", tc.traces, spans)
			}
			if _, metrics := byName[tc.metrics].names(); !slices.Contains(metrics, "correx.test.events") {
				t.Errorf("%s collector received metrics %q, want correx.test.events", tc.metrics, metrics)
			}
		})
	}
}

// TestOTLPUnreachableDoesNotBlock: Setup contacts nothing, so it succeeds
// with no collector listening, and Shutdown returns by its deadline even
// though the flush cannot reach one (its error is not asserted: it depends
// on how far the exporter's retries got).
func TestOTLPUnreachableDoesNotBlock(t *testing.T) {
	for _, protocol := range []string{protocolGRPC, protocolHTTPProtobuf} {
		t.Run(protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
			tel, err := correxotel.Setup(context.Background(), correxotel.Config{ServiceName: "ingest", Getenv: correxotel.EnvMap(map[string]string{
				envTracesExporter: "otlp", envMetricsExporter: "otlp", envProtocol: protocol,
			})})
			if err != nil {
				t.Fatalf("Setup with no collector: %v", err)
			}
			want := []string{"traces:otlp/" + protocol, "metrics:prometheus", "metrics:otlp/" + protocol}
			if !slices.Equal(correxotel.Exporters(tel), want) {
				t.Errorf("exporters = %q, want %q", correxotel.Exporters(tel), want)
			}
			_, span := tel.Tracer("correxotel.test").Start(context.Background(), "lost")
			span.End()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = tel.Shutdown(ctx)
		})
	}
}
