// Package devstack runs the whole pipeline in one process: an embedded
// Kafka-protocol broker (franz-go's kfake, optionally persisted to a data
// directory), an embedded Redis (miniredis) unless a Redis URL is given, and
// the ingest, projector and query services. cmd/devstack (`make run`) and the
// end-to-end tests start it.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
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

	// The projector's defaults, apart from the stack's own endpoints and
	// these deliberate differences: a fixed instance id (not the host
	// name), so that a restarted stack takes its partitions back at once;
	// no leave on shutdown (it was never a member of a shared group);
	// shorter group timeouts, so that tests that stop members see
	// rebalances quickly; and a shorter longest poll wait (FlushInterval).
	pcfg := projector.DefaultConfig()
	clientID := pcfg.Kafka.ClientID
	pcfg.Kafka = kcfg
	pcfg.Kafka.ClientID = clientID
	pcfg.Topic, pcfg.Partitions, pcfg.Group = s.Topic, o.Partitions, orDefault(o.Group, pcfg.Group)
	pcfg.RedisURL, pcfg.RedisCluster, pcfg.RedisPrefix = s.RedisURL, o.RedisCluster, s.Prefix
	pcfg.RedisPasswordFile, pcfg.RedisTLSCAFile, pcfg.TLS = o.RedisPasswordFile, o.RedisTLSCAFile, o.TLS
	pcfg.InstanceID = "devstack-projector"
	pcfg.LeaveOnShutdown = false
	pcfg.SessionTimeout, pcfg.RebalanceTimeout = 10*time.Second, 30*time.Second
	pcfg.FlushInterval = 100 * time.Millisecond
	if o.Projector != nil {
		o.Projector(&pcfg)
	}
	if err := pcfg.Validate(); err != nil {
		s.Stop()
		return nil, err
	}
	prt := rt("projector")
	prt.Listener = lp
	s.goRun("projector", func() error { return projector.Serve(ctx, pcfg, prt) })

	qcfg := query.Config{Kafka: kcfg, Topic: s.Topic, RedisURL: s.RedisURL, RedisCluster: o.RedisCluster, RedisPrefix: s.Prefix,
		RedisPasswordFile: o.RedisPasswordFile, RedisTLSCAFile: o.RedisTLSCAFile, Auth: authCfg, TLS: o.TLS,
		Timeouts: pcfg.Timeouts} // the projector's timeout defaults: the query shows effective timeouts with them
	qcfg.Kafka.ClientID = "correx-query"
	qrt := rt("query")
	qrt.Listener = lq
	s.goRun("query", func() error { return query.Serve(ctx, qcfg, qrt) })
	return s, nil
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

func (s *Stack) close() {
	if s.Broker != nil {
		s.Broker.Close()
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
}
