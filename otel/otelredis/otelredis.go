// Package otelredis instruments a go-redis client with the providers of a
// correxotel.Telemetry. It is apart from correxotel so that a program that
// does not use Redis (the ingest service) does not link the Redis client.
package otelredis

import (
	"errors"
	"fmt"

	correxotel "github.com/correx/sessions/otel"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
)

// Instrument adds redisotel's tracing and metrics hooks to rdb, using
// t's providers (never the globals): a client span per command or pipeline,
// child of the context the command was given, and the db.client.* metrics,
// including connection-pool statistics read at each collection.
//
// Span attributes leave out the command's arguments (db.statement): the
// projector writes whole snapshots, which would make spans large and copy
// session data into the trace backend. The command name remains the span
// name. Call it once per client, before the client is shared.
func Instrument(rdb redis.UniversalClient, t *correxotel.Telemetry) error {
	var errs []error
	if err := redisotel.InstrumentTracing(rdb,
		redisotel.WithTracerProvider(t.TracerProvider),
		redisotel.WithDBStatement(false),
	); err != nil {
		errs = append(errs, fmt.Errorf("instrumenting redis tracing: %w", err))
	}
	if err := redisotel.InstrumentMetrics(rdb, redisotel.WithMeterProvider(t.MeterProvider)); err != nil {
		errs = append(errs, fmt.Errorf("instrumenting redis metrics: %w", err))
	}
	return errors.Join(errs...)
}
