// Package redisstore opens the snapshot store of the services that read or
// write Redis (the projector and the query service), instrumented by the
// service's telemetry. It is apart from package service so that the
// ingest service, which never touches Redis, links neither the Redis client
// nor the store.
package redisstore

import (
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redisconn/redisclient"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/otel/otelredis"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Open opens the Redis client c names, instruments it when rt has
// telemetry, and returns the snapshot store over it under c.Prefix, with
// the function that closes the client.
func Open(rt service.Runtime, c redisconn.Config) (*snapshot.Store, func(), error) {
	rdb, closeClient, err := Client(rt, c)
	if err != nil {
		return nil, nil, err
	}
	store, err := snapshot.NewStore(rdb, c.Prefix)
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	return store, closeClient, nil
}

// Client opens the Redis client c names and instruments it when rt has
// telemetry, for a store other than the snapshot store over it (the
// projector's, internal/projector/projstore), with the function that
// closes it.
func Client(rt service.Runtime, c redisconn.Config) (redis.UniversalClient, func(), error) {
	rdb, err := redisclient.Open(c)
	if err != nil {
		return nil, nil, err
	}
	closeClient := func() { _ = rdb.Close() }
	if rt.Telemetry != nil {
		if err := otelredis.Instrument(rdb, rt.Telemetry); err != nil {
			closeClient()
			return nil, nil, err
		}
	}
	return rdb, closeClient, nil
}
