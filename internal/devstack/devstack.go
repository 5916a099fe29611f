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
// from checkpoints that a real restart does. The query service can be
// stopped and started again on its address too (StopQuery, StartQuery), so
// that a watch's reconnection across a restart can be exercised.
//
// Run (demo.go) is what `make run` shows around a stack: the URLs and lines
// to try, a demo workload, a session whose timeout fires, and a progress
// line; Config holds cmd/devstack's flags.
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
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kadm"
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
	// Redis is the Redis block the projector and the query service share
	// (redisconn.Config, CORREX_REDIS_*), used as it is: an empty URL starts
	// an embedded miniredis, an empty Prefix is config.DefaultRedisPrefix.
	Redis redisconn.Config
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
	Topic, Group                         string
	Partitions                           int
	// FlushInterval is how often the projector writes folded snapshots to
	// Redis (0: 100ms); its MaxFlushInterval is raised to it when lower.
	// pkg/testkit sets it without importing the projector.
	FlushInterval time.Duration
	// Projector adjusts the projector's configuration after FlushInterval
	// (tests shorten intervals).
	Projector func(*projector.Config)
	// KillableProjector routes the projector's Redis connections through a
	// proxy that KillProjector cuts (a plain redis:// URL of a single Redis
	// only), so that a killed projector writes nothing more. Off, the
	// projector talks to Redis directly and KillProjector answers
	// ErrCannotKill. pkg/testkit turns it on.
	KillableProjector bool
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
	// runtime, its listen address, the running projector (nil while it is
	// stopped) and the killed ones that have not ended yet.
	projMu    sync.Mutex
	pcfg      projector.Config
	prt       service.Runtime
	projAddr  string
	redisHost string // host:port behind the per-run proxies; "" without them
	proj      *projRun
	killed    []*projRun

	// The query service's own lifetime (guarded by queryMu), as the
	// projector's: its config, runtime and address, and the running
	// service (nil while it is stopped).
	queryMu   sync.Mutex
	qcfg      query.Config
	qrt       service.Runtime
	queryAddr string
	query     *queryRun
}

// withClientID is the stack's Kafka settings under a service's client id.
func withClientID(k kafka.Config, id string) kafka.Config {
	k.ClientID = id
	return k
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
	s := &Stack{Topic: orDefault(o.Topic, config.DefaultTopic), Prefix: orDefault(o.Redis.Prefix, config.DefaultRedisPrefix),
		Brokers: o.Brokers, RedisURL: o.Redis.URL}
	if o.Partitions == 0 {
		o.Partitions = config.DefaultPartitions
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
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, &ListenError{Service: "kafka", Addr: fmt.Sprintf("127.0.0.1:%d", o.KafkaPort), Err: err}
			}
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
	listen := func(service, addr string) (net.Listener, string, error) {
		addr = orDefault(addr, "127.0.0.1:0")
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", &ListenError{Service: service, Addr: addr, Err: err}
		}
		return l, scheme + l.Addr().String(), nil
	}
	li, ingestURL, err := listen("ingest", o.IngestAddr)
	if err != nil {
		s.close()
		return nil, err
	}
	lq, queryURL, err := listen("query", o.QueryAddr)
	if err != nil {
		li.Close()
		s.close()
		return nil, err
	}
	lp, projURL, err := listen("projector", o.ProjectorAddr)
	if err != nil {
		li.Close()
		lq.Close()
		s.close()
		return nil, err
	}
	s.IngestURL, s.QueryURL, s.ProjectorURL = ingestURL, queryURL, projURL

	// Each service's defaults, apart from the stack's own endpoints.
	icfg := ingest.DefaultConfig()
	icfg.Kafka = withClientID(kcfg, icfg.Kafka.ClientID)
	icfg.Topic, icfg.Partitions, icfg.Auth, icfg.TLS = s.Topic, o.Partitions, authCfg, o.TLS
	irt := rt("ingest")
	irt.Listener = li
	s.goRun("ingest", func() error { return ingest.Serve(ctx, icfg, irt) })

	// The projector's defaults, apart from the stack's own endpoints and
	// these deliberate differences: a fixed instance id (not the host
	// name), so that a restarted stack takes its partitions back at once;
	// no leave on shutdown (it was never a member of a shared group);
	// shorter group timeouts, so that tests that stop members see
	// rebalances quickly; and a shorter longest poll wait (FlushInterval).
	// One Redis block for the projector and the query service.
	rcfg := o.Redis
	rcfg.URL, rcfg.Prefix = s.RedisURL, s.Prefix
	pcfg := projector.DefaultConfig()
	pcfg.Kafka = withClientID(kcfg, pcfg.Kafka.ClientID)
	pcfg.Topic, pcfg.Partitions, pcfg.Group = s.Topic, o.Partitions, orDefault(o.Group, pcfg.Group)
	pcfg.Redis, pcfg.TLS = rcfg, o.TLS
	pcfg.InstanceID = "devstack-projector"
	pcfg.LeaveOnShutdown = false
	pcfg.SessionTimeout, pcfg.RebalanceTimeout = 10*time.Second, 30*time.Second
	pcfg.FlushInterval = 100 * time.Millisecond
	if o.FlushInterval > 0 {
		pcfg.FlushInterval = o.FlushInterval
		pcfg.MaxFlushInterval = max(pcfg.MaxFlushInterval, o.FlushInterval)
	}
	if o.Projector != nil {
		o.Projector(&pcfg)
	}
	if err := pcfg.Validate(); err != nil {
		lp.Close()
		lq.Close()
		s.Stop()
		return nil, err
	}
	// The projector reaches a plain single Redis through a proxy of its
	// own that KillProjector cuts: a killed process writes nothing more,
	// and so must this one (see KillProjector).
	if u, err := url.Parse(pcfg.Redis.URL); err == nil && u.Scheme == "redis" && !pcfg.Redis.Cluster && o.KillableProjector {
		s.redisHost = u.Host
	}
	s.ctx, s.pcfg, s.prt, s.projAddr = ctx, pcfg, rt("projector"), lp.Addr().String()
	if err := s.startProjector(lp); err != nil {
		lq.Close()
		s.Stop()
		return nil, err
	}

	if s.Broker != nil {
		// The query service's watches read the change feed once its topic
		// exists, and it looks again only every second or so (slowly while
		// the topic is missing), so that a watch would answer 503 for
		// seconds after the start: create the topic now, as the projector
		// would (it leaves an existing one as it is).
		if err := ensureFeedTopic(ctx, kcfg, s.Topic, o.Partitions); err != nil {
			lq.Close()
			s.Stop()
			return nil, err
		}
	}
	qcfg := query.DefaultConfig()
	qcfg.Kafka = withClientID(kcfg, qcfg.Kafka.ClientID)
	qcfg.Topic, qcfg.Redis, qcfg.Auth, qcfg.TLS = s.Topic, rcfg, authCfg, o.TLS
	qcfg.Timeouts = pcfg.Timeouts     // the projector's: the query shows effective timeouts with them
	qcfg.IngestURL = ingestURL        // the console's actions go through the query service to ingest
	qcfg.ArchiveURL = pcfg.ArchiveURL // archived sessions are read back from where the projector puts them
	s.qcfg, s.qrt, s.queryAddr = qcfg, rt("query"), lq.Addr().String()
	s.startQuery(lq)
	return s, nil
}

// queryRun is one run of the query service.
type queryRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned
}

// startQuery runs the query service on l (queryMu held, or the stack not
// yet shared).
func (s *Stack) startQuery(l net.Listener) {
	ctx, cancel := context.WithCancel(s.ctx)
	r := &queryRun{cancel: cancel, done: make(chan struct{})}
	rt := s.qrt
	rt.Listener = l
	s.query = r
	s.goRun("query", func() error {
		defer close(r.done)
		return query.Serve(ctx, s.qcfg, rt)
	})
}

// ErrQueryRunning is returned by StartQuery while the query service runs;
// ErrQueryStopped by StopQuery when it does not.
var (
	ErrQueryRunning = errors.New("devstack: the query service is running")
	ErrQueryStopped = errors.New("devstack: the query service is not running")
)

// StopQuery shuts the query service down gracefully, as SIGTERM does: its
// watch streams end and its address refuses connections until StartQuery.
// It returns once the service has ended; an error of the service is
// returned by Stop.
func (s *Stack) StopQuery() error {
	s.queryMu.Lock()
	defer s.queryMu.Unlock()
	r := s.query
	if r == nil {
		return ErrQueryStopped
	}
	s.query = nil
	r.cancel()
	<-r.done
	return nil
}

// StartQuery starts the query service again after StopQuery, on the same
// address. It returns once the service listens.
func (s *Stack) StartQuery() error {
	s.queryMu.Lock()
	defer s.queryMu.Unlock()
	if s.query != nil {
		return ErrQueryRunning
	}
	if s.ctx.Err() != nil {
		return fmt.Errorf("devstack: the stack is stopped: %w", s.ctx.Err())
	}
	l, err := httpx.Listen(s.queryAddr)
	if err != nil {
		return fmt.Errorf("devstack: query listener: %w", err)
	}
	s.startQuery(l)
	return nil
}

// ListenError says that a service of the stack could not listen on its
// address: Service is "ingest", "query", "projector" (Options.IngestAddr,
// QueryAddr, ProjectorAddr) or "kafka" (the embedded broker,
// Options.KafkaPort). errors.Is(err, syscall.EADDRINUSE) tells an address
// already in use.
type ListenError struct {
	Service string
	Addr    string
	Err     error
}

func (e *ListenError) Error() string {
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		return fmt.Sprintf("devstack: %s: %s is already in use", e.Service, e.Addr)
	}
	return fmt.Sprintf("devstack: %s: listen on %s: %v", e.Service, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// ensureFeedTopic creates the change feed's topic of topic with partitions
// partitions, as the projector does, when it does not exist.
func ensureFeedTopic(ctx context.Context, kcfg kafka.Config, topic string, partitions int) error {
	cl, err := kafka.NewClient(withClientID(kcfg, "devstack"))
	if err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl.Client), feed.Topic(topic), int32(partitions)); err != nil {
		return fmt.Errorf("devstack: %w", err)
	}
	return nil
}

// Stop shuts the services down gracefully (the projector flushes and writes
// its checkpoints), then the embedded dependencies, and returns the services'
// errors. Projectors killed earlier are let through to Redis again so that
// they can end (what they write then is fenced like any zombie's writes).
func (s *Stack) Stop() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.projMu.Lock()
	for _, r := range s.killed {
		if r.proxy != nil {
			r.proxy.Restore()
		}
	}
	s.projMu.Unlock()
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
	// ErrCannotKill is returned by KillProjector without
	// Options.KillableProjector, or with Redis Cluster or a rediss:// URL,
	// which the projector reaches without the proxy that a kill cuts.
	ErrCannotKill = errors.New("devstack: KillProjector needs Options.KillableProjector and a plain redis:// URL of a single Redis")
)

// projRun is one run of the projector.
type projRun struct {
	cancel context.CancelFunc
	done   chan error // receives Serve's result once
	l      *connListener
	proxy  *cutProxy // nil when the projector talks to Redis directly
}

// startProjector runs the projector on l (projMu held, or the stack not yet
// shared).
func (s *Stack) startProjector(l net.Listener) error {
	cfg := s.pcfg
	r := &projRun{done: make(chan error, 1), l: newConnListener(l)}
	if s.redisHost != "" {
		px, err := newCutProxy(s.redisHost)
		if err != nil {
			l.Close()
			return fmt.Errorf("devstack: redis proxy: %w", err)
		}
		u, _ := url.Parse(cfg.Redis.URL) // parsed before
		u.Host = px.Addr()
		cfg.Redis.URL = u.String()
		r.proxy = px
	}
	ctx, cancel := context.WithCancel(s.ctx)
	r.cancel = cancel
	rt := s.prt
	rt.Listener = r.l
	s.proj = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.done <- projector.Serve(ctx, cfg, rt)
	}()
	return nil
}

// StartProjector starts the projector again after StopProjector or
// KillProjector, on the same address and with the same group instance id.
// It returns once the projector listens; it folds again once it has its
// partitions back.
func (s *Stack) StartProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	if s.proj != nil {
		return ErrProjectorRunning
	}
	if s.ctx.Err() != nil {
		return fmt.Errorf("devstack: the stack is stopped: %w", s.ctx.Err())
	}
	l, err := httpx.Listen(s.projAddr)
	if err != nil {
		return fmt.Errorf("devstack: projector listener: %w", err)
	}
	return s.startProjector(l)
}

// StopProjector shuts the projector down gracefully, as SIGTERM does: it
// flushes and writes its checkpoints, and returns the projector's error, if
// any. Like the process, it waits for Redis to take its last flush.
func (s *Stack) StopProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	r := s.proj
	if r == nil {
		return ErrProjectorStopped
	}
	s.proj = nil
	r.cancel()
	err := <-r.done
	if r.proxy != nil {
		r.proxy.Close()
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// KillProjector stops the projector as a crash would, as far as the rest of
// the stack can tell, and returns at once: its Redis connections are cut
// (nothing it folded but had not flushed reaches Redis, and it writes
// nothing more), its HTTP listener and connections are closed, and it is
// told to stop. It
// cannot end while its last flush waits for Redis, so it lingers, cut off,
// until Stop; a projector started meanwhile takes its partitions back
// under the same group instance id, as a restarted process does. It needs
// the projector to reach Redis through devstack's proxy (a plain redis://
// URL of a single Redis) and returns ErrCannotKill otherwise.
func (s *Stack) KillProjector() error {
	s.projMu.Lock()
	defer s.projMu.Unlock()
	r := s.proj
	if r == nil {
		return ErrProjectorStopped
	}
	if r.proxy == nil {
		return ErrCannotKill
	}
	s.proj = nil
	r.proxy.Cut()
	r.l.CloseAll()
	r.cancel()
	s.killed = append(s.killed, r)
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

// close releases the embedded dependencies and the proxies; every service
// has ended (Stop waited for them) or never started.
func (s *Stack) close() {
	s.projMu.Lock()
	if r := s.proj; r != nil {
		if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("projector: %w", err))
			s.mu.Unlock()
		}
		r.cancel()
		if r.proxy != nil {
			r.proxy.Close()
		}
		s.proj = nil
	}
	// A killed projector's errors (its cut-off flushes) are expected.
	for _, r := range s.killed {
		r.proxy.Close()
	}
	s.killed = nil
	s.projMu.Unlock()
	if s.Broker != nil {
		s.Broker.Close()
	}
	if s.Redis != nil {
		s.Redis.Close()
	}
}
