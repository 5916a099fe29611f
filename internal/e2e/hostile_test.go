package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Peak resident memory each service may reach in TestHostileInputs. The
// inputs below once took the query service to 2 GB; these bounds leave room
// for the runtime and the caches at their defaults, not for a copy of
// what a hostile input asks for.
var peakRSSLimit = map[string]int64{"ingest": 128 << 20, "projector": 256 << 20, "query": 128 << 20}

// TestHostileInputs runs the pipeline as separate processes (the kafkabroker,
// ingest, projector and query binaries, and a redis-server), so that each
// service's peak RSS is its own, and sends valid traffic while it sends the
// inputs that used to corrupt data or stop a service:
//
//   - valid NDJSON bodies over 64 KiB with lines of uneven length, CRLF and
//     blank lines (they were corrupted);
//   - goals and reasons over the bounds through ingest (400), and 60 KiB
//     goals of '<' from another producer (the fold cuts them; listings of
//     them stay small);
//   - an 8 KiB baggage header on a 1000-event request (it was copied into
//     every record);
//   - a 1,020,000-byte record and a record with a 300 KB key written to the
//     topic by another producer (the projector stopped for every tenant);
//   - a record on a partition other than its key's (its session froze);
//   - one token holding every read that may wait (other tenants got 503);
//   - Redis stopped with SIGSTOP for a while (reads hung for 20 s).
//
// At the end every valid session must be projected in full, every process
// must still run and be ready, and each service's peak RSS must stay under
// peakRSSLimit. The figures are logged.
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	bin := buildServices(t, "kafkabroker", "ingest", "projector", "query")
	redisSrv := redistest.Start(t)
	sec := securitytest.Write(t)
	tok := sec.Tokens

	_, brokerAddr := startBroker(t, bin["kafkabroker"], map[string]string{"KFAKE_PARTITIONS": "6", "KFAKE_LOG_LEVEL": "warn"})

	const topic = "correx.session-events"
	common := map[string]string{
		"CORREX_KAFKA_BROKERS":    brokerAddr,
		"CORREX_REDIS_URL":        redisSrv.URL(),
		"CORREX_PARTITIONS":       "6",
		"CORREX_TOPIC":            topic,
		"CORREX_AUTH_TOKENS_FILE": sec.Env["CORREX_AUTH_TOKENS_FILE"],
		"CORREX_RATE_LIMIT":       "0",
		"OTEL_TRACES_EXPORTER":    "none",
		"OTEL_METRICS_EXPORTER":   "none",
	}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range common {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	ingestProc, ingestURL := startHTTPService(t, "ingest", bin["ingest"], with(nil))
	projProc, projURL := startHTTPService(t, "projector", bin["projector"], with(map[string]string{
		"CORREX_FLUSH_INTERVAL": "50ms", "CORREX_INSTANCE_ID": "hostile-1"}))
	queryProc, queryURL := startHTTPService(t, "query", bin["query"], with(nil))
	services := map[string]*process{"ingest": ingestProc, "projector": projProc, "query": queryProc}
	for _, base := range []string{ingestURL, queryURL, projURL} {
		waitHTTP(t, base+"/readyz", 60*time.Second)
	}
	c := client{t: t}
	// Warm up: the topic exists and the projector folds.
	if a := c.do(http.MethodPost, ingestURL+"/v1/events", tok["admin"], "application/json", []byte(event("warm:1", "SessionCreated"))); a.status != 202 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	waitFolded(t, c, queryURL, tok["admin"], "warm:1")

	other := otherProducer(t, brokerAddr)
	var wg sync.WaitGroup
	run := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}

	// Valid traffic: NDJSON bodies over 64 KiB, uneven lines.
	valid := &ndjsonTraffic{rng: rand.New(rand.NewPCG(1, 2))}
	run("valid traffic", func() error { return valid.run(ingestURL, tok["acme"], 12, 40) })

	// Over-long text through ingest: 400 naming the field.
	run("long goal", func() error {
		body := fmt.Sprintf(`{"sessionId":"acme:long","type":"SessionCreated","payload":{"goal":%q}}`, strings.Repeat("<", 5000))
		a := c.do(http.MethodPost, ingestURL+"/v1/events", tok["acme"], "application/json", []byte(body))
		if a.status != 400 || !bytes.Contains(a.body, []byte("payload.goal")) {
			return fmt.Errorf("a 5000-byte goal: %d %s", a.status, a.body)
		}
		return nil
	})

	// Baggage: a 1000-event request with an 8 KiB baggage header.
	run("baggage", func() error {
		var lines []string
		for i := range 1000 {
			lines = append(lines, event(fmt.Sprintf("bag:%d", i), "SessionCreated"))
		}
		req, _ := http.NewRequest(http.MethodPost, ingestURL+"/v1/events", strings.NewReader(strings.Join(lines, "\n")))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Authorization", "Bearer "+tok["admin"])
		req.Header.Set("Baggage", "k="+strings.Repeat("v", 8<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 202 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return nil
	})

	// Another producer: oversized records, a record on the wrong partition,
	// and sessions with 60 KiB goals (under the 64 KiB payload limit).
	run("other producer", func() error {
		ctx := context.Background()
		bigKey := bytes.Repeat([]byte("k"), 300_000)
		recs := []*kgo.Record{
			{Topic: topic, Key: []byte("acme:huge-value"), Value: bytes.Repeat([]byte("x"), 1_020_000), Partition: keyPartition("acme:huge-value", 6)},
			{Topic: topic, Key: bigKey, Value: []byte(`{}`), Partition: keyPartition(string(bigKey), 6)},
		}
		for i := range 100 {
			id := fmt.Sprintf("big:%03d", i)
			v := fmt.Sprintf(`{"v":1,"eventId":"%s","sessionId":%q,"type":"SessionCreated","occurredAt":"2026-01-02T03:04:05Z","payload":{"goal":%q}}`,
				uuidFor(i), id, strings.Repeat("<", 60<<10))
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v), Partition: keyPartition(id, 6)})
		}
		if err := other.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("producing: %w", err)
		}
		return nil
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// A record on the wrong partition for a session that then goes on on
	// its own partition: the later events must fold.
	wrongPartition(t, c, other, ingestURL, queryURL, tok["acme"], topic)

	// One token holds every read that may wait; another tenant's wait
	// still succeeds.
	waitSlots(t, c, ingestURL, queryURL, tok)

	// Listings over the 60 KiB goals stay small.
	for _, id := range []string{"big:000", "big:099"} {
		waitFolded(t, c, queryURL, tok["admin"], id)
	}
	a := c.do(http.MethodGet, queryURL+"/v1/sessions?limit=1000", tok["admin"], "", nil)
	if a.status != 200 {
		t.Fatalf("listing: %d %s", a.status, a.body)
	}
	t.Logf("a listing of up to 1000 sessions (100 with 60 KiB goals from another producer) is %d bytes", len(a.body))
	if len(a.body) > 8<<20 {
		t.Errorf("a listing page is %d bytes", len(a.body))
	}
	var one struct {
		Goal string `json:"goal"`
	}
	if b := c.do(http.MethodGet, queryURL+"/v1/sessions/big:000", tok["admin"], "", nil); b.status != 200 || json.Unmarshal(b.body, &one) != nil ||
		len(one.Goal) > 4096 || !strings.HasPrefix(one.Goal, "<<<<") {
		t.Errorf("a 60 KiB goal from another producer: %d, kept %d bytes", b.status, len(one.Goal))
	}

	// Redis hangs: reads answer 503 in time, and everything recovers.
	hungRedis(t, redisSrv, queryURL, tok["admin"])

	// The valid traffic is projected in full.
	valid.verify(t, c, queryURL, tok["acme"])
	records := readTopic(t, brokerAddr, topic)
	var bigHeaders int
	for _, r := range records {
		n := 0
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
		bigHeaders = max(bigHeaders, n)
	}
	t.Logf("largest record headers on the topic: %d bytes", bigHeaders)
	if bigHeaders > 2<<10 {
		t.Errorf("a record carries %d bytes of headers", bigHeaders)
	}
	reasons := map[string]int{}
	for _, r := range readTopic(t, brokerAddr, kafka.DLQTopic(topic)) {
		for _, h := range r.Headers {
			if h.Key == kafka.HeaderDLQReason {
				reasons[string(h.Value)]++
			}
		}
		if len(r.Key)+len(r.Value) > 256<<10 {
			t.Errorf("a dead letter of %d bytes", len(r.Key)+len(r.Value))
		}
	}
	t.Logf("dead letters by reason: %v", reasons)
	if reasons["wrong_partition"] == 0 || reasons["undecodable"]+reasons["invalid_event"]+reasons["key_mismatch"] < 2 {
		t.Errorf("dead letters by reason: %v; want the wrong partition and both oversized records", reasons)
	}

	for _, base := range []string{ingestURL, queryURL, projURL} {
		waitHTTP(t, base+"/readyz", 30*time.Second)
	}
	for name, p := range services {
		if !p.running() {
			t.Errorf("%s exited:\n%s", name, p.output())
			continue
		}
		peak := p.peakRSS(t)
		t.Logf("%s: peak RSS %.1f MiB", name, float64(peak)/(1<<20))
		if peak > peakRSSLimit[name] {
			t.Errorf("%s: peak RSS %d bytes, over %d", name, peak, peakRSSLimit[name])
		}
	}
}

// ndjsonTraffic sends sessions through their lifecycle in NDJSON bodies of
// several sessions each, over 64 KiB, with lines of uneven length, CRLF line
// ends and blank lines, and remembers where each session's last event went.
type ndjsonTraffic struct {
	rng      *rand.Rand
	sessions []string
	last     map[string]string // session -> "partition:offset" of its last event
	tools    int
}

func (v *ndjsonTraffic) run(ingestURL, token string, bodies, perBody int) error {
	v.last = map[string]string{}
	v.tools = 20
	hc := apiCheck.Client(&http.Client{Timeout: 30 * time.Second})
	defer hc.CloseIdleConnections()
	for b := range bodies {
		var ids []string
		for i := range perBody {
			id := fmt.Sprintf("acme:nd-%02d-%03d", b, i)
			ids = append(ids, id)
		}
		var buf bytes.Buffer
		var order []string // session of each line, in order
		line := func(id, typ, goal string) {
			pad := strings.Repeat("p", v.rng.IntN(200))
			fmt.Fprintf(&buf, `{"sessionId":%q,"type":%q,"payload":{%s"pad":%q}}`, id, typ, goal, pad)
			switch v.rng.IntN(4) {
			case 0:
				buf.WriteString("\r\n")
			case 1:
				buf.WriteString("\n\n")
			default:
				buf.WriteString("\n")
			}
			order = append(order, id)
		}
		for _, id := range ids {
			line(id, "SessionCreated", `"goal":"g",`)
			line(id, "SessionStarted", "")
		}
		for range v.tools {
			for _, id := range ids {
				line(id, "ToolRequested", "")
			}
		}
		for _, id := range ids {
			line(id, "SessionCompleted", "")
		}
		body := bytes.TrimRight(buf.Bytes(), "\r\n") // no final newline
		if len(body) <= 64<<10 {
			return fmt.Errorf("body of %d bytes; the traffic is meant to be over 64 KiB", len(body))
		}
		req, _ := http.NewRequest(http.MethodPost, ingestURL+"/v1/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			return fmt.Errorf("%d %s", resp.StatusCode, rb)
		}
		var r struct {
			Accepted []struct {
				Partition int32 `json:"partition"`
				Offset    int64 `json:"offset"`
			} `json:"accepted"`
		}
		if err := json.Unmarshal(rb, &r); err != nil || len(r.Accepted) != len(order) {
			return fmt.Errorf("%d accepted of %d (%v)", len(r.Accepted), len(order), err)
		}
		for i, a := range r.Accepted {
			v.last[order[i]] = fmt.Sprintf("%d:%d", a.Partition, a.Offset)
		}
		v.sessions = append(v.sessions, ids...)
	}
	return nil
}

func (v *ndjsonTraffic) verify(t *testing.T, c client, queryURL, token string) {
	t.Helper()
	for _, id := range v.sessions {
		a := c.do(http.MethodGet, queryURL+"/v1/sessions/"+id+"?wait=10s&minPosition="+v.last[id], token, "", nil)
		var s struct {
			State    string `json:"state"`
			Version  int    `json:"version"`
			Counters struct {
				Events    int `json:"events"`
				ToolCalls int `json:"toolCalls"`
			} `json:"counters"`
		}
		want := 3 + v.tools
		if a.status != 200 || json.Unmarshal(a.body, &s) != nil || s.State != "COMPLETED" || s.Version != want ||
			s.Counters.Events != want || s.Counters.ToolCalls != v.tools {
			t.Fatalf("%s: %d %.300s", id, a.status, a.body)
		}
	}
	t.Logf("%d valid sessions sent in NDJSON bodies over 64 KiB, each projected exactly", len(v.sessions))
}

// wrongPartition writes a session's event by hand to a partition that is
// not its key's, then sends the session's events through ingest: they fold.
func wrongPartition(t *testing.T, c client, other *kgo.Client, ingestURL, queryURL, token, topic string) {
	t.Helper()
	id := "acme:wp1"
	right := keyPartition(id, 6)
	wrong := (right + 1) % 6
	v := fmt.Sprintf(`{"v":1,"eventId":"%s","sessionId":%q,"type":"SessionCreated","occurredAt":"2026-01-02T03:04:05Z","payload":{}}`, uuidFor(100000), id)
	if err := other.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: wrong, Key: []byte(id), Value: []byte(v)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	a := c.do(http.MethodPost, ingestURL+"/v1/events", token, "application/json",
		batch(event(id, "SessionCreated"), event(id, "SessionStarted"), event(id, "SessionCompleted")))
	if a.status != 202 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var r struct {
		Position string `json:"position"`
	}
	_ = json.Unmarshal(a.body, &r)
	b := c.do(http.MethodGet, queryURL+"/v1/sessions/"+id+"?wait=10s&minPosition="+r.Position, token, "", nil)
	var s struct {
		State   string `json:"state"`
		Version int    `json:"version"`
	}
	if b.status != 200 || json.Unmarshal(b.body, &s) != nil || s.State != "COMPLETED" || s.Version != 3 {
		t.Fatalf("a session after a record of it on partition %d (its own is %d): %d %s", wrong, right, b.status, b.body)
	}
}

// waitSlots fills the reads that may wait with one token and checks that
// another tenant's wait is still served, and that a partition the topic
// does not have is refused.
func waitSlots(t *testing.T, c client, ingestURL, queryURL string, tok map[string]string) {
	t.Helper()
	if a := c.do(http.MethodGet, queryURL+"/v1/sessions/warm:1?minPosition=999:0&wait=1s", tok["reader"], "", nil); a.status != 400 {
		t.Errorf("minPosition on partition 999 of a 6-partition topic: %d %s", a.status, a.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var flood sync.WaitGroup
	hc := &http.Client{Transport: apiCheck.Transport(&http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 300})}
	defer hc.CloseIdleConnections()
	for range 300 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, queryURL+"/v1/sessions/warm:1?minPosition=0:99999999&wait=10s", nil)
			req.Header.Set("Authorization", "Bearer "+tok["reader"])
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	// The flood holds the reader's share of the waiting reads once the
	// reader's next read is refused at once.
	testwait.Until(t, "the flood holds the reader's waiting reads", 30*time.Second, func() bool {
		return c.do(http.MethodGet, queryURL+"/v1/sessions/warm:1?minPosition=0:99999999", tok["reader"], "", nil).status == 503
	})
	a := c.do(http.MethodPost, ingestURL+"/v1/events", tok["acme"], "application/json", []byte(event("acme:fair", "SessionCreated")))
	if a.status != 202 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	var r struct {
		Position string `json:"position"`
	}
	_ = json.Unmarshal(a.body, &r)
	b := c.do(http.MethodGet, queryURL+"/v1/sessions/acme:fair?wait=5s&minPosition="+r.Position, tok["acme"], "", nil)
	if b.status != 200 {
		t.Errorf("another tenant's wait while one token holds the waits: %d %s", b.status, b.body)
	}
	cancel()
	flood.Wait()
}

// hungRedis stops redis-server with SIGSTOP: a read answers 503 with
// Retry-After in time; after SIGCONT reads answer again.
func hungRedis(t *testing.T, srv *redistest.Server, queryURL, token string) {
	t.Helper()
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = srv.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	hc := apiCheck.Client(&http.Client{Timeout: 30 * time.Second})
	req, _ := http.NewRequest(http.MethodGet, queryURL+"/v1/sessions/warm:1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	began := time.Now()
	resp, err := hc.Do(req)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("a read with Redis stopped answered %d in %v", resp.StatusCode, took.Round(time.Millisecond))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || took > 5*time.Second {
		t.Errorf("a read with Redis stopped: %d (Retry-After %q) after %v; want 503 with Retry-After within 5s",
			resp.StatusCode, resp.Header.Get("Retry-After"), took)
	}
	time.Sleep(time.Second) // the scenario: Redis stays stopped a while, and the projector keeps trying meanwhile
	resume()
	waitHTTP(t, queryURL+"/readyz", 30*time.Second)
}

// process is a service binary running for a test.
type process struct {
	cmd  *exec.Cmd
	out  *lockedLog
	done chan struct{}
}

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *process) output() string { return p.out.String() }

// peakRSS reads the process's peak resident set (VmHWM) from /proc.
func (p *process) peakRSS(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

func startService(t testing.TB, name, path string, env map[string]string) *process {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{cmd: cmd, out: newLockedLog(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output (last 4 KiB):\n%s", name, tail(p.output(), 4<<10))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// logAddr waits up to d for the process to log a line with msg (as the
// services' text log spells it) and answers that line's key=value for key:
// the address a process that was told to listen on :0 got, as it reports
// it ("listening" addr=, "broker ready" advertised=).
func (p *process) logAddr(t testing.TB, msg, key string, d time.Duration) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)msg="?` + regexp.QuoteMeta(msg) + `"?\s.*\b` + regexp.QuoteMeta(key) + `=(\S+)`)
	var addr string
	testwait.Eventually(d, func() bool {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			addr = m[1]
			return true
		}
		return !p.running()
	})
	if addr == "" {
		t.Fatalf("no %s line with %s=:\n%s", msg, key, p.output())
	}
	return addr
}

// startBroker starts the kafkabroker on a port of its choosing and
// answers the address it advertises.
func startBroker(t testing.TB, path string, env map[string]string) (*process, string) {
	t.Helper()
	env["KFAKE_LISTEN_ADDR"] = "127.0.0.1:0"
	p := startService(t, "kafkabroker", path, env)
	return p, p.logAddr(t, "broker ready", "advertised", 30*time.Second)
}

// startHTTPService starts a service listening on a port of its choosing
// (CORREX_HTTP_ADDR 127.0.0.1:0) and answers its base URL, as it reports
// it in its "listening" line.
func startHTTPService(t testing.TB, name, path string, env map[string]string) (*process, string) {
	t.Helper()
	env["CORREX_HTTP_ADDR"] = "127.0.0.1:0"
	p := startService(t, name, path, env)
	return p, "http://" + p.logAddr(t, "listening", "addr", 60*time.Second)
}

func waitHTTP(t testing.TB, u string, d time.Duration) {
	t.Helper()
	hc := apiCheck.Client(&http.Client{Timeout: 5 * time.Second})
	testwait.UntilSeen(t, u+" answering 200", d, func() (bool, string) {
		resp, err := hc.Get(u)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}

// otherProducer is a Kafka producer that is not ingest: it writes what it
// is given, where it is told.
func otherProducer(t *testing.T, broker string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// keyPartition is the partition Kafka's default partitioner picks for key.
func keyPartition(key string, partitions int) int32 {
	return int32(kafka.Partitioner().ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, partitions))
}

func readTopic(t *testing.T, broker, topic string) []*kgo.Record {
	t.Helper()
	return readTopicWithin(t, broker, topic, 20*time.Second)
}

// readTopicWithin is readTopic with a bound of its own (a long run's
// events topic holds millions of records).
func readTopicWithin(t *testing.T, broker, topic string, within time.Duration) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	eachRecordWithin(t, broker, topic, within, func(r *kgo.Record) { out = append(out, r) })
	return out
}

// eachRecordWithin calls fn with each record of topic, from its start to
// its end as it was when the read began, in order on each partition,
// within the given time; fn keeps what it needs of a record (a long run's
// changelog holds gigabytes).
func eachRecordWithin(t *testing.T, broker, topic string, within time.Duration, fn func(r *kgo.Record)) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (still waiting for %v)", topic, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			fn(r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
}

func uuidFor(i int) string { return fmt.Sprintf("0193a000-0000-7000-8000-%012d", i) }
