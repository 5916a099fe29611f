// Package promreader builds the Prometheus side of a correxotel.Telemetry:
// an OpenTelemetry metric reader that exports into a private Prometheus
// registry, and the handler that serves that registry at /metrics. It
// imports neither correxotel nor any other package of the module, so that
// correxotel's own tests can register it (promexport cannot be imported by
// them: it imports correxotel). Programs register it through
// otel/promexport.
package promreader

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// New returns a metric reader exporting into a new registry of its own
// (never the global default registry) and a handler serving that registry
// in the Prometheus text format. With runtime, the registry also holds the
// Go runtime and process collectors. Metric names are escaped to
// underscores with unit and type suffixes (correx_http_server_duration_seconds).
func New(runtime bool) (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	reader, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("building prometheus exporter: %w", err)
	}
	if runtime {
		if err := reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, nil, fmt.Errorf("registering go collector: %w", err)
		}
		if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, nil, fmt.Errorf("registering process collector: %w", err)
		}
	}
	// ContinueOnError: a failing collector should cost its own series, not
	// the whole scrape.
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
	return reader, h, nil
}
