package correxotel

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// withoutOTLP undoes otel/otlpexport's registration (which otlp_test.go's
// import makes for the whole test binary) until t ends.
func withoutOTLP(t *testing.T) {
	otlpExporters.Lock()
	span, metric := otlpExporters.span, otlpExporters.metric
	otlpExporters.span, otlpExporters.metric = nil, nil
	otlpExporters.Unlock()
	t.Cleanup(func() { RegisterOTLP(span, metric) })
}

// TestOTLPNotLinked: a program that does not import otel/otlpexport and
// asks for otlp, whatever the protocol, fails at Setup with an error on
// each exporter variable that names the package to import; without otlp
// it sets up as before.
func TestOTLPNotLinked(t *testing.T) {
	withoutOTLP(t)
	for _, protocol := range []string{"", protocolGRPC, protocolHTTPProtobuf} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			cfg := Config{ServiceName: "ingest", Getenv: envMap(map[string]string{
				envTracesExporter: "console,otlp", envMetricsExporter: "otlp", envProtocol: protocol,
			})}
			tel, err := Setup(context.Background(), cfg)
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatal("Setup succeeded, want an error naming otel/otlpexport")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
			if verr := cfg.Validate(); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate() = %v, want the error Setup returned", verr)
			}
			for _, want := range []string{envTracesExporter, envMetricsExporter, "github.com/correx/sessions/otel/otlpexport"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
	t.Run("console only", func(t *testing.T) {
		setup(t, Config{ServiceName: "ingest", ConsoleWriter: new(strings.Builder), Getenv: envMap(map[string]string{
			envTracesExporter: "console", envMetricsExporter: "console",
		})})
	})
}
