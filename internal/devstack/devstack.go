// Package devstack runs the whole pipeline in one process: an embedded
// Kafka-protocol broker (franz-go's kfake, optionally persisted to a data
// directory), an embedded Redis (miniredis) unless a Redis URL is given, and
// the ingest, projector and query services. cmd/devstack (`make run`),
// pkg/testkit (the public test harness built over it) and the end-to-end
// tests start it.
//
// The projector can be stopped, killed and started again while the rest of
// the stack runs (StopProjector, KillProjector, StartProjector): it keeps its
// address, group instance id and Redis, so a restart exercises the recovery
// from checkpoints that a real restart does.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/service"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Options configure a stack. Zero values pick embedded dependencies and free
// ports.
type Options struct {
	// Brokers of an external Kafka; empty starts the embedded broker.
	Brokers []string
	// KafkaPort is the embedded broker's port on 127.0.0.1 (0: a free one).
	KafkaPort int
	// DataDir persists the embedded broker's log; empty keeps it in memory.
	DataDir string
	// RedisURL of an external Redis; empty starts an embedded miniredis.
	RedisURL     string
	RedisCluster bool
	// RedisPasswordFile and RedisTLSCAFile go with an external Redis
	// (CORREX_REDIS_PASSWORD_FILE, CORREX_REDIS_TLS_CA_FILE).
	RedisPasswordFile, RedisTLSCAFile string
	// KafkaSecurity holds the TLS and SASL settings of an external Kafka;
	// its Brokers and ClientID are ignored.
	KafkaSecurity kafka.Config
	// Auth is the authentication of ingest and query. nil runs them open
	// (CORREX_AUTH_DISABLED) and without rate limit: devstack is for a
	// laptop, and its demo workload sends from one address.
	Auth *auth.Config
	// TLS serves the three services over HTTPS; the URLs are then https://.
	TLS httpx.TLSConfig
	// Addresses of the services (":0" or "" picks free ports).
	IngestAddr, QueryAddr, ProjectorAddr string
	Topic, Prefix, Group                 string
	Partitions                           int
	// Projector adjusts the projector's configuration (tests shorten
	// intervals).
	Projector func(*projector.Config)
	// Runtime returns the runtime of a service (telemetry); nil gives a
	// plain one with Log.
	Runtime func(name string) service.Runtime
	Log     *slog.Logger
}

// Stack is a running pipeline.
type Stack struct {
	IngestURL, QueryURL, ProjectorURL string
	Brokers                           []string
	RedisURL                          string
	Topic, Prefix                     string
	Broker                            *kfake.Cluster // nil with an external Kafka
	Redis                             *miniredis.Miniredis

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error

	// The projector's own lifetime (guarded by projMu): its config, its
	// runtime, its listen address, and, while it runs, how to stop it.
	projMu     sync.Mutex
	pcfg       projector.Config
	prt        service.Runtime
	projAddr   string
	projCancel context.CancelFunc
	projDone   chan error
	redisProxy *cutProxy // nil when the projector talks to Redis directly
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Start starts the stack; it runs until ctx is done or Stop is called.
func Start(ctx context.Context, o Options) (*Stack, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Stack{Topic: orDefault(o.Topic, "correx.session-events"), Prefix: orDefault(o.Prefix, "correx"), Brokers: o.Brokers, RedisURL: o.RedisURL}
	if o.Partitions == 0 {
		o.Partitions = 12
	}
	if len(s.Brokers) == 0 {
		kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(o.KafkaPort), kfake.DefaultNumPartitions(o.Partitions)}
		if o.DataDir != "" {
			if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
				return nil, fmt.Errorf("devstack: %w", err)
			}
			kopts = append(kopts, kfake.DataDir(o.DataDir))
		}
		c, err := kfake.NewCluster(kopts...)
		if err != nil {
			return nil, fmt.Errorf("devstack: embedded broker: %w", err)
		}
		s.Broker = c
		s.Brokers = c.ListenAddrs()
	}
	if s.RedisURL == "" {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			s.close()
			return nil, fmt.Errorf("devstack: embedded redis: %w", err)
		}
		s.Redis = m
		s.RedisURL = "redis://" + m.Addr() + "/0"
	}
	rt := func(name string) service.Runtime {
		if o.Runtime != nil {
			return o.Runtime(name)
		}
		return service.Runtime{Log: log.With("service", name)}
	}
	kcfg := o.KafkaSecurity
	kcfg.Brokers = s.Brokers
	authCfg := auth.Config{Disabled: true}
	if o.Auth != nil {
		authCfg = *o.Auth
	}
	ctx, s.cancel = context.WithCancel(ctx)

	scheme := "http://"
	if o.TLS.Enabled() {
		scheme = "https://"
	}
	listen := func(addr string) (net.Listener, string, error) {
		l, err := httpx.Listen(orDefault(addr, "127.0.0.1:0"))
		if err != nil {
			return nil, "", err
		}
		return l, scheme + l.Addr().String(), nil
	}
	li, ingestURL, err := listen(o.IngestAddr)
	if err != nil {
		s.close()
		return nil, err
	}
	lq, queryURL, err := listen(o.QueryAddr)
	if err != nil {
		li.Close()
		s.close()
		return nil, err
	}
	lp, projURL, err := listen(o.ProjectorAddr)
	if err != nil {
		li.Close()
		lq.Close()
		s.close()
		return nil, err
	}
	s.IngestURL, s.QueryURL, s.ProjectorURL = ingestURL, queryURL, projURL

	icfg := ingest.Config{Kafka: kcfg, Topic: s.Topic, Partitions: o.Partitions, ProduceTimeout: 10 * time.Second,
		Auth: authCfg, TLS: o.TLS}
	icfg.Kafka.ClientID = "correx-ingest"
	irt := rt("ingest")
	irt.Listener = li
	s.goRun("ingest", func() error { return ingest.Serve(ctx, icfg, irt) })

	pcfg := projector.Config{Kafka: kcfg, Topic: s.Topic, Partitions: o.Partitions, Group: orDefault(o.Group, "correx-projector"),
		InstanceID: "devstack-projector", RedisURL: s.RedisURL, RedisCluster: o.RedisCluster, RedisPrefix: s.Prefix,
		FlushInterval: 100 * time.Millisecond, MaxFlushInterval: 2 * time.Second, FlushSize: 20000, CacheSize: 100000, MaxPollRecords: 10000,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
		RedisPasswordFile: o.RedisPasswordFile, RedisTLSCAFile: o.RedisTLSCAFile, TLS: o.TLS}
	pcfg.Kafka.ClientID = "correx-projector"
	if o.Projector != nil {
		o.Projector(&pcfg)
	}
	if err := pcfg.Validate(); err != nil {
		lp.Close()
		lq.Close()
		s.Stop()
		return nil, err
	}
	// The projector reaches a plain single Redis through a proxy that
	// KillProjector cuts: a killed process writes nothing more, and so
	// must this one (see KillProjector).
	if u, err := url.Parse(pcfg.RedisURL); err == nil && u.Scheme == "redis" && !pcfg.RedisCluster {
		px, err := newCutProxy(u.Host)
		if err != nil {
			lp.Close()
			s.Stop()
			return nil, fmt.Errorf("devstack: redis proxy: %w", err)
		}
		s.redisProxy = px
		u.Host = px.Addr()
		pcfg.RedisURL = u.String()
	}
	s.ctx, s.pcfg, s.prt, s.projAddr = ctx, pcfg, rt("projector"), lp.Addr().String()
	s.startProjector(lp)

	qcfg := query.Config{Kafka: kcfg, Topic: s.Topic, RedisURL: s.RedisURL, RedisCluster: o.RedisCluster, RedisPrefix: s.Prefix,
		RedisPasswordFile: o.RedisPasswordFile, RedisTLSCAFile: o.RedisTLSCAFile, Auth: authCfg, TLS: o.TLS}
	qcfg.Kafka.ClientID = "correx-query"
	qrt := rt("query")
	qrt.Listener = lq
	s.goRun("query", func() error { return query.Serve(ctx, qcfg, qrt) })
	return s, nil
}

// Stop shuts the services down gracefully (the projector flushes and writes
// its checkpoints), then the embedded dependencies, and returns the services'
// errors.
func (s *Stack) Stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	s.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// ErrProjectorRunning is returned by StartProjector while the projector runs;
// ErrProjectorStopped by StopProjector and KillProjector when it does not.
var (
	ErrProjectorRunning = errors.New("devstack: the projector is running")
	ErrProjectorStopped = errors.New("devstack: the projector is not running")
	// ErrCannotKill is returned by KillProjector with Redis Cluster or a
	// rediss:// URL, which the projector reaches without the proxy that a
	// kill cuts.
	ErrCannotKill = errors.New("devstack: KillProjector needs a plain redis:// URL of a single Redis")
)

// startProjector runs the projector on l (projMu held or not yet shared).
func (s *Stack) startProjector(l net.Listener) {
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	s.projCancel, s.projDone = cancel, done
	rt := s.prt
	rt.Listener = l
	cfg := s.pcfg
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		done <- projector.Serve(ctx, cfg, rt)
	}()
}

// StartProjector starts the projector again after StopProjector or
// KillProjector, on the same address and with the same group instance id.
// It returns once the projector listens; it folds again once it has its
// partitions back.
func (s *Stack) StartProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	if s.projCancel != nil {
		return ErrProjectorRunning
	}
	if s.ctx.Err() != nil {
		return fmt.Errorf("devstack: the stack is stopped: %w", s.ctx.Err())
	}
	l, err := httpx.Listen(s.projAddr)
	if err != nil {
		return fmt.Errorf("devstack: projector listener: %w", err)
	}
	if s.redisProxy != nil {
		s.redisProxy.Restore()
	}
	s.startProjector(l)
	return nil
}

// StopProjector shuts the projector down gracefully, as SIGTERM does: it
// flushes, writes its checkpoints and leaves the group. It returns the
// projector's error, if any.
func (s *Stack) StopProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	if s.projCancel == nil {
		return ErrProjectorStopped
	}
	s.projCancel()
	err := <-s.projDone
	s.projCancel, s.projDone = nil, nil
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// KillProjector stops the projector as a crash would, as far as the read
// model can tell: its Redis connections are cut first, so nothing it holds
// in memory (folded but unflushed snapshots, checkpoints not yet written)
// reaches Redis; then it is stopped. A later StartProjector resumes from the
// last checkpoints written before the kill, and replays the rest from Kafka.
// The projector's own errors from its failed final flush are expected and
// dropped. It needs the projector to reach Redis through devstack's proxy
// (a plain redis:// URL of a single Redis) and returns ErrCannotKill
// otherwise.
func (s *Stack) KillProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	if s.projCancel == nil {
		return ErrProjectorStopped
	}
	if s.redisProxy == nil {
		return ErrCannotKill
	}
	s.redisProxy.Cut()
	s.projCancel()
	<-s.projDone
	s.projCancel, s.projDone = nil, nil
	return nil
}

func (s *Stack) goRun(name string, fn func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
			s.mu.Unlock()
		}
	}()
}

func (s *Stack) close() {
	s.projMu.Lock()
	if s.projDone != nil {
		// Stop cancelled the stack's context, so the projector has ended.
		if err := <-s.projDone; err != nil && !errors.Is(err, context.Canceled) {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("projector: %w", err))
			s.mu.Unlock()
		}
		s.projCancel()
		s.projCancel, s.projDone = nil, nil
	}
	s.projMu.Unlock()
	if s.redisProxy != nil {
		s.redisProxy.Close()
	}
	if s.Broker != nil {
		s.Broker.Close()
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
}
