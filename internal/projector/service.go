package projector

import (
	"context"
	"errors"
	"sync"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/service/redisstore"
)

// Serve runs a projector and its health and metrics endpoint until ctx is
// done, then flushes, writes checkpoints and leaves the group.
func Serve(ctx context.Context, cfg Config, rt service.Runtime, opts ...Option) error {
	config.WarnUnbounded(rt.Logger(), cfg.Timeouts)
	rdb, closeClient, err := redisstore.Client(rt, cfg.Redis)
	if err != nil {
		return err
	}
	defer closeClient()
	store, err := projstore.New(rdb, cfg.Redis.Prefix)
	if err != nil {
		return err
	}
	if err := store.WaitReplicas(cfg.RedisWaitReplicas, cfg.RedisWaitTimeout); err != nil {
		return err
	}
	// No kotel consumer hooks here: a span per consumed record would cost
	// more than the fold; the lifecycle spans continue the records' traces.
	opts = append([]Option{WithLogger(rt.Logger()), WithKafkaOpts(rt.KafkaOpts...)}, opts...)
	if rt.Telemetry != nil {
		obs, err := NewTelemetry(rt.Telemetry, cfg.Topic, cfg.Group)
		if err != nil {
			return err
		}
		defer obs.Close() // after Run: emit the spans still queued
		opts = append(opts, WithObserver(obs))
	}
	if cfg.Kafka.Log == nil {
		cfg.Kafka.Log = rt.Logger()
	}
	p := New(cfg, store, opts...)

	hctx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var httpErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		httpErr = rt.HTTP(hctx, service.Endpoint{Addr: cfg.HTTPAddr, Ready: p.Ready, Degraded: p.Degraded, TLS: cfg.TLS})
	}()
	runErr := p.Run(ctx)
	stopHTTP()
	wg.Wait()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	return httpErr
}

// Reset deletes the projector's keys under the configured prefix
// (snapshots, indexes, children, checkpoints, outbox, deadlines), so that
// projectors rebuild the read model from the log; other programs' keys
// under the prefix, such as pkg/feed consumers' checkpoints, are kept.
func Reset(ctx context.Context, cfg Config) (int, error) {
	store, closeStore, err := redisstore.Open(service.Runtime{}, cfg.Redis)
	if err != nil {
		return 0, err
	}
	defer closeStore()
	return store.Reset(ctx)
}
