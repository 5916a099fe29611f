package correx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Network aliases and ports inside the stack's network.
const (
	kafkaAlias     = "kafka"
	redisAlias     = "redis"
	ingestAlias    = "ingest"
	projectorAlias = "projector"
	queryAlias     = "query"
	kafkaPort      = "9092/tcp"
	redisPort      = "6379/tcp"
	ingestPort     = "8081/tcp"
	projectorPort  = "8083/tcp"
	queryPort      = "8082/tcp"

	// Topic is the topic of the session events; the services create it.
	Topic = "correx.session-events"
	// LabelKey labels every container and the network with the Run's id.
	LabelKey = "correx.testkit"
)

// Container is a running stack. Kafka and Redis are nil when WithKafka or
// WithRedis named external ones. Terminate removes it all.
type Container struct {
	// RunID is the value of LabelKey on every container and the network
	// (`docker ps -a --filter label=correx.testkit=<RunID>` finds what a
	// killed test left).
	RunID                    string
	Network                  *testcontainers.DockerNetwork
	Kafka, Redis             *testcontainers.DockerContainer
	Ingest, Projector, Query *testcontainers.DockerContainer

	mu         sync.Mutex
	terminated bool
}

// Run starts the stack and returns once every container is ready (see the
// package documentation). With a local engine it sets
// TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 for the process when it is unset
// (see "Environment" there). opts are this package's Options and any
// testcontainers.ContainerCustomizer, which is applied to the three service
// containers. On error, Run removes whatever it had started and returns nil.
func Run(ctx context.Context, opts ...testcontainers.ContainerCustomizer) (*Container, error) {
	settings := defaultOptions()
	var extra []testcontainers.ContainerCustomizer
	for _, opt := range opts {
		if o, ok := opt.(Option); ok {
			if err := o(&settings); err != nil {
				return nil, err
			}
			continue
		}
		extra = append(extra, opt)
	}
	kafkaImage, flavor, err := settings.kafka()
	if err != nil {
		return nil, err
	}
	setHostOverride()
	labels := map[string]string{LabelKey: newRunID()}
	nw, err := network.New(ctx, network.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("correx: network: %w", err)
	}
	c := &Container{Network: nw, RunID: labels[LabelKey]}
	fail := func(err error) (*Container, error) {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, errors.Join(err, c.Terminate(tctx))
	}
	run := func(alias, port, image string, opts ...testcontainers.ContainerCustomizer) (*testcontainers.DockerContainer, error) {
		base := []testcontainers.ContainerCustomizer{
			network.WithNetwork([]string{alias}, nw),
			testcontainers.WithLabels(labels),
			testcontainers.WithExposedPorts(port),
		}
		ctr, err := testcontainers.Run(ctx, image, append(base, opts...)...)
		if err != nil {
			err = fmt.Errorf("correx: start %s (%s): %w", alias, image, err)
		}
		return ctr, err
	}

	// The broker and Redis, side by side.
	var deps parallel
	brokers := settings.brokers
	if brokers == "" {
		brokers = kafkaAlias + ":9092"
		deps.do(func() (err error) {
			c.Kafka, err = run(kafkaAlias, kafkaPort, kafkaImage, kafkaOptions(flavor, settings)...)
			return err
		})
	}
	redisURL := settings.redisURL
	if redisURL == "" {
		redisURL = "redis://" + redisAlias + ":6379/0"
		deps.do(func() (err error) {
			c.Redis, err = run(redisAlias, redisPort, settings.redis(),
				testcontainers.WithCmd("--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data",
					"--appendonly", "yes", "--appendfsync", "everysec", "--save", ""),
				testcontainers.WithWaitStrategyAndDeadline(settings.startupTimeout, redisReady{port: redisPort}))
			return err
		})
	}
	if err := deps.wait(); err != nil {
		return fail(err)
	}

	// The three services, side by side.
	env := map[string]string{
		"CORREX_KAFKA_BROKERS": brokers,
		"CORREX_TOPIC":         Topic,
		"CORREX_PARTITIONS":    strconv.Itoa(settings.partitions),
		"CORREX_REDIS_URL":     redisURL,
		"CORREX_REDIS_PREFIX":  "correx",
		"CORREX_RATE_LIMIT":    "0",
	}
	if settings.otlpEndpoint != "" {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = settings.otlpEndpoint
		env["OTEL_TRACES_EXPORTER"] = "otlp"
		env["OTEL_METRICS_EXPORTER"] = "otlp"
	}
	const tokensPath = "/etc/correx/tokens"
	api := []testcontainers.ContainerCustomizer{testcontainers.WithEnv(map[string]string{"CORREX_AUTH_DISABLED": "true"})}
	if settings.tokensFile != "" {
		api = []testcontainers.ContainerCustomizer{
			testcontainers.WithEnv(map[string]string{"CORREX_AUTH_TOKENS_FILE": tokensPath}),
			testcontainers.WithFiles(testcontainers.ContainerFile{HostFilePath: settings.tokensFile, ContainerFilePath: tokensPath, FileMode: 0o644}),
		}
	}
	service := func(dst **testcontainers.DockerContainer, name, port string, own ...testcontainers.ContainerCustomizer) func() error {
		return func() (err error) {
			addr := ":" + strings.TrimSuffix(port, "/tcp")
			o := []testcontainers.ContainerCustomizer{
				testcontainers.WithEnv(env),
				testcontainers.WithEnv(map[string]string{"CORREX_HTTP_ADDR": addr}),
				testcontainers.WithWaitStrategyAndDeadline(settings.startupTimeout, wait.ForHTTP("/readyz").WithPort(port)),
			}
			o = append(append(o, own...), extra...)
			*dst, err = run(name, port, settings.image(name), o...)
			return err
		}
	}
	var svcs parallel
	svcs.do(service(&c.Ingest, ingestAlias, ingestPort, api...))
	svcs.do(service(&c.Query, queryAlias, queryPort, api...))
	svcs.do(service(&c.Projector, projectorAlias, projectorPort, testcontainers.WithEnv(map[string]string{
		"CORREX_GROUP": "correx-projector", "CORREX_INSTANCE_ID": "projector-0", "CORREX_FLUSH_INTERVAL": "50ms",
	})))
	if err := svcs.wait(); err != nil {
		return fail(err)
	}
	return c, nil
}

// kafkaOptions are the broker's settings for its kind: one node, advertised
// on the network under kafkaAlias.
func kafkaOptions(flavor string, o options) []testcontainers.ContainerCustomizer {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithWaitStrategyAndDeadline(o.startupTimeout, kafkaReady{port: kafkaPort}),
	}
	switch flavor {
	case "kfake":
		opts = append(opts, testcontainers.WithEnv(map[string]string{
			"KFAKE_ADVERTISED_ADDR": kafkaAlias + ":9092", "KFAKE_PARTITIONS": strconv.Itoa(o.partitions)}))
	case "apache": // one KRaft node that is broker and controller
		opts = append(opts, testcontainers.WithEnv(map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://" + kafkaAlias + ":9092",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_NUM_PARTITIONS":                           strconv.Itoa(o.partitions),
		}))
	case "redpanda":
		opts = append(opts, testcontainers.WithCmd("redpanda", "start", "--mode", "dev-container", "--smp", "1",
			"--kafka-addr", "internal://0.0.0.0:9092", "--advertise-kafka-addr", "internal://"+kafkaAlias+":9092"))
	}
	return opts
}

// parallel runs functions on their own goroutines and collects their errors.
type parallel struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (p *parallel) do(fn func() error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := fn(); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, err)
			p.mu.Unlock()
		}
	}()
}

func (p *parallel) wait() error {
	p.wg.Wait()
	return errors.Join(p.errs...)
}

func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// IngestURL is the ingest service's base URL as the test process reaches it
// (http://host:port).
func (c *Container) IngestURL(ctx context.Context) (string, error) {
	return c.Ingest.PortEndpoint(ctx, ingestPort, "http")
}

// QueryURL is the query service's base URL as the test process reaches it.
func (c *Container) QueryURL(ctx context.Context) (string, error) {
	return c.Query.PortEndpoint(ctx, queryPort, "http")
}

// ProjectorURL is the projector's base URL (/healthz, /readyz, /metrics).
func (c *Container) ProjectorURL(ctx context.Context) (string, error) {
	return c.Projector.PortEndpoint(ctx, projectorPort, "http")
}

// Terminate stops and removes every container (with its volumes) and then
// the network. opts go to each container's Terminate. It is safe to call
// more than once.
func (c *Container) Terminate(ctx context.Context, opts ...testcontainers.TerminateOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terminated {
		return nil
	}
	var errs []error
	for _, ctr := range []*testcontainers.DockerContainer{c.Ingest, c.Query, c.Projector, c.Redis, c.Kafka} {
		if ctr == nil {
			continue
		}
		if err := ctr.Terminate(ctx, opts...); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Network != nil {
		if err := c.Network.Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("correx: remove network: %w", err))
		}
	}
	if len(errs) == 0 {
		c.terminated = true
	}
	return errors.Join(errs...)
}

// redisReady waits until Redis answers PING on its mapped port (not while
// it loads its append-only file).
type redisReady struct{ port string }

func (r redisReady) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	return poll(ctx, target, r.port, func(ctx context.Context, addr string) error {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		defer rdb.Close()
		return rdb.Ping(ctx).Err()
	})
}

// kafkaReady waits until the broker answers an ApiVersions request on its
// mapped port (the seed address; its metadata names the in-network alias,
// which the test process cannot resolve).
type kafkaReady struct{ port string }

func (k kafkaReady) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	return poll(ctx, target, k.port, func(ctx context.Context, addr string) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return cl.Ping(pctx)
	})
}

// poll calls check with the container's mapped address until it succeeds,
// the container exits, or ctx ends.
func poll(ctx context.Context, target wait.StrategyTarget, port string, check func(context.Context, string) error) error {
	var last error
	for {
		if st, err := target.State(ctx); err == nil && !st.Running {
			return fmt.Errorf("container is not running (%s, exit code %d); last check: %v", st.Status, st.ExitCode, last)
		}
		host, err := target.Host(ctx)
		if err == nil {
			var p interface{ Port() string }
			if p, err = target.MappedPort(ctx, port); err == nil {
				if last = check(ctx, net.JoinHostPort(host, p.Port())); last == nil {
					return nil
				}
			}
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last check: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
