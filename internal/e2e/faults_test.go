package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/systemkey"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The archive and the changelog under faults, with every service a
// process (docs/retention.md, "When something fails"): a projector that
// is stopped (SIGSTOP) while it owns partitions and continues after
// another took them over and archived their sessions, and an archive that
// refuses connections or hangs. Each is what a red team did to a release
// that lost or resurrected sessions; the in-process tests of the same
// faults (internal/projector, internal/archive, internal/query) failed
// before their fixes.

// faultStack is a broker, ingest, a query service and projectors as
// processes, over one redis-server.
type faultStack struct {
	bin       map[string]string
	broker    string
	rdb       *redis.Client
	env       map[string]string
	ingestURL string
	queryURL  string
	query     *process
	hc        *http.Client
}

func startFaultStack(t *testing.T, topic string, partitions int, extra ...string) *faultStack {
	t.Helper()
	s := &faultStack{bin: buildServices(t, "kafkabroker", "ingest", "projector", "query")}
	srv := redistest.Start(t)
	s.rdb = srv.Client(t)
	_, s.broker = startBroker(t, s.bin["kafkabroker"], map[string]string{"KFAKE_PARTITIONS": strconv.Itoa(partitions), "KFAKE_LOG_LEVEL": "warn"})
	s.env = map[string]string{
		"CORREX_KAFKA_BROKERS": s.broker, "CORREX_REDIS_URL": "redis://" + srv.Addr + "/0",
		"CORREX_PARTITIONS": strconv.Itoa(partitions), "CORREX_TOPIC": topic,
		"CORREX_AUTH_DISABLED": "true", "CORREX_RATE_LIMIT": "0", "OTEL_TRACES_EXPORTER": "none",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		s.env[extra[i]] = extra[i+1]
	}
	s.hc = apiCheck.Client(&http.Client{Timeout: 30 * time.Second})
	_, s.ingestURL = startHTTPService(t, "ingest", s.bin["ingest"], s.with())
	s.query, s.queryURL = startHTTPService(t, "query", s.bin["query"], s.with())
	waitHTTP(t, s.ingestURL+"/readyz", 60*time.Second)
	waitHTTP(t, s.queryURL+"/readyz", 60*time.Second)
	return s
}

// with is the stack's environment with extra key, value pairs.
func (s *faultStack) with(extra ...string) map[string]string {
	m := make(map[string]string, len(s.env)+len(extra)/2)
	for k, v := range s.env {
		m[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func (s *faultStack) projector(t *testing.T, extra ...string) (*process, string) {
	t.Helper()
	p, u := startHTTPService(t, "projector", s.bin["projector"], s.with(extra...))
	waitHTTP(t, u+"/readyz", 60*time.Second)
	return p, u
}

// send posts NDJSON lines to ingest, at most 1000 a request, and answers
// the last request's position.
func (s *faultStack) send(t *testing.T, lines []string) string {
	t.Helper()
	var pos string
	for len(lines) > 0 {
		n := min(len(lines), 1000)
		resp, err := s.hc.Post(s.ingestURL+"/v1/events", "application/x-ndjson", strings.NewReader(strings.Join(lines[:n], "\n")))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Position string `json:"position"`
		}
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &out) != nil {
			t.Fatalf("POST /v1/events: %d %s", resp.StatusCode, body)
		}
		pos, lines = out.Position, lines[n:]
	}
	return pos
}

func (s *faultStack) get(path string) (int, []byte, time.Duration) {
	began := time.Now()
	resp, err := s.hc.Get(s.queryURL + path)
	if err != nil {
		return 0, []byte(err.Error()), time.Since(began)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body, time.Since(began)
}

type faultSnap struct {
	State    string `json:"state"`
	Version  uint64 `json:"version"`
	Archived bool   `json:"archived"`
}

func (s *faultStack) read(path string) (int, faultSnap) {
	status, body, _ := s.get(path)
	var v faultSnap
	if status == http.StatusOK {
		_ = json.Unmarshal(body, &v)
	}
	return status, v
}

// await reads session id with minPosition pos (waiting up to 10 s each
// time) until ok holds of it, for at most d.
func (s *faultStack) await(t *testing.T, id, pos string, d time.Duration, ok func(faultSnap) bool) faultSnap {
	t.Helper()
	var v faultSnap
	testwait.UntilSeen(t, id+" as expected", d, func() (bool, string) {
		status, body, _ := s.get("/v1/sessions/" + id + "?minPosition=" + pos + "&wait=10s")
		v = faultSnap{}
		if status == http.StatusOK {
			_ = json.Unmarshal(body, &v)
		}
		return status == http.StatusOK && ok(v), fmt.Sprintf("%d %s", status, body)
	})
	return v
}

// redisKeys counts the keys of the read model matching pattern (under
// the default prefix "correx").
func (s *faultStack) redisKeys(t *testing.T, pattern string) int {
	t.Helper()
	return countKeys(t, s.rdb, pattern)
}

// countKeys counts the keys of rdb matching pattern (SCAN).
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	n := 0
	it := rdb.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for it.Next(context.Background()) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// metric reads the sum of a metric's samples on a service's /metrics.
func metric(t *testing.T, base, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// TestStalledOwnerAcrossProcesses: two projectors (group session timeout
// 6 s, closed sessions archived 2 s after they end into a file://
// archive); 3,000 sessions created, started and given three tool requests;
// one projector stopped (SIGSTOP) while their completions are folded; the
// other takes its partitions over, folds and archives every session; then
// the stopped one continues (SIGCONT). No session may come back into
// Redis: every one reads archived with its final version, Redis holds no
// snapshot, deadline or closed entry of any, and an event sent after the
// end is not folded. Before the ownership epochs (projstore's epoch.go),
// the continued projector wrote its stale snapshots back over the
// archived sessions (a red team found 61 and 94 of 8,000, live again,
// with a re-armed deadline).
func TestStalledOwnerAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes, and waits out a group session timeout")
	}
	t.Parallel() // mostly waits (a session timeout, archive sweeps): beside the others
	const topic, n = "stalled", 3000
	s := startFaultStack(t, topic, 4, "CORREX_ARCHIVE_URL", "file://"+t.TempDir())
	common := []string{"CORREX_SESSION_TIMEOUT", "6s", "CORREX_RETAIN_CLOSED", "2s", "OTEL_METRICS_EXPORTER", "none"}
	stalled, _ := s.projector(t, append(common, "CORREX_INSTANCE_ID", "stalled-1")...)
	_, otherURL := s.projector(t, append(common, "CORREX_INSTANCE_ID", "stalled-2")...)

	id := func(i int) string { return fmt.Sprintf("st-%04d", i) }
	var open []string
	for i := range n {
		open = append(open, fmt.Sprintf(`{"sessionId":%q,"type":"SessionCreated"}`, id(i)),
			fmt.Sprintf(`{"sessionId":%q,"type":"SessionStarted"}`, id(i)))
		for range 3 {
			open = append(open, fmt.Sprintf(`{"sessionId":%q,"type":"ToolRequested","payload":{"tool":"search"}}`, id(i)))
		}
	}
	pos := s.send(t, open)
	s.await(t, id(n-1), pos, 60*time.Second, func(v faultSnap) bool { return v.Version == 5 })
	// The completions in requests of 100, four at a time; the projector is
	// stopped once a third are accepted, while it folds and writes them.
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w * 100; i < n; i += 400 {
				var done []string
				for j := i; j < min(i+100, n); j++ {
					done = append(done, fmt.Sprintf(`{"sessionId":%q,"type":"SessionCompleted"}`, id(j)))
				}
				s.send(t, done)
				sent.Add(int64(len(done)))
			}
		})
	}
	testwait.Eventually(60*time.Second, func() bool { return sent.Load() >= n/3 })
	if err := stalled.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Cleanup(func() { _ = stalled.cmd.Process.Signal(syscall.SIGCONT) }) // so that it can be stopped

	keys := redislayout.NewKeys("correx")
	snapshots := "correx:{b*}:s:st-*"
	testwait.UntilSeen(t, "every session archived by the other projector", 120*time.Second, func() (bool, string) {
		left := s.redisKeys(t, snapshots)
		return left == 0, fmt.Sprintf("%d snapshots still in Redis", left)
	})
	for i := range n {
		if status, v := s.read("/v1/sessions/" + id(i)); status != 200 || !v.Archived || v.State != "COMPLETED" || v.Version != 6 {
			t.Fatalf("%s after the other projector archived it: %d %+v; want archived COMPLETED v6", id(i), status, v)
		}
	}

	// The stopped projector continues: whatever it held, it writes nothing.
	if err := stalled.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// It finds out it lost its partitions (its next write or heartbeat),
	// rejoins, and the group settles with both members.
	time.Sleep(3 * time.Second) // the scenario: what the continued process does on its own
	waitHTTP(t, otherURL+"/readyz", 60*time.Second)
	var late []string
	for i := range n {
		late = append(late, fmt.Sprintf(`{"sessionId":%q,"type":"ModelRequested","payload":{"model":"m"}}`, id(i)))
	}
	pos = s.send(t, late)
	// Folded (and rejected, after_terminal) once the read waiting for it
	// answers; it answers the archived session.
	s.await(t, id(n-1), pos, 60*time.Second, func(faultSnap) bool { return true })
	ghosts, wrong := 0, []string{}
	for i := range n {
		status, v := s.read("/v1/sessions/" + id(i))
		if status != 200 || !v.Archived || v.State != "COMPLETED" || v.Version != 6 {
			ghosts++
			if len(wrong) < 5 {
				wrong = append(wrong, fmt.Sprintf("%s: %d %+v", id(i), status, v))
			}
		}
	}
	if ghosts > 0 {
		t.Fatalf("%d of %d sessions are not archived COMPLETED v6 after the stopped projector continued, e.g. %v", ghosts, n, wrong)
	}
	if left := s.redisKeys(t, snapshots); left != 0 {
		t.Fatalf("%d snapshots of archived sessions back in Redis", left)
	}
	for p := range int32(4) {
		due, armed := keys.Deadlines(topic, p)
		for _, k := range []string{due, armed, keys.Closed(topic, p)} {
			var left int64
			var err error
			if k == armed {
				left, err = s.rdb.HLen(context.Background(), k).Result()
			} else {
				left, err = s.rdb.ZCard(context.Background(), k).Result()
			}
			if err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Fatalf("%s holds %d entries after every session was archived", k, left)
			}
		}
	}
	t.Logf("the stopped projector, once continued, was refused %d writes as superseded; its log (last 2 KiB):\n%s",
		strings.Count(stalled.output(), "a newer owner took"), tail(stalled.output(), 2<<10))
}

// TestArchiveOutageAcrossProcesses: the archive (versitygw, an S3 server)
// refuses connections from before the services start, then answers, then
// hangs (SIGSTOP), then answers again. Throughout, the projector and the
// query service start and stay ready (the archive listed as degraded),
// every event is folded, live sessions read at once, and a session Redis
// does not hold answers 503 at once, not 404; closed sessions wait in
// Redis, counted by the due gauge, and are archived once the archive
// answers. Before the archive was opened in the background
// (archive.Remote), the projector exited at once while S3 refused
// connections and never joined its group while S3 hung, the query service
// exited after 30 s, and a hung archive stalled every partition's sweep
// with the gauges at 0.
func TestArchiveOutageAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes, and waits out archive sweeps")
	}
	t.Parallel()                // mostly waits (a session timeout, archive sweeps): beside the others
	s3 := s3test.StartServer(t) // the services are given the credentials
	bucket := s3.Bucket(t, "correx-archive")
	s3.Kill()
	s := startFaultStack(t, "outage", 2, "CORREX_ARCHIVE_URL", bucket, "CORREX_ARCHIVE_TIMEOUT", "2s",
		"AWS_ACCESS_KEY_ID", s3test.AccessKey, "AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	began := time.Now()
	_, projURL := s.projector(t, "CORREX_RETAIN_CLOSED", "1s", "CORREX_INSTANCE_ID", "outage-1", "OTEL_METRICS_EXPORTER", "prometheus")
	t.Logf("the projector ready %v after it started, with the archive refusing connections", time.Since(began).Round(time.Millisecond))
	for name, base := range map[string]string{"query": s.queryURL, "projector": projURL} {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "degraded") || !strings.Contains(string(body), "archive") {
			t.Fatalf("%s /readyz with the archive down: %d %s; want 200 listing the archive as degraded", name, resp.StatusCode, body)
		}
	}

	closeSessions := func(prefix string, n int) string {
		var lines []string
		for i := range n {
			id := fmt.Sprintf("%s-%02d", prefix, i)
			lines = append(lines, fmt.Sprintf(`{"sessionId":%q,"type":"SessionCreated"}`, id),
				fmt.Sprintf(`{"sessionId":%q,"type":"SessionStarted"}`, id), fmt.Sprintf(`{"sessionId":%q,"type":"SessionCompleted"}`, id))
		}
		return s.send(t, lines)
	}
	// outage checks what an outage must leave as it is: events folded,
	// live reads at once, a miss answered 503 at once, closed sessions
	// kept in Redis and counted due.
	outage := func(what, prefix string) {
		t.Helper()
		pos := s.send(t, []string{fmt.Sprintf(`{"sessionId":"live-%s","type":"SessionCreated"}`, prefix),
			fmt.Sprintf(`{"sessionId":"live-%s","type":"SessionStarted"}`, prefix)})
		s.await(t, "live-"+prefix, pos, 30*time.Second, func(v faultSnap) bool { return v.Version == 2 })
		pos = closeSessions(prefix, 20)
		s.await(t, prefix+"-19", pos, 30*time.Second, func(v faultSnap) bool { return v.State == "COMPLETED" && !v.Archived })
		testwait.UntilSeen(t, what+": the closed sessions counted due", 60*time.Second, func() (bool, string) {
			due, _ := metric(t, projURL, "correx_projector_archive_due")
			return due >= 20, fmt.Sprintf("correx_projector_archive_due %v", due)
		})
		if up, ok := metric(t, projURL, "correx_projector_archive_reachable_ratio"); !ok || up != 0 {
			t.Fatalf("%s: correx_projector_archive_reachable_ratio %v (exported %v); want 0", what, up, ok)
		}
		for range 3 {
			status, body, took := s.get("/v1/sessions/never-created")
			if status != http.StatusServiceUnavailable || took > time.Second {
				t.Fatalf("%s: a session Redis does not hold: %d after %v (%s); want 503 within 1s", what, status, took, body)
			}
			if status, v := s.read("/v1/sessions/" + prefix + "-00"); status != 200 || v.State != "COMPLETED" || v.Archived {
				t.Fatalf("%s: a closed session not yet archived: %d %+v; want it read from Redis", what, status, v)
			}
		}
		for name, base := range map[string]string{"query": s.queryURL, "projector": projURL, "ingest": s.ingestURL} {
			if st := getStatus(base + "/readyz"); st != 200 {
				t.Fatalf("%s: %s /readyz %d during the archive's outage; want 200", what, name, st)
			}
		}
	}
	archived := func(what, prefix string) {
		t.Helper()
		testwait.UntilSeen(t, what+": every closed session archived", 90*time.Second, func() (bool, string) {
			for i := range 20 {
				id := fmt.Sprintf("%s-%02d", prefix, i)
				if status, v := s.read("/v1/sessions/" + id); status != 200 || !v.Archived || v.Version != 3 {
					return false, fmt.Sprintf("%s: %d %+v", id, status, v)
				}
			}
			return true, ""
		})
	}

	outage("the archive refusing connections", "refused")
	s3.Restart()
	archived("the archive back", "refused")

	s3.Pause()
	t.Cleanup(s3.Resume)
	outage("the archive hung", "hung")
	if fails, _ := metric(t, projURL, "correx_projector_archive_failures_total"); fails < 1 {
		t.Fatalf("correx_projector_archive_failures_total %v after rounds that ran into the hung archive; want at least 1", fails)
	}
	s3.Resume()
	archived("the archive answering again", "hung")
	if status, v := s.read("/v1/sessions/live-hung"); status != 200 || v.State != "ACTIVE" || v.Archived {
		t.Fatalf("a live session after the outages: %d %+v", status, v)
	}
}

// TestChangelogFaultsAcrossProcesses: with the events log trimmed
// (DeleteRecords, as a retention does) past the creation of every live
// session, Redis is emptied under a stopped projector after one bad record
// was produced to the snapshot changelog: (a) one without the changelog's
// header, (b) a snapshot of a live session positioned far beyond the
// log's end, signed with the system's key, (c) an archived record for a
// live session without the system's MAC. The projector that starts again
// must not fold the partition from the log's start (which loses every
// live session whose creation left the log, their later events
// dead-lettered unknown_session): it stalls the partition, not ready and
// alerting, and writes nothing; once the session's authentic record
// follows, the restore is exact. Before, (a) was logged and folded from the
// log's start (a red team lost 223 live sessions), and (b) and (c) were
// restored as they were (a live session erased, a forged one served).
func TestChangelogFaultsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	t.Parallel() // mostly waits for processes to start: beside the others
	const topic, n = "clog", 40
	s := startFaultStack(t, topic, 1)
	projEnv := []string{"CORREX_INSTANCE_ID", "clog-1", "OTEL_METRICS_EXPORTER", "prometheus"}
	proj, _ := s.projector(t, projEnv...)
	id := func(i int) string { return fmt.Sprintf("cl-%02d", i) }
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf(`{"sessionId":%q,"type":"SessionCreated","payload":{"goal":"g%d"}}`, id(i), i),
			fmt.Sprintf(`{"sessionId":%q,"type":"SessionStarted"}`, id(i)))
	}
	pos := s.send(t, lines)
	s.await(t, id(n-1), pos, 30*time.Second, func(v faultSnap) bool { return v.Version == 2 })
	want := map[string][]byte{}
	for i := range n {
		status, body, _ := s.get("/v1/sessions/" + id(i))
		if status != 200 {
			t.Fatalf("%s: %d %s", id(i), status, body)
		}
		want[id(i)] = body
	}
	stop := func(p *process) {
		t.Helper()
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // flushes, and produces the changelog's records
		<-p.done
	}
	stop(proj)

	cl := otherProducer(t, s.broker)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteRecords(ctx, kadm.Offsets(ends.Offsets())); err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != 2*n {
		t.Fatalf("the events log starts at %d after DeleteRecords, want %d", o.Offset, 2*n)
	}
	cltopic := changelog.Topic(topic)
	const victim = "cl-07"
	var authentic *kgo.Record
	for _, r := range readTopic(t, s.broker, cltopic) {
		if string(r.Key) == victim {
			authentic = r
		}
	}
	if authentic == nil {
		t.Fatalf("no changelog record of %s", victim)
	}
	keys, err := systemkey.Ensure(ctx, adm, cl, systemkey.Source{Kafka: kafka.Config{Brokers: []string{s.broker}}, Events: topic})
	if err != nil || keys == nil {
		t.Fatalf("the system key: %v", err)
	}
	beyond := append([]byte{}, authentic.Value...)
	forged := changelog.SnapshotRecord(cltopic, 0, victim, beyond)
	var sn snapshot.Snapshot
	if err := snapshot.Decode(forged.Value, &sn); err != nil {
		t.Fatalf("the changelog's value of %s: %v", victim, err)
	}
	sn.Position.Offset, sn.Version = 999_999_999, 99
	forged.Value = sn.AppendBinary(nil)
	keys.Sign(forged)
	sn.Position.Offset = 2*n - 1

	for _, tc := range []struct {
		name string
		bad  *kgo.Record
	}{
		{"a record without the changelog's header", &kgo.Record{Topic: cltopic, Partition: 0, Key: []byte(victim), Value: authentic.Value}},
		{"a signed snapshot positioned beyond the log's end", forged},
		{"an archived record without the system's MAC", changelog.ArchivedRecord(cltopic, victim, sn.Position)},
	} {
		if err := cl.ProduceSync(ctx, tc.bad).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		p, u := startHTTPService(t, "projector", s.bin["projector"], s.with(projEnv...))
		testwait.UntilSeen(t, tc.name+": the partition stalled", 60*time.Second, func() (bool, string) {
			resp, err := http.Get(u + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			stalled, _ := metric(t, u, "correx_projector_stalled")
			return resp.StatusCode == 503 && strings.Contains(string(body), "cannot be used") && stalled == 1,
				fmt.Sprintf("/readyz %d %s; correx_projector_stalled %v", resp.StatusCode, body, stalled)
		})
		if left := s.redisKeys(t, "correx:{b*}:s:*"); left != 0 {
			t.Fatalf("%s: %d snapshots written while stalled; want none", tc.name, left)
		}
		stop(p)
		// The session's authentic record follows, as its next flush would
		// write it: the restore is exact.
		again := &kgo.Record{Topic: cltopic, Partition: 0, Key: authentic.Key, Value: authentic.Value, Headers: authentic.Headers}
		if err := cl.ProduceSync(ctx, again).FirstErr(); err != nil {
			t.Fatal(err)
		}
		p, _ = s.projector(t, projEnv...)
		ready := time.Now()
		testwait.UntilSeen(t, tc.name+", then the authentic record: every session restored", 30*time.Second, func() (bool, string) {
			for i := range n {
				status, body, _ := s.get("/v1/sessions/" + id(i))
				if status != 200 || string(body) != string(want[id(i)]) {
					return false, fmt.Sprintf("%s reads %d %s; want %s", id(i), status, body, want[id(i)])
				}
			}
			return true, ""
		})
		t.Logf("%s, then the authentic record: every session restored exactly %v after the projector's /readyz answered 200",
			tc.name, time.Since(ready).Round(time.Millisecond))
		stop(p)
	}
	for _, r := range readTopic(t, s.broker, kafka.DLQTopic(topic)) {
		t.Fatalf("a record dead-lettered: %s %v", r.Key, r.Headers)
	}
}
