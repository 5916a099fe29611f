package correxotel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/correx/sessions/otel/internal/promreader"
)

// The package's own tests serve metrics as a program importing
// otel/promexport does (which they cannot import: it imports this package).
func init() { RegisterPrometheus(promreader.New) }

// withoutPrometheus undoes the registration until t ends.
func withoutPrometheus(t *testing.T) {
	build := registeredPrometheus()
	RegisterPrometheus(nil)
	t.Cleanup(func() { RegisterPrometheus(build) })
}

// TestPrometheusNotLinked: a program that does not import otel/promexport
// sets up without the exporter, its MetricsHandler answers 404 naming the
// package, and asking for prometheus by name fails at Setup and Validate
// with an error naming it.
func TestPrometheusNotLinked(t *testing.T) {
	withoutPrometheus(t)
	t.Run("setup", func(t *testing.T) {
		tel := setup(t, Config{ServiceName: "query", Getenv: envMap(nil)})
		if len(tel.exporters) != 0 {
			t.Errorf("exporters = %v, want none", tel.exporters)
		}
		for name, h := range map[string]http.Handler{"Setup": tel.MetricsHandler(), "NewForTest": newForTestHandler(t)} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != http.StatusNotFound || !strings.Contains(string(body), promPackage) {
				t.Errorf("%s: /metrics = %d %q, want 404 naming %s", name, rec.Code, body, promPackage)
			}
		}
	})
	t.Run("named", func(t *testing.T) {
		cfg := Config{ServiceName: "query", Getenv: envMap(map[string]string{envMetricsExporter: "prometheus"})}
		tel, err := Setup(context.Background(), cfg)
		if err == nil {
			_ = tel.Shutdown(context.Background())
			t.Fatal("Setup succeeded, want an error naming otel/promexport")
		}
		var env *EnvError
		if !errors.As(err, &env) || env.Var != envMetricsExporter || !strings.Contains(err.Error(), promPackage) {
			t.Errorf("Setup: %v, want an *EnvError on %s naming %s", err, envMetricsExporter, promPackage)
		}
		if verr := cfg.Validate(); verr == nil || verr.Error() != err.Error() {
			t.Errorf("Validate() = %v, want the error Setup returned", verr)
		}
	})
}

func newForTestHandler(t *testing.T) http.Handler {
	tel, _, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel.MetricsHandler()
}
