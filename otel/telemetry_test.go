package correxotel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// envMap returns a Getenv reading only m.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// setup runs Setup and shuts the result down when the test ends.
func setup(t *testing.T, cfg Config) *Telemetry {
	t.Helper()
	tel, err := Setup(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// scrape GETs h and parses the Prometheus text format.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, body %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// labels returns m's labels as a map.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// countEvents adds n to the test counter through tel's MeterProvider.
func countEvents(t *testing.T, tel *Telemetry, n int64) {
	t.Helper()
	c, err := tel.Meter("correxotel.test").Int64Counter("correx.test.events", metric.WithUnit("{event}"))
	if err != nil {
		t.Fatalf("Int64Counter: %v", err)
	}
	c.Add(context.Background(), n, metric.WithAttributes(attribute.String("outcome", "applied")))
}

const testFamily = "correx_test_events_total"

func TestSetupWithoutExportersServesPrometheus(t *testing.T) {
	cases := map[string]map[string]string{
		"unset":                   {},
		"none":                    {envTracesExporter: "none", envMetricsExporter: "none"},
		"prometheus named":        {envMetricsExporter: "prometheus"},
		"case and space ignored":  {envTracesExporter: " NONE ", envMetricsExporter: "Prometheus,"},
		"otlp protocol unused ok": {envProtocol: "http/json"},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			tel := setup(t, Config{ServiceName: "ingest", Getenv: envMap(env)})
			if got, want := tel.exporters, []string{"metrics:prometheus"}; !slices.Equal(got, want) {
				t.Errorf("exporters = %q, want %q", got, want)
			}
			countEvents(t, tel, 3)

			fams := scrape(t, tel.MetricsHandler())
			fam, ok := fams[testFamily]
			if !ok {
				t.Fatalf("/metrics has no %s; families: %v", testFamily, keys(fams))
			}
			if fam.GetType() != dto.MetricType_COUNTER || len(fam.GetMetric()) != 1 {
				t.Fatalf("%s: type %v with %d series, want one COUNTER series", testFamily, fam.GetType(), len(fam.GetMetric()))
			}
			m := fam.GetMetric()[0]
			if got := m.GetCounter().GetValue(); got != 3 {
				t.Errorf("%s = %v, want 3", testFamily, got)
			}
			if got := labels(m)["outcome"]; got != "applied" {
				t.Errorf("%s outcome label = %q, want applied", testFamily, got)
			}
			if _, ok := fams["go_goroutines"]; !ok {
				t.Errorf("/metrics lacks the Go collector's go_goroutines")
			}
		})
	}
}

func TestMetricsHandlerUsesPrivateRegistry(t *testing.T) {
	tel := setup(t, Config{ServiceName: "ingest", Getenv: envMap(nil)})
	countEvents(t, tel, 1)
	if _, ok := scrape(t, tel.MetricsHandler())[testFamily]; !ok {
		t.Fatalf("precondition: %s missing from MetricsHandler", testFamily)
	}
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("default gatherer: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == testFamily || f.GetName() == "target_info" {
			t.Errorf("%s registered on the global default registry", f.GetName())
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestResourceFromConfigAndEnvironment(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want map[string]string // target_info labels
	}{
		{
			name: "config only",
			want: map[string]string{"service_name": "ingest", "service_version": "1.2.3", "telemetry_sdk_language": "go"},
		},
		{
			name: "attributes override and extend",
			env:  map[string]string{envResourceAttributes: "service.name=edge, service.version=2.0.0,deployment.environment.name=staging%20eu"},
			want: map[string]string{"service_name": "edge", "service_version": "2.0.0", "deployment_environment_name": "staging eu"},
		},
		{
			name: "service name wins over attributes",
			env:  map[string]string{envServiceName: "renamed", envResourceAttributes: "service.name=edge"},
			want: map[string]string{"service_name": "renamed", "service_version": "1.2.3"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel := setup(t, Config{ServiceName: "ingest", ServiceVersion: "1.2.3", Getenv: envMap(tc.env)})
			countEvents(t, tel, 1) // target_info is only written next to a metric
			fam, ok := scrape(t, tel.MetricsHandler())["target_info"]
			if !ok || len(fam.GetMetric()) != 1 {
				t.Fatalf("/metrics: no single target_info series")
			}
			got := labels(fam.GetMetric()[0])
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("target_info %s = %q, want %q (all: %v)", k, got[k], want, got)
				}
			}
		})
	}
}

func TestConsoleTraceExporter(t *testing.T) {
	var buf bytes.Buffer
	tel, err := Setup(context.Background(), Config{
		ServiceName:   "projector",
		Getenv:        envMap(map[string]string{envTracesExporter: "console"}),
		ConsoleWriter: &buf,
	})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if got, want := tel.exporters, []string{"traces:console", "metrics:prometheus"}; !slices.Equal(got, want) {
		t.Errorf("exporters = %q, want %q", got, want)
	}
	_, span := tel.Tracer("correxotel.test").Start(context.Background(), "console.span")
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	var got struct {
		Name        string
		SpanContext struct{ TraceID, SpanID string }
	}
	if err := json.NewDecoder(&buf).Decode(&got); err != nil {
		t.Fatalf("console output is not JSON: %v", err)
	}
	if got.Name != "console.span" {
		t.Errorf("Name = %q, want console.span", got.Name)
	}
	if want := span.SpanContext().SpanID().String(); got.SpanContext.SpanID != want {
		t.Errorf("SpanContext.SpanID = %q, want %q", got.SpanContext.SpanID, want)
	}
}

func TestConsoleMetricExporter(t *testing.T) {
	var buf bytes.Buffer
	tel, err := Setup(context.Background(), Config{
		ServiceName:   "projector",
		Getenv:        envMap(map[string]string{envMetricsExporter: "console,prometheus"}),
		ConsoleWriter: &buf,
	})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if got, want := tel.exporters, []string{"metrics:prometheus", "metrics:console"}; !slices.Equal(got, want) {
		t.Errorf("exporters = %q, want %q", got, want)
	}
	countEvents(t, tel, 2)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	var got struct {
		ScopeMetrics []struct {
			Metrics []struct{ Name string }
		}
	}
	if err := json.NewDecoder(&buf).Decode(&got); err != nil {
		t.Fatalf("console output is not JSON: %v", err)
	}
	var names []string
	for _, sm := range got.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	if !slices.Contains(names, "correx.test.events") {
		t.Errorf("console metrics = %q, want correx.test.events among them", names)
	}
}

func TestInvalidConfiguration(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		env      map[string]string
		wantVars []string // each must be named in the error, each an *EnvError
		wantText []string // further substrings of the error
	}{
		{
			name:     "unknown trace exporter",
			env:      map[string]string{envTracesExporter: "zipkin"},
			wantVars: []string{envTracesExporter},
			wantText: []string{"zipkin", "otlp, console, none"},
		},
		{
			name:     "unknown metric exporter",
			env:      map[string]string{envMetricsExporter: "statsd"},
			wantVars: []string{envMetricsExporter},
			wantText: []string{"statsd", "otlp, console, prometheus, none"},
		},
		{
			name:     "none with another",
			env:      map[string]string{envTracesExporter: "none,console"},
			wantVars: []string{envTracesExporter},
		},
		{
			name:     "unsupported protocol for otlp traces",
			env:      map[string]string{envTracesExporter: "otlp", envProtocol: "http/json"},
			wantVars: []string{envProtocol},
			wantText: []string{"grpc, http/protobuf"},
		},
		{
			name:     "signal protocol is the one named",
			env:      map[string]string{envMetricsExporter: "otlp", envProtocol: "grpc", envMetricsProtocol: "thrift"},
			wantVars: []string{envMetricsProtocol},
		},
		{
			name:     "malformed resource attributes",
			env:      map[string]string{envResourceAttributes: "team=core,oops"},
			wantVars: []string{envResourceAttributes},
		},
		{
			name:     "bad percent-encoding",
			env:      map[string]string{envResourceAttributes: "team=%zz"},
			wantVars: []string{envResourceAttributes},
		},
		{
			name:     "every problem at once",
			cfg:      Config{ServiceName: " "},
			env:      map[string]string{envTracesExporter: "jaeger", envMetricsExporter: "statsd"},
			wantVars: []string{envTracesExporter, envMetricsExporter},
			wantText: []string{"ServiceName"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.ServiceName == "" {
				cfg.ServiceName = "ingest"
			}
			cfg.Getenv = envMap(tc.env)

			tel, err := Setup(context.Background(), cfg)
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatal("Setup succeeded, want an error")
			}
			if tel != nil {
				t.Errorf("Setup returned a Telemetry with its error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
			if verr := cfg.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate() = %v, want the error Setup returned", verr)
			}
			for _, v := range append(tc.wantVars, tc.wantText...) {
				if !strings.Contains(err.Error(), v) {
					t.Errorf("error %q does not mention %q", err, v)
				}
			}
			var envErr *EnvError
			if !errors.As(err, &envErr) || !slices.Contains(tc.wantVars, envErr.Var) {
				t.Errorf("errors.As(*EnvError) found %+v, want one for %v", envErr, tc.wantVars)
			}
		})
	}
}

func TestShutdownTwice(t *testing.T) {
	var buf bytes.Buffer
	tel, err := Setup(context.Background(), Config{
		ServiceName:   "query",
		Getenv:        envMap(map[string]string{envTracesExporter: "console", envMetricsExporter: "console"}),
		ConsoleWriter: &buf,
	})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	for i := range 2 {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown #%d: %v", i+1, err)
		}
	}
	before := buf.Len()
	_, span := tel.Tracer("correxotel.test").Start(context.Background(), "after.shutdown")
	span.End()
	if span.IsRecording() {
		t.Errorf("span started after Shutdown is recording")
	}
	if buf.Len() != before {
		t.Errorf("console output grew after Shutdown: %q", buf.String()[before:])
	}

	test, _, _ := NewForTest()
	for i := range 2 {
		if err := test.Shutdown(context.Background()); err != nil {
			t.Fatalf("NewForTest Shutdown #%d: %v", i+1, err)
		}
	}
}

// TestSamplerFromEnvironment checks that the SDK, not this package, honours
// OTEL_TRACES_SAMPLER from the real environment (hence t.Setenv, and no
// t.Parallel).
func TestSamplerFromEnvironment(t *testing.T) {
	cases := []struct {
		sampler, arg string
		wantSampled  bool
	}{
		{"", "", true},
		{"always_off", "", false},
		{"parentbased_traceidratio", "0", false},
		{"traceidratio", "1", true},
	}
	for _, tc := range cases {
		t.Run(tc.sampler+"/"+tc.arg, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			tel := setup(t, Config{ServiceName: "ingest", Getenv: envMap(nil)})
			_, span := tel.Tracer("correxotel.test").Start(context.Background(), "sampled?")
			defer span.End()
			if got := span.SpanContext().IsSampled(); got != tc.wantSampled {
				t.Errorf("sampled = %v, want %v", got, tc.wantSampled)
			}
		})
	}
}

// lockedWriter is exercised by the console tests; this checks it defaults
// to os.Stdout rather than a nil writer.
func TestConsoleWriterDefault(t *testing.T) {
	w := newLockedWriter(nil)
	if w.w != os.Stdout {
		t.Fatalf("default console writer = %v, want os.Stdout", w.w)
	}
}
