//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/moby/moby/api/types/container"
	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The Redis flags of the scenarios below: no persistence unless a scenario
// adds it.
var redisBase = []string{"--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"}

// startQueryEnv and startProjectorEnv start the query service and a
// projector like startQuery and startProjector, with extra environment.
func (s *stack) startQueryEnv(extra map[string]string, opts ...testcontainers.ContainerCustomizer) *node {
	s.t.Helper()
	env := serviceEnv(map[string]string{"CORREX_HTTP_ADDR": ":8082"})
	for k, v := range extra {
		env[k] = v
	}
	s.query = s.run("query", queryPort, theImages.query, append([]testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(env),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/readyz").WithPort(queryPort))}, opts...)...)
	return s.query
}

func (s *stack) startProjectorEnv(id string, extra map[string]string, opts ...testcontainers.ContainerCustomizer) *node {
	s.t.Helper()
	env := projectorEnv(id)
	for k, v := range extra {
		env[k] = v
	}
	n := s.run(id, projPort, theImages.projector, append([]testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(env),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForHTTP("/healthz").WithPort(projPort))}, opts...)...)
	s.projectors[id] = n
	return n
}

// pause freezes a container (docker pause: every process stops, its
// connections stay open); unpause resumes it.
func (s *stack) pause(n *node) {
	s.t.Helper()
	if _, err := s.docker.ContainerPause(s.ctx, n.c.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		s.t.Fatalf("pause %s: %v", n.alias, err)
	}
}

func (s *stack) unpause(n *node) {
	s.t.Helper()
	if _, err := s.docker.ContainerUnpause(s.ctx, n.c.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		s.t.Fatalf("unpause %s: %v", n.alias, err)
	}
}

// disconnect cuts a container off a network (docker network disconnect);
// connect attaches it again under its alias.
func (s *stack) disconnect(n *node, nw *testcontainers.DockerNetwork) {
	s.t.Helper()
	if _, err := s.docker.NetworkDisconnect(s.ctx, nw.ID, client.NetworkDisconnectOptions{Container: n.c.GetContainerID(), Force: true}); err != nil {
		s.t.Fatalf("disconnect %s from %s: %v", n.alias, nw.Name, err)
	}
}

func (s *stack) connect(n *node, nw *testcontainers.DockerNetwork) {
	s.t.Helper()
	if _, err := s.docker.NetworkConnect(s.ctx, nw.ID, client.NetworkConnectOptions{Container: n.c.GetContainerID(),
		EndpointConfig: &mobynet.EndpointSettings{Aliases: []string{n.alias}}}); err != nil {
		s.t.Fatalf("connect %s to %s: %v", n.alias, nw.Name, err)
	}
}

// onlyOn attaches a container to nw alone, under alias (it replaces the
// stack's network, which run adds first).
func onlyOn(nw *testcontainers.DockerNetwork, alias string) testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		req.Networks = []string{nw.Name}
		req.NetworkAliases = map[string][]string{nw.Name: {alias}}
		return nil
	}
}

// acks records, per partition, the offset after the last event ingest
// acknowledged to a load: what the projection must have folded to have
// caught up with it.
type acks struct {
	mu  sync.Mutex
	end map[int32]int64
}

// loadWithAcks is startLoad with an ingest client that records the acks.
func loadWithAcks(ctx context.Context, ingestURL string, cfg loadgen.Config) (*load, *acks) {
	a := &acks{end: map[int32]int64{}}
	cfg.Client = &http.Client{Timeout: 30 * time.Second, Transport: a}
	return startLoad(ctx, ingestURL, cfg), a
}

func (a *acks) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var r struct {
		Accepted []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"accepted"`
	}
	if json.Unmarshal(body, &r) == nil {
		a.mu.Lock()
		for _, ac := range r.Accepted {
			a.end[ac.Partition] = max(a.end[ac.Partition], ac.Offset+1)
		}
		a.mu.Unlock()
	}
	return resp, nil
}

// now returns what was acknowledged so far.
func (a *acks) now() map[int32]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.end)
}

// waitFolded waits until every partition's checkpoint reached end (the
// projection folded and checkpointed everything acknowledged by then), and
// returns the time since the fault began.
func (s *stack) waitFolded(what, q string, end map[int32]int64, since time.Time, timeout time.Duration) time.Duration {
	s.t.Helper()
	s.waitFor(what, timeout, 100*time.Millisecond, func() error {
		st, err := getStats(context.Background(), q)
		if err != nil {
			return err
		}
		for p, o := range end {
			if cp := st.checkpoint(p); cp < o {
				return fmt.Errorf("partition %d at checkpoint %d, want %d", p, cp, o)
			}
		}
		return nil
	})
	return time.Since(since)
}

// sentinelConf is a sentinel's configuration: it monitors the primary at
// its address on the stack's network and acts within seconds.
//
// Addresses, not network aliases: a sentinel resolves names synchronously,
// and the name of a killed container then waits on Docker's DNS forwarder
// long enough to stall the sentinel (TILT mode) for half a minute.
const sentinelConf = `port 26379
bind 0.0.0.0
protected-mode no
sentinel monitor mymaster %s 6379 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 2000
sentinel parallel-syncs mymaster 1
`

// TestSentinelFailover runs the projector and the query service through
// Redis Sentinel (a primary, one replica, three sentinels) with
// CORREX_REDIS_WAIT_REPLICAS=1. Under load the replica is paused, so it lags
// and every batch waits out CORREX_REDIS_WAIT_TIMEOUT and is retried; then the
// primary is killed and the replica resumed, and Sentinel promotes it. No
// checkpoint passes a write that the promoted replica lacks, and none moves
// at all until a replica of the new primary acknowledges the writes (a new
// one is started): then the read model catches up and is exact.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	redisNode := func(alias string, args ...string) *node {
		return s.run(alias, redisPort, theImages.redis,
			testcontainers.WithCmd(append(append([]string{}, redisBase...), append([]string{"--save", "", "--appendonly", "no",
				"--repl-diskless-sync-delay", "0"}, args...)...)...),
			testcontainers.WithWaitStrategyAndDeadline(startupWait, redisReady{port: redisPort}))
	}
	ip := func(n *node) string {
		addr, err := n.c.ContainerIP(s.ctx)
		if err != nil || addr == "" {
			t.Fatalf("%s: address %q: %v", n.alias, addr, err)
		}
		return addr
	}
	primary := redisNode("redis-a")
	replica := redisNode("redis-b", "--replicaof", "redis-a", "6379")
	t.Cleanup(func() { // before the stack's cleanup: a paused container ignores signals
		_, _ = s.docker.ContainerUnpause(context.Background(), replica.c.GetContainerID(), client.ContainerUnpauseOptions{})
	})
	conf := fmt.Sprintf(sentinelConf, ip(primary))
	var sentinels []*node
	for i := 1; i <= 3; i++ {
		sentinels = append(sentinels, s.run(fmt.Sprintf("sentinel-%d", i), "26379/tcp", theImages.redis,
			// Sentinel rewrites its configuration file: run as root so
			// that it may, whoever owns the copied file.
			testcontainers.WithConfigModifier(func(c *container.Config) { c.User = "0:0" }),
			testcontainers.WithFiles(testcontainers.ContainerFile{Reader: strings.NewReader(conf),
				ContainerFilePath: "/etc/sentinel/sentinel.conf", FileMode: 0o644}),
			testcontainers.WithCmd("/etc/sentinel/sentinel.conf", "--sentinel"),
			testcontainers.WithWaitStrategyAndDeadline(startupWait, redisReady{port: "26379/tcp"})))
	}
	var scs []*redis.SentinelClient
	for _, n := range sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.addr(n)})
		t.Cleanup(func() { _ = c.Close() })
		scs = append(scs, c)
	}
	s.waitFor("the sentinels know each other and the replica", 30*time.Second, 200*time.Millisecond, func() error {
		for i, sc := range scs {
			m, err := sc.Master(context.Background(), "mymaster").Result()
			if err != nil {
				return err
			}
			if m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" {
				return fmt.Errorf("%s: %s other sentinels, %s replicas", sentinels[i].alias, m["num-other-sentinels"], m["num-slaves"])
			}
		}
		return nil
	})
	url := "redis://sentinel-1:26379/0?master_name=mymaster&addr=sentinel-2:26379&addr=sentinel-3:26379"
	s.startIngest()
	s.startQueryEnv(map[string]string{"CORREX_REDIS_URL": url})
	s.startProjectorEnv("projector-0", map[string]string{"CORREX_REDIS_URL": url,
		"CORREX_REDIS_WAIT_REPLICAS": "1", "CORREX_REDIS_WAIT_TIMEOUT": "1s"})
	q := s.url(s.query)
	ctx := context.Background()

	l, ak := loadWithAcks(ctx, s.url(s.ingest), workload("sentinel", seed(t), 1500, 1200))
	time.Sleep(5 * time.Second)
	s.pause(replica)
	pausedAt := time.Now()
	t.Log("paused the replica (redis-b)")
	time.Sleep(2 * time.Second)
	held, err := getStats(ctx, q) // what the replica has, at the latest
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if !l.running() {
		t.Fatal("the load ended before the primary was killed: make it longer")
	}
	s.kill(primary)
	killed := time.Now()
	t.Logf("killed the primary (redis-a) %v after the replica was paused", killed.Sub(pausedAt).Round(100*time.Millisecond))
	time.Sleep(time.Second)
	s.unpause(replica)
	t.Log("resumed the replica")
	newPrimary := ip(replica)
	s.waitFor("Sentinel promotes the replica", 60*time.Second, 100*time.Millisecond, func() error {
		for i, sc := range scs {
			addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
			if err != nil {
				return fmt.Errorf("%s: %w", sentinels[i].alias, err)
			}
			if addr[0] != newPrimary {
				return fmt.Errorf("%s names %v as the master", sentinels[i].alias, addr)
			}
		}
		return nil
	})
	promoted := time.Since(killed)
	t.Logf("every sentinel names redis-b the master %v after the primary was killed", promoted.Round(100*time.Millisecond))
	// The new primary has no replica: WAIT counts none, so no checkpoint
	// moves, and none moved while the replica lagged.
	time.Sleep(2 * time.Second)
	var stalled stats
	s.waitFor("the query service reads the new primary", 30*time.Second, 200*time.Millisecond, func() (err error) {
		stalled, err = getStats(ctx, q)
		return err
	})
	if got, want := stalled.checkpoints(), held.checkpoints(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("checkpoints moved with no replica to acknowledge the writes: %v, then %v", want, got)
	}
	redisNode("redis-c", "--replicaof", "redis-b", "6379")
	joined := time.Now()
	took := s.waitFolded("everything acknowledged until the new replica started is folded", q, ak.now(), killed, 90*time.Second)
	t.Logf("projection caught up %v after the primary was killed (every sentinel named the replica master after %v; %v after a new replica was started)",
		took.Round(100*time.Millisecond), promoted.Round(100*time.Millisecond), time.Since(joined).Round(100*time.Millisecond))
	t.Logf("the projector warned %v", warnings(s.logs(s.projectors["projector-0"])))
	rep := l.wait(t)
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)
	verifyReplays(t, q, exp, 10, 4)
}

// rebuildsRE finds correx.projector.rebuilds in the Prometheus text of a
// projector's /metrics.
var rebuildsRE = regexp.MustCompile(`(?m)^correx_projector_rebuilds(?:_[a-z]+)*(?:\{[^}]*\})? (\S+)$`)

// rebuilds returns the projector's correx.projector.rebuilds, or -1 when
// /metrics does not show it.
func rebuilds(projURL string) (float64, error) {
	code, _, body, err := get(context.Background(), projURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d", code)
	}
	ms := rebuildsRE.FindAllSubmatch(body, -1)
	if ms == nil {
		return -1, nil
	}
	var sum float64
	for _, m := range ms {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return 0, fmt.Errorf("correx_projector_rebuilds %q: %v", m[1], err)
		}
		sum += v
	}
	return sum, nil
}

// readyzWatch polls a projector's /readyz and remembers the first answer
// that names a rebuild.
type readyzWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	seen       string
	seenAt     time.Time
	notReady   int
}

func watchReadyz(projURL string) *readyzWatch {
	w := &readyzWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			code, _, body, err := get(ctx, projURL+"/readyz", nil)
			cancel()
			if err != nil || code == http.StatusOK {
				continue
			}
			w.mu.Lock()
			w.notReady++
			if w.seen == "" && strings.Contains(string(body), "rebuilding") {
				w.seen, w.seenAt = string(body), time.Now()
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *readyzWatch) finish() (seen string, at time.Time, notReady int) {
	close(w.stop)
	<-w.done
	return w.seen, w.seenAt, w.notReady
}

// TestRedisRestoredFromOlderRDB takes an RDB snapshot of Redis (no AOF)
// early under load, lets the checkpoints move on, then kills Redis, which
// comes back from that older file. The running projector notices that the
// stored checkpoints went back, rebuilds those partitions from the log, says
// so on /readyz and counts it in correx.projector.rebuilds: the result is
// exact.
func TestRedisRestoredFromOlderRDB(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	s.redis = s.run(redisAlias, redisPort, theImages.redis,
		testcontainers.WithCmd(append(append([]string{}, redisBase...), "--appendonly", "no", "--save", "")...),
		testcontainers.WithMounts(testcontainers.VolumeMount(s.volume("redis"), "/data")),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, redisReady{port: redisPort}))
	s.startIngest()
	s.startQuery()
	proj := s.startProjector("projector-0")
	q, pu := s.url(s.query), s.url(proj)

	l, ak := loadWithAcks(context.Background(), s.url(s.ingest), workload("rdb", seed(t), 1200, 1200))
	time.Sleep(4 * time.Second)
	rdb := s.redisClient()
	ctx := context.Background()
	lastSave, err := rdb.LastSave(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.BgSave(ctx).Err(); err != nil {
		t.Fatalf("BGSAVE: %v", err)
	}
	s.waitFor("BGSAVE done", 30*time.Second, 50*time.Millisecond, func() error {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if ls, err := rdb.LastSave(ctx).Result(); err != nil || ls == lastSave || !strings.Contains(info, "rdb_bgsave_in_progress:0") {
			return fmt.Errorf("in progress (%v)", err)
		}
		if !strings.Contains(info, "rdb_last_bgsave_status:ok") {
			return fmt.Errorf("%w: BGSAVE failed: %s", errStop, info)
		}
		return nil
	})
	savedAt := time.Now()
	saved, err := getStats(ctx, q) // at or after what the file holds
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved the RDB; checkpoints just after: %v", saved.checkpoints())
	s.waitFor("every checkpoint moves past the saved file", 30*time.Second, 200*time.Millisecond, func() error {
		if !l.running() {
			return fmt.Errorf("%w: the load ended: make it longer", errStop)
		}
		st, err := getStats(ctx, q)
		if err != nil {
			return err
		}
		for p := int32(0); p < partitions; p++ {
			if st.checkpoint(p) <= saved.checkpoint(p) {
				return fmt.Errorf("partition %d still at %d", p, st.checkpoint(p))
			}
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	before, err := getStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	ready := watchReadyz(pu)
	s.kill(s.redis)
	killed := time.Now()
	s.start(s.redis) // loads the older dump.rdb
	rdb = s.redisClient()
	s.waitFor("Redis loaded the file", 30*time.Second, 50*time.Millisecond, func() error { return rdb.Ping(ctx).Err() })
	t.Logf("restarted Redis from the RDB saved %v before (checkpoints at the kill: %v)", killed.Sub(savedAt).Round(100*time.Millisecond), before.checkpoints())
	took := s.waitFolded("everything acknowledged until Redis was back is folded", q, ak.now(), killed, 90*time.Second)
	s.waitFor("projector /readyz", 60*time.Second, 100*time.Millisecond, func() error {
		if code, _, body, err := get(ctx, pu+"/readyz", nil); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		return nil
	})
	readyAgain := time.Since(killed)
	seen, seenAt, notReady := ready.finish()
	t.Logf("projection caught up %v after Redis was killed and restored from the older RDB; the projector was ready again after %v",
		took.Round(100*time.Millisecond), readyAgain.Round(100*time.Millisecond))
	if seen != "" {
		t.Logf("/readyz reported the rebuild %v after the kill (%d not-ready answers): %s", seenAt.Sub(killed).Round(10*time.Millisecond), notReady, seen)
	} else {
		t.Logf("/readyz never named a rebuild in its %d not-ready answers (the window is shorter than the poll)", notReady)
	}
	rep := l.wait(t)
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)
	n, err := rebuilds(pu)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("correx.projector.rebuilds = %v on the projector's /metrics, want at least 1", n)
	}
	t.Logf("correx.projector.rebuilds = %v", n)
	if !strings.Contains(s.logs(proj), "Redis went back in time") {
		t.Error("the projector's log does not say that Redis went back in time")
	}
	verifyReplays(t, q, exp, 10, 5)
}

var warnRE = regexp.MustCompile(`level=WARN msg=("[^"]+"|\S+)`)

// warnings returns the distinct messages of a service log's warnings, with
// how often each occurs.
func warnings(log string) map[string]int {
	out := map[string]int{}
	for _, m := range warnRE.FindAllStringSubmatch(log, -1) {
		out[m[1]]++
	}
	return out
}

// TestNetworkPartitions cuts, one at a time under load, the projector off
// Redis, the projector off the broker, and the query service off Redis, each
// for about ten seconds (docker network disconnect, then connect). Redis has
// a network of its own (internal, so that the other network stays every
// container's gateway) that only the projector and the query service join.
// After each fault every snapshot equals the reference fold; while the
// query service is cut off it answers 503 problem+json in bounded time, and
// serves again by itself once reconnected.
func TestNetworkPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rnet, err := network.New(ctx, network.WithInternal(),
		network.WithLabels(map[string]string{labelKey: runID, labelKey + ".test": t.Name()}))
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	t.Cleanup(func() { // after the stack's cleanup, which removes the containers
		if err := rnet.Remove(context.Background()); err != nil {
			t.Errorf("cleanup: remove network %s: %v", rnet.Name, err)
		}
	})
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	s.redis = s.run(redisAlias, "", theImages.redis,
		testcontainers.WithCmd(append(append([]string{}, redisBase...), "--appendonly", "yes", "--appendfsync", "always", "--save", "")...),
		testcontainers.WithMounts(testcontainers.VolumeMount(s.volume("redis"), "/data")),
		onlyOn(rnet, redisAlias),
		testcontainers.WithWaitStrategyAndDeadline(startupWait, wait.ForLog("Ready to accept connections")))
	s.startIngest()
	query := s.startQueryEnv(nil, network.WithNetwork([]string{"query"}, rnet))
	proj := s.startProjectorEnv("projector-0", nil, network.WithNetwork([]string{"projector-0"}, rnet))
	q, in := s.url(query), s.url(s.ingest)
	sd := seed(t)
	var reps []loadgen.Report

	// partition cuts n off nw for d under a fresh load (during runs while
	// it is cut off, after once it is reconnected), then checks that the
	// projection caught up and is exact.
	partition := func(name string, n *node, nw *testcontainers.DockerNetwork, d time.Duration, during func(), after func(reconnected time.Time)) {
		t.Helper()
		l, ak := loadWithAcks(ctx, in, workload(name, sd+uint64(len(reps)), 1100, 1200))
		time.Sleep(4 * time.Second)
		s.disconnect(n, nw)
		cut := time.Now()
		t.Logf("%s: cut %s off the %s network", name, n.alias, map[bool]string{true: "Redis", false: "broker's"}[nw == rnet])
		if during != nil {
			during()
		}
		time.Sleep(time.Until(cut.Add(d)))
		if !l.running() {
			t.Fatalf("%s: the load ended during the partition: make it longer", name)
		}
		s.connect(n, nw)
		reconnected, end := time.Now(), ak.now()
		if after != nil {
			after(reconnected)
		}
		took := s.waitFolded(name+": everything acknowledged until the reconnect is folded", q, end, cut, 90*time.Second)
		t.Logf("%s: projection caught up %v after the cut (%v after reconnecting, partition of %v)",
			name, took.Round(100*time.Millisecond), time.Since(reconnected).Round(100*time.Millisecond), reconnected.Sub(cut).Round(100*time.Millisecond))
		reps = append(reps, l.wait(t))
		exp := expectOf(reps...)
		verifySnapshots(t, q, exp, verifyOpts{})
		verifyStats(t, q, exp)
	}

	// (a) The projector loses Redis in the middle of its flushes: its
	// /readyz says so, and it recovers by itself.
	pu := s.url(proj)
	readyz := func() (int, string) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		code, _, body, err := get(rctx, pu+"/readyz", nil)
		if err != nil {
			return 0, err.Error()
		}
		return code, string(body)
	}
	partition("projector-redis", proj, rnet, 10*time.Second, func() {
		s.waitFor("projector-redis: the projector's /readyz reports Redis", 8*time.Second, 100*time.Millisecond, func() error {
			if code, body := readyz(); code != http.StatusServiceUnavailable {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		_, body := readyz()
		t.Logf("projector-redis: the projector's /readyz answered 503: %s", body)
	}, func(reconnected time.Time) {
		s.waitFor("projector-redis: the projector's /readyz answers 200", 30*time.Second, 100*time.Millisecond, func() error {
			if code, body := readyz(); code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		t.Logf("projector-redis: the projector was ready again %v after the reconnect", time.Since(reconnected).Round(10*time.Millisecond))
	})
	t.Logf("projector-redis: the projector warned %v", warnings(s.logs(proj)))

	// (b) The projector loses the broker past its group session timeout.
	partition("projector-broker", proj, s.net, 10*time.Second, nil, nil)
	t.Logf("projector-broker: the projector warned %v", warnings(s.logs(proj)))

	// (c) The query service loses Redis: a read answers 503 problem+json
	// within the bound, and 200 again once reconnected.
	id := expectOf(reps...).ids()[0]
	partition("query-redis", query, rnet, 10*time.Second, func() {
		const bound = 10 * time.Second
		var answers int
		var slowest time.Duration
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); answers++ {
			rctx, cancel := context.WithTimeout(ctx, bound)
			start := time.Now()
			code, hdr, body, err := get(rctx, q+"/v1/sessions/"+id, nil)
			took := time.Since(start)
			cancel()
			if err != nil {
				t.Fatalf("query-redis: GET /v1/sessions/%s while cut off: no answer within %v: %v", id, bound, err)
			}
			if code != http.StatusServiceUnavailable || !strings.HasPrefix(hdr.Get("Content-Type"), "application/problem+json") {
				t.Fatalf("query-redis: GET /v1/sessions/%s while cut off answered %d %s in %v, want 503 application/problem+json: %s",
					id, code, hdr.Get("Content-Type"), took, body)
			}
			if answers == 0 {
				t.Logf("query-redis: cut off, GET /v1/sessions/{id} answered 503 problem+json in %v (Retry-After %q)",
					took.Round(time.Millisecond), hdr.Get("Retry-After"))
			}
			slowest = max(slowest, took)
		}
		t.Logf("query-redis: %d reads answered 503 while cut off, the slowest in %v", answers, slowest.Round(time.Millisecond))
	}, func(reconnected time.Time) {
		s.waitFor("query-redis: GET /v1/sessions/{id} answers 200 after the reconnect", 20*time.Second, 100*time.Millisecond, func() error {
			code, _, body, err := get(ctx, q+"/v1/sessions/"+id, nil)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("%d %v %s", code, err, body)
			}
			return nil
		})
		t.Logf("query-redis: the query service served 200 again %v after the reconnect", time.Since(reconnected).Round(10*time.Millisecond))
	})
}
