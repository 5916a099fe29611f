package service

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/correx/sessions/internal/redisconn"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
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

// InstrumentRedis traces and measures a Redis client's calls, when telemetry
// is on.
func (rt Runtime) InstrumentRedis(rdb redis.UniversalClient) error {
	if rt.Telemetry == nil {
		return nil
	}
	return correxotel.InstrumentRedis(rdb, rt.Telemetry)
}

// OpenStore opens the Redis client c names, instruments it when telemetry
// is on, and returns the snapshot store over it under c.Prefix, with the
// function that closes the client.
func (rt Runtime) OpenStore(c redisconn.Config) (*snapshot.Store, func(), error) {
	rdb, err := c.Open()
	if err != nil {
		return nil, nil, err
	}
	closeClient := func() { _ = rdb.Close() }
	if err := rt.InstrumentRedis(rdb); err != nil {
		closeClient()
		return nil, nil, err
	}
	store, err := snapshot.NewStore(rdb, c.Prefix)
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	return store, closeClient, nil
}
