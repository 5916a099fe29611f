package e2e_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/testwait"
	correx "github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The load of each run of TestRedisLossAcrossProjectorKills: about 50,000
// events, sent for about 8 s, long enough for every fault of a run to land
// while it is sent.
const (
	lossSessions   = 3000
	lossRate       = 6000 // events per second
	lossFaultsFrom = 8000 // events accepted before the first fault
	// lossVerifyRate is the projector's CORREX_VERIFY_RATE in these runs
	// (sessions a second; the default is 20).
	lossVerifyRate = 200
)

// lossRuns is how many times each case of TestRedisLossAcrossProjectorKills
// runs: CORREX_LOSS_RUNS, 1 unless set.
func lossRuns(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CORREX_LOSS_RUNS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CORREX_LOSS_RUNS=%q: want a positive number of runs", v)
	}
	return n
}

// lossSeed is the seed of the first run (CORREX_LOSS_SEED, or the time);
// run i has seed+i, for its load and its faults' timing alike, and each
// run names its seed.
func lossSeed(t *testing.T) uint64 {
	t.Helper()
	v := os.Getenv("CORREX_LOSS_SEED")
	if v == "" {
		return uint64(time.Now().UnixNano() % 1e9)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("CORREX_LOSS_SEED=%q: want a number", v)
	}
	return n
}

// TestRedisLossAcrossProjectorKills runs the services as separate processes
// (the kafkabroker, ingest, projector and query binaries, and redis-server)
// under a load of 3,000 sessions through ingest, and loses Redis while the
// projector is killed (SIGKILL) and restarted:
//
//   - "emptied twice during a rebuild": the projector is killed and
//     restarted, and Redis emptied (FLUSHALL) right after the new process
//     is assigned its partitions; emptied again as soon as the new process
//     writes snapshots back, so that the second loss lands in the first
//     batch of the rebuild (or of the fold from the start) that the first
//     one began; then the projector is killed and restarted again, in the
//     rebuild the second loss began.
//   - "failed over to a lagging replica": Redis is a primary with a
//     replica; the replica stops applying the replication stream for about
//     a second (CLIENT PAUSE WRITE on it holds the primary's stream
//     unapplied), then the primary is killed, the replica promoted
//     (REPLICAOF NO ONE) and moved to the primary's port (CONFIG SET port),
//     as a virtual address moves, so the services reconnect to it without
//     being told: Redis went back about a second. The projector is killed
//     and restarted 0-0.3 s after it begins the rebuild that the rollback
//     calls for, and half the time again 0.2-1.2 s later.
//
// Once the load ends and every checkpoint has reached the log's end with
// the projector ready, every session must be exact: the stored snapshot
// equal, byte for byte, to the fold of the events ingest acknowledged for
// it (internal/loadgen), no snapshot of a session that should not exist,
// and the query service's /v1/sessions/{id} answering each as that fold.
//
// CORREX_LOSS_RUNS=N runs each case N times and logs "exact in K of N
// runs"; CORREX_LOSS_SEED sets the first run's seed.
func TestRedisLossAcrossProjectorKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	t.Parallel() // its own processes and redis-servers: beside the other process tests
	runs, seed := lossRuns(t), lossSeed(t)
	bin := buildServices(t, "kafkabroker", "ingest", "projector", "query")
	for _, tc := range []struct {
		name    string
		replica bool
		faults  func(*testing.T, *lossStack, *rand.Rand) string
	}{
		{"emptied twice during a rebuild", false, emptiedTwice},
		{"failed over to a lagging replica", true, laggingFailover},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exact := 0
			for i := range runs {
				s := seed + uint64(i)
				if t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
					lossRun(t, bin, s, lossSetup{replica: tc.replica, sessions: lossSessions}, tc.faults)
				}) {
					exact++
				}
			}
			t.Logf("%s: exact in %d of %d runs (seeds %d to %d)", tc.name, exact, runs, seed, seed+uint64(runs)-1)
		})
	}
}

// emptiedTwice kills and restarts the projector, empties Redis 0-0.6 s
// after the new process is assigned its partitions (before or after it
// reads its checkpoints), empties it again as soon as the new process
// writes snapshots back (its first batch since the loss, in the rebuild or
// the fold from the start that the loss began), and kills and restarts the
// projector again 0-1.2 s later (in the rebuild the second loss began).
func emptiedTwice(t *testing.T, s *lossStack, rng *rand.Rand) string {
	ctx := context.Background()
	flush := func() {
		t.Helper()
		if err := s.rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	restart := func() string {
		before := s.projLogged("partitions assigned")
		s.restartProjector(t, 0)
		s.waitProjLog(t, "partitions assigned", before, 30*time.Second)
		return "projector killed and restarted, assigned"
	}
	steps := []string{restart(), s.pause(rng, 0, 600)}
	flush()
	// Snapshot keys come back a batch at a time: a few hundred keys means
	// the new process is writing its first batch since the loss. Polled
	// without a pause, to land inside that batch.
	began := time.Now()
	for {
		n, err := s.rdb.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n >= 200 {
			break
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("Redis holds %d keys 30 s after it was emptied", n)
		}
	}
	flush()
	steps = append(steps, "FLUSHALL", fmt.Sprintf("FLUSHALL as soon as keys came back (%v later)", time.Since(began).Round(time.Millisecond)),
		s.pause(rng, 0, 1200), restart())
	return strings.Join(steps, ", ")
}

// rebuildStarted is what the projector logs as it begins a partition's
// rebuild.
const rebuildStarted = "rebuilding it from the earliest offset"

// laggingFailover holds the replica's replication stream unapplied for
// 0.8-1.2 s and until the replica has missed a checkpoint write, kills the
// primary, promotes the replica on the primary's port, then kills and
// restarts the projector 0-0.3 s after it begins rebuilding, and half the
// time again 0.2-1.2 s later.
func laggingFailover(t *testing.T, s *lossStack, rng *rand.Rand) string {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: s.replica.Addr})
	defer rc.Close()
	// Past the test's end: the replica is killed with the test anyway.
	if err := rc.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	steps := []string{"replica paused", s.pause(rng, 800, 1200)}
	// The replica must miss a checkpoint write, or the projector has
	// nothing to notice: a projector can write nothing for longer than the
	// pause (its group rebalancing after a kill, the broker restarting).
	ckpts := redislayout.NewKeys("correx").Checkpoints(lossTopic)
	testwait.UntilSeen(t, "a checkpoint write the paused replica has not applied", 60*time.Second, func() (bool, string) {
		p, err := s.rdb.HGetAll(ctx, ckpts).Result()
		if err != nil {
			return false, err.Error()
		}
		r, err := rc.HGetAll(ctx, ckpts).Result()
		if err != nil {
			return false, err.Error()
		}
		// The checkpoints, not the hash: it holds each partition's epoch
		// too ("<p>:ep"), which a claim raises without a checkpoint
		// moving, and a replica that missed only that has no rollback to
		// show. Two .ci/run (seed 882207076) failed with no rebuild
		// within 30 s of such a failover: their logs show a rebalance's
		// claims around the pause and no checkpoint write after them.
		maps.DeleteFunc(p, func(f, _ string) bool { return strings.HasSuffix(f, ":ep") })
		maps.DeleteFunc(r, func(f, _ string) bool { return strings.HasSuffix(f, ":ep") })
		return !maps.Equal(p, r), fmt.Sprintf("primary %v, replica %v", p, r)
	})
	primaryOffset := replOffset(t, s.rdb, "master_repl_offset")
	rebuilds := s.projLogged(rebuildStarted)
	s.primary.Stop() // SIGKILL
	testwait.UntilSeen(t, "the replica seeing its primary gone", 10*time.Second, func() (bool, string) {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:down"), info
	})
	// The stream the replica held unapplied went with the link.
	replicaOffset := replOffset(t, rc, "master_repl_offset")
	if replicaOffset >= primaryOffset {
		t.Fatalf("the replica is at replication offset %d, the primary was at %d: it did not lag", replicaOffset, primaryOffset)
	}
	_, port, _ := strings.Cut(s.primary.Addr, ":")
	for _, cmd := range [][]any{{"CLIENT", "UNPAUSE"}, {"REPLICAOF", "NO", "ONE"}, {"CONFIG", "SET", "port", port}} {
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v on the replica: %v", cmd, err)
		}
	}
	s.redis = s.replica
	steps = append(steps, fmt.Sprintf("primary killed, replica %d bytes of replication behind promoted on its port", primaryOffset-replicaOffset))
	// The projector notices the rollback at its next checkpoint write and
	// rebuilds; it is killed in that rebuild, and maybe again in the next.
	s.waitProjLog(t, rebuildStarted, rebuilds, 30*time.Second)
	steps = append(steps, "rebuild begun", s.pause(rng, 0, 300))
	s.restartProjector(t, 0)
	steps = append(steps, "projector killed and restarted")
	if rng.IntN(2) == 0 {
		steps = append(steps, s.pause(rng, 200, 1200))
		s.restartProjector(t, 0)
		steps = append(steps, "projector killed and restarted")
	}
	return strings.Join(steps, ", ")
}

func replOffset(t *testing.T, c *redis.Client, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO replication:\n%s", field, info)
	return 0
}

// lossStack is the pipeline as processes on one Redis address.
type lossStack struct {
	bin              map[string]string
	primary, replica *redistest.Server // replica: nil unless asked
	// redis is the redis-server serving the services' address: the
	// primary, or the replica once promoted on the primary's port.
	redis      *redistest.Server
	rdb        *redis.Client // at the services' Redis address
	brokerAddr string
	brokerEnv  map[string]string // KFAKE_DATA_DIR: the log survives a restart
	broker     *process
	ingest     *process
	query      *process
	ingestURL  string
	queryURL   string
	// projEnv, proj and projURL are each projector instance's environment
	// (its own CORREX_INSTANCE_ID, one consumer group), running process and
	// base URL.
	projEnv []map[string]string
	proj    []*process
	projURL []string
	projs   []*process // every projector process, for their logs
	// peaks are the peak resident memory (VmHWM) of the service processes
	// killed so far, each read right before its kill.
	peaks []procPeak
	// s3 is the archive's S3 server (lossSetup.archive), and archive the
	// bucket it keeps on disk, read directly by the check; nil without.
	s3      *s3test.Server
	archive *archive.Store
	// archivedAt holds, for each session verify found archived, how many
	// of the events ingest acknowledged for it the archived object
	// holds: those after were folded against its tombstone (feedWatchers'
	// check); -1 for a session whose requests were resent, whose copies
	// only Kafka saw make that unknown, and for any session, archived or
	// not, whose log holds copies of its events (logCopies): the change
	// feed's check skips those.
	archivedAt map[string]int
	// archiveEnv is what the projectors and the query service are told of
	// the archive.
	archiveEnv []string
}

// procPeak is a service process's peak resident memory.
type procPeak struct {
	name  string
	bytes int64
}

// lossSetup is the stack and the load lossRun builds.
type lossSetup struct {
	replica    bool    // a replica beside the primary (laggingFailover)
	projectors int     // projector processes in the group; 1 unless set
	sessions   int     // sessions of the load
	rate       float64 // the load's events a second; lossRate unless set
	// watchers is how many watches of the change feed open before the
	// load (feedWatchers) and must each be complete once the run ends.
	watchers int
	// memory requires each service process's peak resident memory within
	// memoryBounds.
	memory bool
	// timeouts are the sessions' own (loadgen.Config.Timeouts); none
	// unless set.
	timeouts fsm.Timeouts
	// logCopy writes, once the load is over, a second copy of a record
	// of the log (an event ingest acknowledged once, of a session the
	// load leaves open), as a broker killed between writing a produce
	// request and answering it does when the producer sends it again
	// (lossStack.logCopies): the check must find it and judge the session
	// by the log's records.
	logCopy bool
	// archive runs an S3 server (versitygw) that the projectors archive
	// closed sessions into lossRetainClosed after they end and the query
	// service reads them from; verify then requires every closed session
	// archived and exact there, and no snapshot of it left in Redis.
	archive bool
}

// lossRetainClosed is CORREX_RETAIN_CLOSED in a run with the archive:
// closed sessions leave Redis while the load and the faults go on.
const lossRetainClosed = 2 * time.Second

// lossArchiveReads is how many archived sessions the query service reads
// at once for one caller in a run with the archive
// (CORREX_ARCHIVE_READS_PER_PRINCIPAL; the check is one caller), and how
// many objects the check reads from the bucket at once.
const lossArchiveReads = 16

// lossArchivedPatience is how long the check waits for the count of
// snapshots in Redis to move while closed sessions are left there: a
// sweep runs every 10 s, and a closed session that lost its entry in its
// partition's closed sessions is indexed again by the background verifier
// within one of its cycles (a few minutes in a long run).
const lossArchivedPatience = 5 * time.Minute

// lossBucket is the archive's bucket in a run with the archive.
const lossBucket = "correx-archive"

// startArchive starts the archive's S3 server with its bucket, the
// services' settings for it, and a reader of the bucket's directory for
// the check (the objects as versitygw stores them, one file each).
func (s *lossStack) startArchive(t *testing.T) {
	t.Helper()
	s.s3 = s3test.StartServer(t) // the services are given the credentials
	bucket := s.s3.Bucket(t, lossBucket)
	s.archiveEnv = []string{"CORREX_ARCHIVE_URL", bucket, "CORREX_ARCHIVE_TIMEOUT", "2s",
		"AWS_ACCESS_KEY_ID", s3test.AccessKey, "AWS_SECRET_ACCESS_KEY", s3test.SecretKey}
	store, err := archive.Open(context.Background(), "file://"+filepath.Join(s.s3.Dir, lossBucket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s.archive = store
}

const lossTopic = "correx.session-events"

func lossRun(t *testing.T, bin map[string]string, seed uint64, setup lossSetup, faults func(*testing.T, *lossStack, *rand.Rand) string) {
	rng := rand.New(rand.NewPCG(seed, 0x1055))
	s := &lossStack{bin: bin, primary: redistest.Start(t, "--repl-diskless-sync-delay", "0"), archivedAt: map[string]int{}}
	s.redis = s.primary
	if setup.replica {
		s.replica = redistest.StartReplica(t, s.primary)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.primary.Addr})
	t.Cleanup(func() { _ = s.rdb.Close() })
	if setup.archive {
		s.startArchive(t)
	}
	s.start(t, max(setup.projectors, 1))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := loadgen.Config{IngestURL: s.ingestURL, QueryURL: s.queryURL, Sessions: setup.sessions, Concurrency: 6, Batch: 20,
		Rate: cmp.Or(setup.rate, lossRate), InvalidShare: 0.03, DuplicateShare: 0.03, Seed: seed, Prefix: "pl", KeepWritten: true,
		Client: apiCheck.Client(nil), Timeouts: setup.timeouts}
	var watchers *feedWatchers
	if setup.watchers > 0 {
		watchers = watchFeed(t, ctx, s.queryURL, s.brokerAddr, cfg, setup.watchers, rng.Uint64())
	}
	var accepted atomic.Int64
	cfg.Progress = func(n int) { accepted.Add(int64(n)) }
	loadDone := make(chan loadResult, 1)
	go func() {
		rep, err := loadgen.Run(ctx, cfg)
		loadDone <- loadResult{rep, err}
	}()
	testwait.UntilSeen(t, "load accepted", 60*time.Second, func() (bool, string) {
		return accepted.Load() >= lossFaultsFrom, fmt.Sprintf("%d events accepted", accepted.Load())
	})
	schedule := faults(t, s, rng)
	select {
	case <-loadDone:
		t.Fatalf("the load ended before the last fault (%s): make it longer", schedule)
	default:
	}
	res := <-loadDone
	if res.err != nil {
		t.Fatal(res.err)
	}
	rep := res.rep
	if setup.logCopy {
		s.copyARecord(t, rep)
	}
	loaded := time.Now()
	s.caughtUp(t)
	caughtUp := time.Since(loaded)
	if s.archive != nil {
		s.archivedAll(t, rep)
	}

	rebuilds, resumed := s.projLogged(rebuildStarted), s.projLogged("resuming the partition's rebuild")
	t.Logf("%s; %d events in %d requests (%d resent) for %d sessions; checkpoints at the log's end %v after the load; %d partition rebuilds begun and %d resumed by a new process, over %d projector processes",
		schedule, rep.Events, rep.Requests, rep.Retries, rep.Sessions, caughtUp.Round(time.Millisecond), rebuilds, resumed, len(s.projs))
	s.verify(t, cfg, rep)
	s.verifierSilent(t)
	if watchers != nil {
		watchers.complete(t, rep, s.archivedAt)
		if t.Failed() {
			s.producers(t)
		}
	}
	if setup.memory {
		s.withinMemory(t, rep)
	}
	if t.Failed() {
		s.keepLogs(t)
	}
}

// keepLogs writes the log of every service process of a failed run into
// the directory CORREX_LOSS_LOGS names, if set (make chaos
// CHAOS_LOGS=dir): projector-<i>.log in the order the projectors
// started, kafkabroker.log (the last broker process), ingest.log and
// query.log. The test's own
// output shows a part of them; the whole tells what a partition's owners
// did with a session stored otherwise.
func (s *lossStack) keepLogs(t *testing.T) {
	t.Helper()
	dir := os.Getenv("CORREX_LOSS_LOGS")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("keeping the logs: %v", err)
		return
	}
	write := func(name string, p *process) {
		if p == nil {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(p.output()), 0o644); err != nil {
			t.Errorf("keeping the logs: %v", err)
		}
	}
	for i, p := range s.projs {
		write(fmt.Sprintf("projector-%d.log", i), p)
	}
	write("kafkabroker.log", s.broker)
	write("ingest.log", s.ingest)
	write("query.log", s.query)
	t.Logf("the services' logs are in %s", dir)
}

// producers logs the producer id and epoch each projector process
// produced the change feed as (its "producing" line), in the order the
// processes started: the feed's diagnosis names the producer of each
// record.
func (s *lossStack) producers(t *testing.T) {
	t.Helper()
	re := regexp.MustCompile(`producerId=(\d+) producerEpoch=(\d+)`)
	for i, p := range s.projs {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			t.Logf("projector process %d (pid %d) produced as producer %s epoch %s", i, p.cmd.Process.Pid, m[1], m[2])
		}
	}
}

// verifierSilent requires that the background verifier, which every
// projector of the run ran (CORREX_VERIFY_RATE, lossVerifyRate), reported
// no mismatch through the faults: the read model was exact at the end
// (verify), so a mismatch logged on the way was a false positive, a
// snapshot reported while it moved. It also requires that each running
// projector's verifier checked sessions, so that the silence is not that
// of a verifier that never ran.
func (s *lossStack) verifierSilent(t *testing.T) {
	t.Helper()
	var lines, reindexed []string
	for _, p := range s.projs {
		for l := range strings.Lines(p.output()) {
			switch {
			case strings.Contains(l, projector.MismatchLogged):
				lines = append(lines, strings.TrimSpace(l))
			case strings.Contains(l, projector.ReindexedLogged):
				reindexed = append(reindexed, strings.TrimSpace(l))
			}
		}
	}
	if len(reindexed) > 0 {
		// Not a wrong read model (the session was exact, in Redis), but a
		// closed session the archive's sweep would not have taken without
		// the verifier: named, so that a run shows where it comes from.
		t.Logf("the background verifier indexed %d closed sessions again, for example:\n%s", len(reindexed),
			strings.Join(reindexed[:min(len(reindexed), 5)], "\n"))
	}
	if len(lines) > 0 {
		t.Errorf("the background verifier reported %d mismatches of an exact read model, for example:\n%s", len(lines), strings.Join(lines[:min(len(lines), 5)], "\n"))
	}
	checked := make([]float64, len(s.projURL))
	for i, u := range s.projURL {
		testwait.UntilSeen(t, fmt.Sprintf("projector %d's verifier checking sessions", i+1), 60*time.Second, func() (bool, string) {
			n, ok := metric(t, u, "correx_verify_checked_total")
			checked[i] = n
			return ok && n > 0, fmt.Sprintf("correx_verify_checked_total %v (exported: %v)", n, ok)
		})
	}
	t.Logf("the background verifier: no mismatch logged by %d projector processes; the running ones checked %v sessions", len(s.projs), checked)
}

// start starts the broker, ingest, the query service and n projectors in
// one consumer group, and waits until each is ready.
func (s *lossStack) start(t *testing.T, n int) {
	t.Helper()
	s.brokerEnv = map[string]string{"KFAKE_PARTITIONS": "6", "KFAKE_LOG_LEVEL": "warn", "KFAKE_DATA_DIR": t.TempDir()}
	s.broker, s.brokerAddr = startBroker(t, s.bin["kafkabroker"], maps.Clone(s.brokerEnv))
	env := func(extra ...string) map[string]string {
		m := map[string]string{
			"CORREX_KAFKA_BROKERS":  s.brokerAddr,
			"CORREX_REDIS_URL":      "redis://" + s.primary.Addr + "/0",
			"CORREX_PARTITIONS":     "6",
			"CORREX_TOPIC":          lossTopic,
			"CORREX_AUTH_DISABLED":  "true",
			"CORREX_RATE_LIMIT":     "0",
			"OTEL_TRACES_EXPORTER":  "none",
			"OTEL_METRICS_EXPORTER": "none",
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	s.ingest, s.ingestURL = startHTTPService(t, "ingest", s.bin["ingest"], env())
	s.query, s.queryURL = startHTTPService(t, "query", s.bin["query"],
		env(append(slices.Clone(s.archiveEnv), "CORREX_ARCHIVE_READS_PER_PRINCIPAL", strconv.Itoa(lossArchiveReads))...))
	// Each projector exports its metrics (verifierSilent reads them) and
	// verifies faster than its default, so that its cycles cover the
	// sessions while the faults land.
	for i := range n {
		extra := []string{"CORREX_INSTANCE_ID", fmt.Sprintf("loss-%d", i+1), "OTEL_METRICS_EXPORTER", "prometheus",
			"CORREX_VERIFY_RATE", strconv.Itoa(lossVerifyRate)}
		if s.archive != nil {
			extra = append(append(extra, s.archiveEnv...), "CORREX_RETAIN_CLOSED", lossRetainClosed.String())
		}
		s.projEnv = append(s.projEnv, env(extra...))
		s.proj, s.projURL = append(s.proj, nil), append(s.projURL, "")
		s.startProjector(t, i)
	}
	for _, base := range append([]string{s.ingestURL, s.queryURL}, s.projURL...) {
		waitHTTP(t, base+"/readyz", 60*time.Second)
	}
}

// startProjector starts projector instance i.
func (s *lossStack) startProjector(t *testing.T, i int) {
	t.Helper()
	// A new process listens on a new port: projURL follows it.
	s.proj[i], s.projURL[i] = startHTTPService(t, "projector", s.bin["projector"], maps.Clone(s.projEnv[i]))
	s.projs = append(s.projs, s.proj[i])
}

// restartProjector kills projector instance i (SIGKILL: nothing is
// flushed) and starts it again with the same group instance id, so that
// it takes its partitions back at once.
func (s *lossStack) restartProjector(t *testing.T, i int) {
	t.Helper()
	s.kill(t, "projector", s.proj[i])
	s.startProjector(t, i)
}

// kill kills a service process (SIGKILL), noting its peak resident memory
// first.
func (s *lossStack) kill(t *testing.T, name string, p *process) {
	t.Helper()
	s.peaks = append(s.peaks, procPeak{name, procStatusBytes(p, "VmHWM:")})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// startBrokerAgain starts the broker again, once killed, on the address
// the first one reported and on the same data directory: the services
// were given that address and reconnect to it.
func (s *lossStack) startBrokerAgain(t *testing.T) {
	t.Helper()
	env := maps.Clone(s.brokerEnv)
	env["KFAKE_LISTEN_ADDR"] = s.brokerAddr
	s.broker = startService(t, "kafkabroker", s.bin["kafkabroker"], env)
	if addr := s.broker.logAddr(t, "broker ready", "advertised", 30*time.Second); addr != s.brokerAddr {
		t.Fatalf("the broker started again at %s, want %s", addr, s.brokerAddr)
	}
}

// projLogged counts the lines of every projector process of the run that
// contain msg.
func (s *lossStack) projLogged(msg string) int {
	n := 0
	for _, p := range s.projs {
		n += strings.Count(p.output(), msg)
	}
	return n
}

// waitProjLog waits up to d until the projector processes logged msg more
// than the before times projLogged counted.
func (s *lossStack) waitProjLog(t *testing.T, msg string, before int, d time.Duration) {
	t.Helper()
	testwait.UntilSeen(t, fmt.Sprintf("a projector logging %q", msg), d, func() (bool, string) {
		n := s.projLogged(msg)
		return n > before, fmt.Sprintf("logged %d times, %d before", n, before)
	})
}

// pause lets the run go on for a random time between lo and hi
// milliseconds: the time between two faults is what the scenario is made
// of, not a wait for a state. It returns the pause, for the schedule.
func (s *lossStack) pause(rng *rand.Rand, lo, hi int) string {
	d := time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond
	time.Sleep(d) // the scenario: the time between two faults
	return d.String()
}

// caughtUp waits until every partition's checkpoint has reached the log's
// end (as it is once the load ended) and every projector is ready (no
// partition rebuilding or stalled).
func (s *lossStack) caughtUp(t *testing.T) {
	t.Helper()
	kc, err := kgo.NewClient(kgo.SeedBrokers(s.brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx := context.Background()
	lo, err := kadm.NewClient(kc).ListEndOffsets(ctx, lossTopic)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	store := s.store(t)
	testwait.UntilSeen(t, "every checkpoint at the log's end and the projectors ready", 120*time.Second, func() (bool, string) {
		cps, err := store.Checkpoints(ctx, lossTopic)
		if err != nil {
			return false, err.Error()
		}
		for p, end := range ends {
			if cps[p].Offset < end {
				return false, fmt.Sprintf("checkpoints %v, log's end %v", cps, ends)
			}
		}
		for i, u := range s.projURL {
			if st := getStatus(u + "/readyz"); st != 200 {
				return false, fmt.Sprintf("projector %d /readyz %d", i+1, st)
			}
		}
		return true, ""
	})
}

func (s *lossStack) store(t *testing.T) *snapshot.Store {
	t.Helper()
	store, err := snapshot.NewStore(s.rdb, "correx")
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// verify checks every session of the load: stored as the fold of what
// ingest acknowledged (byte for byte; sessions whose requests were resent
// through the query service only, since Kafka may hold copies ingest could
// not confirm), no snapshot beyond those that should exist, and the query
// service answering each as the fold. A handful are replayed from the log.
func (s *lossStack) verify(t *testing.T, cfg loadgen.Config, rep loadgen.Report) {
	t.Helper()
	ctx := context.Background()
	store := s.store(t)
	ids := make([]string, 0, len(rep.Written))
	for id := range rep.Written {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var exist, missing, differ, unwanted, unarchived int
	var examples []string
	// archived are the sessions read from the archive (a run with one):
	// each closed session, with the version it was archived at.
	archived := map[string]uint64{}
	var inArchive []string // closed, not in Redis: read from the archive below
	// suspects are the sessions stored or archived otherwise than the
	// fold of what ingest acknowledged, with what differs: judged again
	// against the events log below (logCopies).
	suspects := map[string]string{}
	for chunk := range slices.Chunk(ids, 500) {
		stored, err := store.GetMany(ctx, chunk)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range chunk {
			ref := loadgen.Expected(rep.Written[id])
			switch {
			case !ref.Exists():
				if stored[i] != nil {
					unwanted++
				}
			case s.archive != nil && ref.State.Terminal():
				exist++
				if stored[i] != nil {
					unarchived++
					if len(examples) < 3 {
						examples = append(examples, id+": closed and still in Redis")
					}
					continue
				}
				inArchive = append(inArchive, id)
			case stored[i] == nil:
				exist++
				missing++
				if len(examples) < 3 {
					examples = append(examples, id+": not stored")
				}
			default:
				exist++
				if rep.Resent[id] {
					continue
				}
				want := snapshot.Snapshot{Session: ref, Position: stored[i].Position, FirstOffset: stored[i].FirstOffset}
				if !bytes.Equal(stored[i].AppendBinary(nil), want.AppendBinary(nil)) {
					got, _ := stored[i].MarshalJSON()
					exp, _ := want.MarshalJSON()
					suspects[id] = fmt.Sprintf("%s differs\n got %s\nwant %s", id, got, exp)
				}
			}
		}
	}
	// The archived sessions are read and folded lossArchiveReads at a
	// time: a long run archives about 90,000.
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, lossArchiveReads)
	for _, id := range inArchive {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, k, problem := s.archivedExact(id, rep.Written[id], rep.Resent[id])
			mu.Lock()
			defer mu.Unlock()
			if problem != "" {
				suspects[id] = id + ": " + problem
				return
			}
			archived[id] = v
			s.archivedAt[id] = k
			if rep.Resent[id] {
				s.archivedAt[id] = -1 // how many is not known
			}
		})
	}
	wg.Wait()
	if rep.Resent == nil {
		rep.Resent = map[string]bool{} // logCopies marks sessions in it
	}
	copied := s.logCopies(t, rep, suspects, store, archived)
	for _, id := range slices.Sorted(maps.Keys(suspects)) {
		differ++
		if len(examples) < 6 {
			examples = append(examples, suspects[id])
		}
	}
	keys := s.snapshotKeys(t)
	// The query service answers an archived session from the archive: as
	// archived, at the version it was archived at (archivedAnswers), not
	// waiting for events folded after it, which it does not hold.
	rep.Last = maps.Clone(rep.Last)
	maps.DeleteFunc(rep.Last, func(id string, _ snapshot.Position) bool { _, ok := archived[id]; return ok })
	if err := loadgen.Verify(ctx, cfg, &rep); err != nil {
		t.Fatal(err)
	}
	examples = append(examples, s.archivedAnswers(t, archived)...)
	if missing+differ+unwanted+unarchived > 0 || keys+len(archived) != exist || len(rep.Mismatches) > 0 || rep.Verified != len(rep.Last) ||
		len(examples) > 0 {
		if len(rep.Mismatches) > 0 {
			examples = append(examples, "query: "+rep.Mismatches[0])
		}
		// An error, not a stop: the run's other checks (the verifier's
		// log, the watches, memory) still report, so that one long run
		// tells everything it found.
		t.Errorf("not exact: of %d sessions that exist, %d not stored, %d stored otherwise than the fold, %d closed and not archived, %d archived; %d stored that should not exist; %d snapshot keys in Redis; the query service answered %d of %d in Redis as the fold (%d mismatches); for example:\n%s",
			exist, missing, differ, unarchived, len(archived), unwanted, keys, rep.Verified, len(rep.Last), len(rep.Mismatches), strings.Join(examples, "\n"))
		return
	}
	replayed := 0
	for _, id := range ids {
		if replayed == 10 {
			break
		}
		if _, gone := archived[id]; gone {
			continue // the replay compares with the snapshot in Redis
		}
		if ref := loadgen.Expected(rep.Written[id]); ref.Exists() {
			replayed++
			if got := replay(t, s.queryURL, id); !got.MatchesStored {
				t.Errorf("%s: the replay from the log does not match the stored snapshot", id)
			}
		}
	}
	t.Logf("exact: %d sessions stored as the fold of what ingest acknowledged (%d in Redis, %d archived; %d of them with a copy of an acknowledged event in the log, exact as the fold of the log's records), %d snapshot keys, %d answered by the query service as the fold and %d as archived",
		exist, exist-len(archived), len(archived), copied, keys, rep.Verified, len(archived))
}

// copyARecord writes a second copy of the first record in the events log
// of a session the load leaves open and did not resend (lossSetup.logCopy).
func (s *lossStack) copyARecord(t *testing.T, rep loadgen.Report) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokerAddr), kgo.ConsumeTopics(lossTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record of a session the load leaves open in the log: %v", err)
		}
		var found *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if found != nil || rep.Resent[string(r.Key)] {
				return
			}
			if ref := loadgen.Expected(rep.Written[string(r.Key)]); ref.Exists() && !ref.State.Terminal() {
				found = r
			}
		})
		if found != nil {
			c := &kgo.Record{Topic: found.Topic, Partition: found.Partition, Key: found.Key, Value: found.Value, Headers: found.Headers}
			if err := cl.ProduceSync(ctx, c).FirstErr(); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote a second copy of %s's record at %d:%d at %d:%d", found.Key, found.Partition, found.Offset, c.Partition, c.Offset)
			return
		}
	}
}

// logCopies reads the events log and judges each session whose log holds
// more records than ingest acknowledged events for it. A
// broker killed (kill -9) after it wrote a produce request and before it
// answered it is sent that request again by ingest's producer, and the
// restarted broker writes it a second time: kfake keeps the idempotent
// producer's sequences on disk only when it stops in order, where Kafka
// rebuilds them from its log. The log then holds a second copy of events
// ingest acknowledged once, which the fold counts as duplicates, exactly
// as it must. Such a session is exact when the log holds every event
// ingest acknowledged for it, no event it did not acknowledge, each at
// least as many times as acknowledged, and the stored or archived
// snapshot is the fold of the log's records for it, in their order (for
// an archived one, of those up to one at or after its end). Each such
// session leaves suspects (the sessions stored or archived otherwise than
// the fold of what ingest acknowledged, with what differs), and the query
// service's answers are then checked for it as for a resent session
// (state and version; events and duplicates may exceed the acknowledged
// fold's); its change feed is not checked (a copy folded after the
// session was archived is delivered rejected). Any other session keeps
// its place in suspects, with what the log holds of it. It returns how
// many sessions had copies, all exact.
func (s *lossStack) logCopies(t *testing.T, rep loadgen.Report, suspects map[string]string, store *snapshot.Store,
	archived map[string]uint64) int {
	t.Helper()
	records := readTopicWithin(t, s.brokerAddr, lossTopic, 10*time.Minute)
	count := map[string]int{}
	for _, r := range records {
		count[string(r.Key)]++
	}
	logged := map[string][]fsm.Event{} // of the sessions with more records than acknowledged events
	for _, r := range records {
		id := string(r.Key)
		if count[id] <= len(rep.Written[id]) {
			continue
		}
		var e fsm.Event
		if err := kafka.DecodeEvent(r, &e); err != nil {
			if _, ok := rep.Written[id]; ok {
				suspects[id] += fmt.Sprintf("\n the log holds a record of it that does not decode at %d:%d: %v", r.Partition, r.Offset, err)
			}
			continue
		}
		e.Payload = slices.Clone(e.Payload)
		logged[id] = append(logged[id], e)
	}
	cleared := 0
	for id, events := range logged {
		written := rep.Written[id]
		if len(events) <= len(written) || rep.Resent[id] {
			continue // no copy, or a resent session's copies: judged as such
		}
		acked := map[fsm.EventID]int{}
		for _, e := range written {
			acked[e.ID]++
		}
		inLog := map[fsm.EventID]int{}
		for _, e := range events {
			inLog[e.ID]++
		}
		copies := len(acked) == len(inLog)
		for eid, n := range acked {
			copies = copies && inLog[eid] >= n
		}
		if !copies {
			suspects[id] += fmt.Sprintf("\n the log holds %d records of %d distinct events for it, ingest acknowledged %d of %d",
				len(events), len(inLog), len(written), len(acked))
			continue
		}
		if ref := loadgen.Expected(written); s.archive != nil && ref.State.Terminal() {
			v, _, problem := s.archivedExact(id, events, false)
			if problem != "" {
				suspects[id] += "\n and against the log's records: " + problem
				continue
			}
			archived[id] = v
		} else if ref.Exists() {
			sn, err := store.Get(context.Background(), id)
			if err != nil || sn == nil {
				suspects[id] += fmt.Sprintf("\n and read again: %v", err)
				continue
			}
			want := snapshot.Snapshot{Session: loadgen.Expected(events), Position: sn.Position, FirstOffset: sn.FirstOffset}
			if !bytes.Equal(sn.AppendBinary(nil), want.AppendBinary(nil)) {
				suspects[id] += "\n and otherwise than the fold of the log's records for it too"
				continue
			}
		}
		rep.Resent[id] = true
		s.archivedAt[id] = -1
		delete(suspects, id)
		cleared++
	}
	whereInLog(t, records, rep, suspects)
	s.inChangelog(t, suspects)
	return cleared
}

// inChangelog adds to each session left in suspects what the snapshot
// changelog holds of it, in order: each snapshot record's offset, the
// position and event count of its snapshot, the producer that wrote it
// and the partition's checkpoint record before it, then its archived
// records and the partition's last checkpoint. A restore keeps a
// session's snapshot of the highest position and folds from the last
// checkpoint: a snapshot that lacks an event below that checkpoint is
// what loses it.
func (s *lossStack) inChangelog(t *testing.T, suspects map[string]string) {
	t.Helper()
	if len(suspects) == 0 {
		return
	}
	lastCkpt := map[int32]string{}
	lines := map[string][]string{}
	partOf := map[string]int32{} // each suspect's changelog partition
	eachRecordWithin(t, s.brokerAddr, changelog.Topic(lossTopic), 10*time.Minute, func(r *kgo.Record) {
		c, err := changelog.DecodeRecord(r)
		if err != nil {
			return
		}
		at := fmt.Sprintf("%d:%d (producer %d epoch %d)", r.Partition, r.Offset, r.ProducerID, r.ProducerEpoch)
		switch c.Kind {
		case changelog.KindCheckpoint:
			lastCkpt[r.Partition] = fmt.Sprintf("checkpoint %d at %s", c.Checkpoint.Offset, at)
		case changelog.KindSnapshot:
			if _, ok := suspects[c.SessionID]; !ok {
				return
			}
			partOf[c.SessionID] = r.Partition
			var sn snapshot.Snapshot
			desc := "does not decode"
			if err := sn.UnmarshalBinary(c.Snapshot); err == nil {
				desc = fmt.Sprintf("v%d %s events %d", sn.Version, sn.State, sn.Counters.Events)
			}
			lines[c.SessionID] = append(lines[c.SessionID], fmt.Sprintf("snapshot at %s: position %s, %s, after %s",
				at, c.Position, desc, cmp.Or(lastCkpt[r.Partition], "no checkpoint")))
		case changelog.KindArchived:
			if _, ok := suspects[c.SessionID]; ok {
				partOf[c.SessionID] = r.Partition
				lines[c.SessionID] = append(lines[c.SessionID], fmt.Sprintf("archived at %s: position %s, after %s",
					at, c.Position, cmp.Or(lastCkpt[r.Partition], "no checkpoint")))
			}
		}
	})
	for id := range suspects {
		last := "no checkpoint"
		if p, ok := partOf[id]; ok {
			last = cmp.Or(lastCkpt[p], last)
		}
		suspects[id] += fmt.Sprintf("\n the changelog holds %d records of it:\n  %s\n  last: %s", len(lines[id]),
			strings.Join(lines[id], "\n  "), last)
	}
}

// whereInLog adds to each session left in suspects where the events log
// holds each event ingest acknowledged for it, and logs how many of them
// lack an acknowledged event in the log (a broker that lost it), have
// records on more than one partition (the fold sets a record off its
// key's partition aside), or hold every event where it belongs (the
// projector's fold went wrong): what tells a lost record from a wrong
// fold.
func whereInLog(t *testing.T, records []*kgo.Record, rep loadgen.Report, suspects map[string]string) {
	t.Helper()
	if len(suspects) == 0 {
		return
	}
	at := map[string]map[fsm.EventID][]string{}
	for _, r := range records {
		id := string(r.Key)
		if _, ok := suspects[id]; !ok {
			continue
		}
		var e fsm.Event
		if err := kafka.DecodeEvent(r, &e); err != nil {
			continue
		}
		if at[id] == nil {
			at[id] = map[fsm.EventID][]string{}
		}
		at[id][e.ID] = append(at[id][e.ID], fmt.Sprintf("%d:%d", r.Partition, r.Offset))
	}
	var lacking, spread, whole int
	for id := range suspects {
		var where []string
		missing := 0
		parts := map[string]bool{}
		for _, e := range rep.Written[id] {
			in := at[id][e.ID]
			if len(in) == 0 {
				missing++
				in = []string{"nowhere"}
			}
			for _, w := range in {
				if p, _, ok := strings.Cut(w, ":"); ok {
					parts[p] = true
				}
			}
			where = append(where, e.Type.String()+"@"+strings.Join(in, ","))
		}
		switch {
		case missing > 0:
			lacking++
		case len(parts) > 1:
			spread++
		default:
			whole++
		}
		suspects[id] += fmt.Sprintf("\n the log holds %d of the %d events ingest acknowledged for it (partitions %v): %s",
			len(rep.Written[id])-missing, len(rep.Written[id]), slices.Sorted(maps.Keys(parts)), strings.Join(where, " "))
	}
	t.Logf("of %d sessions stored otherwise than the fold, the events log lacks an acknowledged event of %d, holds the events of %d on more than one partition, and of %d every one on its partition",
		len(suspects), lacking, spread, whole)
}

// archivedExact reads session id's object from the archive and checks its
// snapshot against the fold of events, what ingest acknowledged for it:
// byte for byte equal to the fold of the events up to one at or after the
// session's end. Events folded after the session was archived are refused
// (after_terminal, or duplicates; docs/retention.md, "An id is used
// once"), and the object is not written again, so its counters may lack
// them; anything else differs. A session whose requests were resent
// (Kafka may hold copies ingest could not confirm) is checked by its
// state and version alone. It returns the archived version and how many
// of events the object holds (the first k), or what is wrong.
func (s *lossStack) archivedExact(id string, events []fsm.Event, resent bool) (version uint64, k int, problem string) {
	obj, err := s.archive.Get(context.Background(), id)
	if errors.Is(err, archive.ErrNotFound) {
		return 0, 0, "closed, not in Redis and not archived"
	}
	if err != nil {
		return 0, 0, "reading its object: " + err.Error()
	}
	got := obj.Snapshot
	var ref fsm.Session
	var r fsm.Reducer
	gotBytes := got.AppendBinary(nil)
	for i := range events {
		r.Apply(&ref, &events[i])
		if !ref.State.Terminal() {
			continue
		}
		if resent {
			if ref.State == got.State && ref.Version == got.Version {
				return got.Version, i + 1, ""
			}
			continue
		}
		want := snapshot.Snapshot{Session: ref, Position: got.Position, FirstOffset: got.FirstOffset}
		if bytes.Equal(gotBytes, want.AppendBinary(nil)) {
			return got.Version, i + 1, ""
		}
	}
	full := snapshot.Snapshot{Session: ref, Position: got.Position, FirstOffset: got.FirstOffset}
	gj, _ := got.MarshalJSON()
	wj, _ := full.MarshalJSON()
	return 0, 0, fmt.Sprintf("archived otherwise than the fold of any of its events from its end on\n got %s\nwant %s (all of them)", gj, wj)
}

// archivedAnswers reads each archived session from the query service,
// half as many at a time as it has slots for this caller
// (lossArchiveReads): a read's slot is given back as its answer is
// written, so the next read of the same goroutine may start before, and
// a 503 for no slot free, which the client retries after its Retry-After
// (1 s), stays rare. The service must answer each archived, at the
// version archived. It returns up to 3 examples of what is wrong.
func (s *lossStack) archivedAnswers(t *testing.T, archived map[string]uint64) []string {
	t.Helper()
	c, err := correx.New(correx.QueryURL(s.queryURL), correx.Retry(100, 20*time.Millisecond, 200*time.Millisecond),
		correx.WithoutTracing())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, lossArchiveReads/2)
	for id, version := range archived {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			v, err := c.Get(context.Background(), id)
			if err != nil || !v.Archived || v.Version != version {
				mu.Lock()
				if len(wrong) < 3 {
					wrong = append(wrong, fmt.Sprintf("query: %s archived at version %d answered %+v, %v", id, version, v, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return wrong
}

// archivedAll waits until the archive's sweeps have taken every closed
// session out of Redis: the snapshot keys left are those of the sessions
// the fold of what ingest acknowledged leaves open. The wait ends once
// the count has not moved for lossArchivedPatience, naming up to 20
// closed sessions left (closedLeft); verify then fails on them.
func (s *lossStack) archivedAll(t *testing.T, rep loadgen.Report) {
	t.Helper()
	open := 0
	for _, events := range rep.Written {
		if ref := loadgen.Expected(events); ref.Exists() && !ref.State.Terminal() {
			open++
		}
	}
	ok, seen := testwait.Progressing(lossArchivedPatience, func() (bool, string) {
		n := s.snapshotKeys(t)
		return n == open, fmt.Sprintf("%d snapshot keys in Redis, %d sessions open", n, open)
	})
	if !ok {
		t.Logf("no progress for %v waiting for every closed session archived: %s; left in Redis:\n%s",
			lossArchivedPatience, seen, strings.Join(s.closedLeft(t, rep, 20), "\n"))
	}
}

// closedLeft describes up to limit sessions still in Redis that the fold
// of what ingest acknowledged closes, for a sweep that left them: the
// stored snapshot, whether its partition's closed sessions, deadlines and
// tombstones hold it, and the partition's ownership epochs.
func (s *lossStack) closedLeft(t *testing.T, rep loadgen.Report, limit int) []string {
	t.Helper()
	ctx := context.Background()
	keys := redislayout.NewKeys("correx")
	store := s.store(t)
	var out []string
	iter := s.rdb.Scan(ctx, 0, "correx:{b*}:s:*", 1000).Iterator()
	for iter.Next(ctx) && len(out) < limit {
		_, id, _ := strings.Cut(iter.Val(), "}:s:")
		events, ok := rep.Written[id]
		if !ok {
			out = append(out, fmt.Sprintf("%s: a snapshot of a session ingest never acknowledged", id))
			continue
		}
		if ref := loadgen.Expected(events); !ref.State.Terminal() {
			continue
		}
		sn, err := store.Get(ctx, id)
		if err != nil || sn == nil {
			out = append(out, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		p := sn.Position.Partition
		due, armed := keys.Deadlines(lossTopic, p)
		closed := s.rdb.ZScore(ctx, keys.Closed(lossTopic, p), id)
		out = append(out, fmt.Sprintf("%s: stored %s v%d at %d/%d; closed entry %v (%v); armed %q, due %v; partition epoch %q, bucket epoch %q; tombstone %q",
			id, sn.State, sn.Version, p, sn.Position.Offset, closed.Val(), closed.Err(),
			s.rdb.HGet(ctx, armed, id).Val(), s.rdb.ZScore(ctx, due, id).Val(),
			s.rdb.Get(ctx, keys.Epoch(lossTopic, p)).Val(), s.rdb.HGet(ctx, keys.Epochs(redislayout.Bucket(id)), fmt.Sprint(p)).Val(),
			s.rdb.HGet(ctx, keys.Tombstones(id), id).Val()))
	}
	return out
}

// snapshotKeys counts the snapshot keys in Redis.
func (s *lossStack) snapshotKeys(t *testing.T) int {
	t.Helper()
	return countKeys(t, s.rdb, "correx:{b*}:s:*")
}
