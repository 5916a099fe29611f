// Package promexport registers the Prometheus exporter with correxotel:
// the metrics every Telemetry serves at /metrics (MetricsHandler), with the
// Go runtime and process collectors. The binaries that set up telemetry
// (cmd/ingest, cmd/projector, cmd/query, cmd/devstack) import it for that
// effect alone:
//
//	import _ "github.com/correx/sessions/otel/promexport"
//
// correxotel itself does not link the Prometheus client, so that a program
// which runs the services in-process (pkg/testkit) does not: the client
// and its protocol buffers cost such a program about 60 packages. In a
// program that does not import this package, MetricsHandler answers 404
// with a line naming it, and OTEL_METRICS_EXPORTER=prometheus fails at
// Setup (and Config.Validate) with an *EnvError that names it.
package promexport

import (
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/otel/internal/promreader"
)

func init() { correxotel.RegisterPrometheus(promreader.New) }
