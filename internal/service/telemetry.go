package service

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Version is the version the services report in their telemetry resource.
const Version = "0.1.0"

// Telemetry returns the runtime of the service named name (ingest,
// projector, query): OpenTelemetry providers from the OTEL_* variables, the
// Prometheus handler for /metrics, and HTTP tracing. shutdown flushes what
// telemetry buffered.
func Telemetry(ctx context.Context, name string, getenv func(string) string, log *slog.Logger) (Runtime, func(), error) {
	t, err := correxotel.Setup(ctx, correxotel.Config{ServiceName: "correx-" + name, ServiceVersion: Version, Getenv: getenv})
	if err != nil {
		return Runtime{}, nil, err
	}
	rt := Runtime{Log: log, Telemetry: t, Metrics: t.MetricsHandler(),
		WrapHTTP: func(op string, h http.Handler) http.Handler { return correxotel.HTTPHandler(t, op, h) }}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "err", err)
		}
	}
	return rt, shutdown, nil
}

// KafkaTracing returns client options that trace produces and consumes
// (kotel), or none without telemetry.
func (rt Runtime) KafkaTracing() []kgo.Opt {
	if rt.Telemetry == nil {
		return nil
	}
	return []kgo.Opt{correxotel.KafkaHooks(rt.Telemetry)}
}
