//go:build integration

package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/testkit/correx"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The pipeline's fixed settings in every suite.
const (
	topic       = "correx.session-events"
	partitions  = 6
	kafkaAlias  = "kafka"
	redisAlias  = "redis"
	kafkaPort   = "9092/tcp"
	redisPort   = "6379/tcp"
	ingestPort  = "8081/tcp"
	queryPort   = "8082/tcp"
	projPort    = "8083/tcp"
	startupWait = 90 * time.Second
	labelKey    = "correx.integration"
)

// images names the images a suite runs (see the package documentation).
type images struct {
	ingest, projector, query string
	kafka, kafkaFlavor       string
	redis                    string
	s3                       string   // versitygw, the archive scenario's S3-compatible server
	ours                     []string // images scripts/images.sh builds
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func imagesFromEnv() images {
	prefix, tag := envOr("CORREX_IMAGE_PREFIX", "correx/"), envOr("CORREX_IMAGE_TAG", "dev")
	name := func(s string) string { return prefix + s + ":" + tag }
	im := images{ingest: name("ingest"), projector: name("projector"), query: name("query"),
		kafka: envOr("KAFKA_IMAGE", name("kafkabroker")), redis: envOr("REDIS_IMAGE", name("redis"))}
	im.s3 = name("versitygw")
	im.ours = []string{im.ingest, im.projector, im.query, im.s3}
	if im.kafka == name("kafkabroker") {
		im.ours = append(im.ours, im.kafka)
	}
	if im.redis == name("redis") {
		im.ours = append(im.ours, im.redis)
	}
	im.kafkaFlavor = os.Getenv("KAFKA_FLAVOR")
	if im.kafkaFlavor == "" {
		switch {
		case strings.Contains(im.kafka, "redpanda"):
			im.kafkaFlavor = "redpanda"
		case strings.Contains(im.kafka, "kafkabroker"):
			im.kafkaFlavor = "kfake"
		default:
			im.kafkaFlavor = "apache"
		}
	}
	return im
}

var (
	runID     = newRunID()
	theImages = imagesFromEnv()
)

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func TestMain(m *testing.M) {
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	// With a local engine, published ports are on the loopback address;
	// testcontainers' guess from the default route (taken when /.dockerenv
	// exists, as on machines built from an image) can be an address this
	// process cannot reach.
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" && localDocker() {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	if os.Getenv("CORREX_IT_VERBOSE") == "" {
		tclog.SetDefault(tclog.NewNoopLogger())
	}
	if err := checkImages(); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// localDocker reports whether the Docker engine is reached through a local
// socket. (Tests that run in a container beside the engine, with its socket
// mounted, must set TESTCONTAINERS_HOST_OVERRIDE themselves.)
func localDocker() bool {
	h := os.Getenv("DOCKER_HOST")
	return h == "" || strings.HasPrefix(h, "unix://")
}

// checkImages fails fast, with the command to run, when an image that
// `make images` builds is missing (nothing can be pulled here).
func checkImages() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	defer dc.Close()
	var missing []string
	for _, im := range theImages.ours {
		if _, err := dc.ImageInspect(ctx, im); err != nil {
			missing = append(missing, im)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("images %v are missing: run `make images` first", missing)
	}
	return nil
}

// modulePipeline starts a whole stack with pkg/testkit/correx (one
// projector; images from the same variables) and returns the ingest and
// query URLs. The cleanup removes it and, when the test failed, first prints
// each container's last 50 log lines.
func modulePipeline(t *testing.T) (ingestURL, queryURL string) {
	t.Helper()
	ctx := context.Background()
	started := time.Now()
	c, err := correx.Run(ctx, correx.WithPartitions(partitions), correx.WithStartupTimeout(startupWait),
		testcontainers.WithLabels(map[string]string{labelKey: runID, labelKey + ".test": t.Name()}))
	if err != nil {
		t.Fatalf("correx.Run: %v", err)
	}
	t.Logf("correx.Run: ready in %v", time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			for _, ctr := range []*testcontainers.DockerContainer{c.Kafka, c.Redis, c.Ingest, c.Projector, c.Query} {
				if ctr == nil {
					continue
				}
				rc, err := ctr.Logs(ctx)
				if err != nil {
					t.Logf("logs of %s: %v", ctr.Image, err)
					continue
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				t.Logf("---- %s: last 50 log lines ----\n%s", ctr.Image, strings.Join(lines[max(0, len(lines)-50):], "\n"))
			}
		}
		if err := c.Terminate(ctx, testcontainers.StopTimeout(5*time.Second)); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if ingestURL, err = c.IngestURL(ctx); err == nil {
		queryURL, err = c.QueryURL(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ingestURL, queryURL
}

// node is one container of a stack, known on the network by its alias.
type node struct {
	alias string
	port  string // the port the test process talks to
	c     *testcontainers.DockerContainer
}

// stack is one suite's pipeline. Its methods are called from the test's
// goroutine (they may call t.Fatal), except where noted.
type stack struct {
	t      *testing.T
	ctx    context.Context
	docker *testcontainers.DockerClient
	net    *testcontainers.DockerNetwork
	labels map[string]string

	mu      sync.Mutex
	nodes   []*node // every container started, in order
	volumes []string

	kafka, redis, ingest, query *node
	projectors                  map[string]*node
}

// newStack creates the suite's network; the cleanup removes everything the
// stack created and, when the test failed, first prints each container's
// last 50 log lines.
func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	dc, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	labels := map[string]string{labelKey: runID, labelKey + ".test": t.Name()}
	nw, err := network.New(ctx, network.WithLabels(labels))
	if err != nil {
		dc.Close()
		t.Fatalf("network: %v", err)
	}
	s := &stack{t: t, ctx: ctx, docker: dc, net: nw, labels: labels, projectors: map[string]*node{}}
	t.Cleanup(s.cleanup)
	return s
}

func (s *stack) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.t.Failed() {
		s.dumpLogs(ctx, 50)
	}
	s.mu.Lock()
	nodes, volumes := s.nodes, s.volumes
	s.mu.Unlock()
	for i := len(nodes) - 1; i >= 0; i-- {
		// SIGCONT first: a frozen process ignores SIGTERM until resumed.
		_, _ = s.docker.ContainerKill(ctx, nodes[i].c.GetContainerID(), client.ContainerKillOptions{Signal: "SIGCONT"})
		if err := nodes[i].c.Terminate(ctx, testcontainers.StopTimeout(5*time.Second)); err != nil && !isGone(err) {
			s.t.Errorf("cleanup: remove %s: %v", nodes[i].alias, err)
		}
	}
	for _, v := range volumes {
		if _, err := s.docker.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true}); err != nil && !isGone(err) {
			s.t.Errorf("cleanup: remove volume %s: %v", v, err)
		}
	}
	if err := s.net.Remove(ctx); err != nil {
		s.t.Errorf("cleanup: remove network %s: %v", s.net.Name, err)
	}
	s.docker.Close()
}

func isGone(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "No such") || strings.Contains(err.Error(), "not found") ||
		strings.Contains(err.Error(), "is already in progress"))
}

// dumpLogs prints the last lines of every container's log.
func (s *stack) dumpLogs(ctx context.Context, lines int) {
	s.mu.Lock()
	nodes := append([]*node(nil), s.nodes...)
	s.mu.Unlock()
	for _, n := range nodes {
		tail, err := s.logTail(ctx, n, lines)
		if err != nil {
			s.t.Logf("logs of %s: %v", n.alias, err)
			continue
		}
		s.t.Logf("---- %s (%s): last %d log lines ----\n%s", n.alias, n.c.Image, lines, strings.Join(tail, "\n"))
	}
}

func (s *stack) logTail(ctx context.Context, n *node, lines int) ([]string, error) {
	rc, err := n.c.Logs(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var all []string
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	return all[max(0, len(all)-lines):], sc.Err()
}

// logs returns a container's whole log (safe from any goroutine).
func (s *stack) logs(n *node) string {
	rc, err := n.c.Logs(s.ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// volume returns a fresh named volume, removed by the cleanup.
func (s *stack) volume(purpose string) string {
	name := fmt.Sprintf("correx-it-%s-%s-%d", runID, purpose, time.Now().UnixNano())
	s.mu.Lock()
	s.volumes = append(s.volumes, name)
	s.mu.Unlock()
	return name
}

// run starts a container on the stack's network under alias.
func (s *stack) run(alias, port, image string, opts ...testcontainers.ContainerCustomizer) *node {
	s.t.Helper()
	base := []testcontainers.ContainerCustomizer{
		network.WithNetwork([]string{alias}, s.net),
		testcontainers.WithLabels(s.labels),
		testcontainers.WithTmpfs(map[string]string{"/tmp": "rw,size=64m"}),
	}
	if port != "" {
		base = append(base, testcontainers.WithExposedPorts(port))
	}
	started := time.Now()
	c, err := testcontainers.Run(s.ctx, image, append(base, opts...)...)
	n := &node{alias: alias, port: port, c: c}
	if c != nil {
		s.mu.Lock()
		s.nodes = append(s.nodes, n)
		s.mu.Unlock()
	}
	if err != nil {
		s.t.Fatalf("start %s (%s): %v", alias, image, err)
	}
	s.t.Logf("started %s (%s) in %v", alias, image, time.Since(started).Round(time.Millisecond))
	return n
}

// addr is host:port where the test process reaches n (it changes when a
// container restarts).
func (s *stack) addr(n *node) string {
	s.t.Helper()
	host, err := n.c.Host(s.ctx)
	if err != nil {
		s.t.Fatalf("%s: host: %v", n.alias, err)
	}
	p, err := n.c.MappedPort(s.ctx, n.port)
	if err != nil {
		s.t.Fatalf("%s: port %s: %v", n.alias, n.port, err)
	}
	return net.JoinHostPort(host, p.Port())
}

func (s *stack) url(n *node) string { return "http://" + s.addr(n) }

// serviceEnv is the environment every service gets (README, "Configuration").
func serviceEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"CORREX_KAFKA_BROKERS": kafkaAlias + ":9092",
		"CORREX_TOPIC":         topic,
		"CORREX_PARTITIONS":    strconv.Itoa(partitions),
		"CORREX_REDIS_URL":     "redis://" + redisAlias + ":6379/0",
		"CORREX_REDIS_PREFIX":  "correx",
		// The suites check the pipeline, not the API's access control
		// (internal/e2e does): no tokens, and no rate limit, since one test
		// process stands in for thousands of clients.
		"CORREX_AUTH_DISABLED": "true",
		"CORREX_RATE_LIMIT":    "0",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startKafka starts the broker with its log on the named volume.
func (s *stack) startKafka(volume string) *node {
	s.t.Helper()
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithWaitStrategyAndDeadline(startupWait, kafkaReady{port: kafkaPort}),
	}
	switch theImages.kafkaFlavor {
	case "kfake":
		opts = append(opts,
			testcontainers.WithEnv(map[string]string{"KFAKE_ADVERTISED_ADDR": kafkaAlias + ":9092",
				"KFAKE_PARTITIONS": strconv.Itoa(partitions)}),
			testcontainers.WithMounts(testcontainers.VolumeMount(volume, "/var/lib/kfake")))
	case "apache": // apache/kafka: one KRaft node that is broker and controller
		opts = append(opts,
			testcontainers.WithEnv(map[string]string{
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
				"KAFKA_NUM_PARTITIONS":                           strconv.Itoa(partitions),
				"KAFKA_LOG_DIRS":                                 "/var/lib/kafka/data",
			}),
			testcontainers.WithMounts(testcontainers.VolumeMount(volume, "/var/lib/kafka/data")))
	case "redpanda":
		opts = append(opts,
			testcontainers.WithCmd("redpanda", "start", "--mode", "dev-container", "--smp", "1",
				"--kafka-addr", "internal://0.0.0.0:9092", "--advertise-kafka-addr", "internal://"+kafkaAlias+":9092"),
			testcontainers.WithMounts(testcontainers.VolumeMount(volume, "/var/lib/redpanda/data")))
	default:
		s.t.Fatalf("KAFKA_FLAVOR %q: want kfake, apache or redpanda", theImages.kafkaFlavor)
	}
	s.kafka = s.run(kafkaAlias, kafkaPort, theImages.kafka, opts...)
	return s.kafka
}

// startRedis starts Redis with AOF persistence (fsync on every write) on the
// named volume. The flags work with the project's image and the official one.
func (s *stack) startRedis(volume string) *node {
	s.t.Helper()
	s.redis = s.run(redisAlias, redisPort, theImages.redis,
		testcontainers.WithCmd("--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data",
			"--appendonly", "yes", "--appendfsync", "always", "--save", ""),
		testcontainers.WithMounts(testcontainers.VolumeMount(volume, "/data")),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, redisReady{port: redisPort}))
	return s.redis
}

func (s *stack) startIngest() *node {
	s.t.Helper()
	s.ingest = s.run("ingest", ingestPort, theImages.ingest,
		testcontainers.WithEnv(serviceEnv(map[string]string{"CORREX_HTTP_ADDR": ":8081", "CORREX_PRODUCE_TIMEOUT": "3s"})),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/readyz").WithPort(ingestPort)))
	return s.ingest
}

func (s *stack) startQuery() *node {
	s.t.Helper()
	s.query = s.run("query", queryPort, theImages.query,
		testcontainers.WithEnv(serviceEnv(map[string]string{"CORREX_HTTP_ADDR": ":8082"})),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/readyz").WithPort(queryPort)))
	return s.query
}

// projectorEnv is a projector's environment: a stable group instance id
// (static membership) and short group timeouts so that a frozen member is
// dropped within seconds.
func projectorEnv(instanceID string) map[string]string {
	return serviceEnv(map[string]string{
		"CORREX_HTTP_ADDR":         ":8083",
		"CORREX_GROUP":             "correx-projector",
		"CORREX_INSTANCE_ID":       instanceID,
		"CORREX_FLUSH_INTERVAL":    "100ms",
		"CORREX_SESSION_TIMEOUT":   "6s",
		"CORREX_REBALANCE_TIMEOUT": "8s",
	})
}

// startProjector starts a projector named (and with the instance id) id.
func (s *stack) startProjector(id string) *node {
	s.t.Helper()
	n := s.run(id, projPort, theImages.projector,
		testcontainers.WithEnv(projectorEnv(id)),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/healthz").WithPort(projPort)))
	s.projectors[id] = n
	return n
}

// resetReadModel runs `projector reset -yes` as a one-shot container and
// returns its output.
func (s *stack) resetReadModel() string {
	s.t.Helper()
	n := s.run("projector-reset", "", theImages.projector,
		testcontainers.WithEnv(projectorEnv("projector-reset")),
		testcontainers.WithCmd("reset", "-yes"),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForExit()))
	st, err := n.c.State(s.ctx)
	if err != nil {
		s.t.Fatalf("projector reset: %v", err)
	}
	out := s.logs(n)
	if st.ExitCode != 0 {
		s.t.Fatalf("projector reset exited with %d:\n%s", st.ExitCode, out)
	}
	return out
}

// signal sends a signal to a container's process.
func (s *stack) signal(n *node, sig string) {
	s.t.Helper()
	if _, err := s.docker.ContainerKill(s.ctx, n.c.GetContainerID(), client.ContainerKillOptions{Signal: sig}); err != nil {
		s.t.Fatalf("%s %s: %v", sig, n.alias, err)
	}
}

// kill SIGKILLs a container and waits until Docker sees it exited.
func (s *stack) kill(n *node) {
	s.t.Helper()
	s.signal(n, "SIGKILL")
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := n.c.State(s.ctx)
		if err != nil {
			s.t.Fatalf("%s: %v", n.alias, err)
		}
		if !st.Running {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s still running 30s after SIGKILL", n.alias)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops a container gracefully (SIGTERM, then SIGKILL after grace).
func (s *stack) stop(n *node, grace time.Duration) {
	s.t.Helper()
	if err := n.c.Stop(s.ctx, &grace); err != nil {
		s.t.Fatalf("stop %s: %v", n.alias, err)
	}
}

// start starts a stopped container again and waits until it is ready (the
// same wait as at its first start).
func (s *stack) start(n *node) {
	s.t.Helper()
	started := time.Now()
	if err := n.c.Start(s.ctx); err != nil {
		s.t.Fatalf("restart %s: %v", n.alias, err)
	}
	s.t.Logf("restarted %s in %v", n.alias, time.Since(started).Round(time.Millisecond))
}

// remove stops and removes a container for good.
func (s *stack) remove(n *node, grace time.Duration) {
	s.t.Helper()
	if err := n.c.Terminate(s.ctx, testcontainers.StopTimeout(grace)); err != nil {
		s.t.Fatalf("remove %s: %v", n.alias, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range s.nodes {
		if m == n {
			s.nodes = append(s.nodes[:i], s.nodes[i+1:]...)
			break
		}
	}
}

// redisClient is a client of the stack's Redis through its mapped port.
func (s *stack) redisClient() *redis.Client {
	s.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(s.redis)})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// redisReady waits until Redis answers PING (not while it loads its AOF).
// Unlike a log line, this holds after a restart too.
type redisReady struct{ port string }

func (r redisReady) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	return poll(ctx, target, r.port, func(ctx context.Context, addr string) error {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		defer rdb.Close()
		return rdb.Ping(ctx).Err()
	})
}

// kafkaReady waits until the broker answers an ApiVersions request on its
// mapped port (the seed address; metadata would name the in-network alias).
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

// httpClient is the client the suites use for the services.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// get fetches url and returns the status, headers and body.
func get(ctx context.Context, url string, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// errStop ends a waitFor loop with a failure.
var errStop = errors.New("stop")

// waitFor calls cond every interval until it returns nil, or fails the test
// after timeout with cond's last error.
func (s *stack) waitFor(what string, timeout, interval time.Duration, cond func() error) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if errors.Is(err, errStop) || time.Now().After(deadline) {
			s.t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}
