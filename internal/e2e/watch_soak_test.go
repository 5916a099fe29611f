package e2e_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Watch soak figures: the change feed TestWatchSoak builds and the peak
// resident memory of the query process while 64 resumed watches read it.
// The bound is what docs/security.md quotes ("Watches and their memory").
const (
	soakFeedChanges = 100_000
	soakWatches     = 64
	// watchSoakGrowth bounds how far the query process's peak RSS may
	// rise above its RSS right before the watches. Idle, it holds 30-60
	// MiB (more on a busy machine, whose garbage collector runs late);
	// the catch-ups add at most a few MiB each, and at most 4 run at
	// once: 52-66 MiB of growth measured. A bound on the growth rather
	// than on the peak leaves the machine's load out of it; before the
	// catch-ups were bounded, 16 such watches grew it by 2.8 GiB.
	watchSoakGrowth = 96 << 20
)

// TestWatchSoak opens 64 resumed watches at once from four tenants against
// a change feed of 100,000 changes: 48 with cursors the service issued at
// the feed's start (each must read the whole feed to find its changes) and
// 16 with forged cursors (the clear first format at offset 0, and random
// bytes of a cursor's length). The query service runs as its own process
// (and the broker too), so that its resident memory is its own: sampled
// every 10 ms, its peak must stay within watchSoakGrowth of its resident
// memory before the watches while every valid
// watch delivers exactly its changes (a tenant's, or the PAUSED ones of
// the busy tenant) and every forged one is refused.
func TestWatchSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	bin := buildServices(t, "kafkabroker", "query")
	redisSrv := redistest.Start(t)
	tenants := []string{"busy", "t1", "t2", "t3"}
	tok := map[string]string{}
	var lines []string
	for _, name := range tenants {
		secret, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tok[name] = secret
		lines = append(lines, auth.HashToken(secret)+" sessions:read prefix="+name+": name="+name)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	const topic, parts = "correx.session-events", 6
	_, brokerAddr := startBroker(t, bin["kafkabroker"], map[string]string{"KFAKE_PARTITIONS": strconv.Itoa(parts), "KFAKE_LOG_LEVEL": "warn"})
	prod := otherProducer(t, brokerAddr)
	ctx := context.Background()
	for _, tp := range []string{topic, feed.Topic(topic)} {
		if _, err := kadm.NewClient(prod).CreateTopic(ctx, parts, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	query, queryURL := startHTTPService(t, "query", bin["query"], map[string]string{
		"CORREX_KAFKA_BROKERS": brokerAddr,
		"CORREX_REDIS_URL":     redisSrv.URL(), "CORREX_TOPIC": topic, "CORREX_AUTH_TOKENS_FILE": tokens,
		"CORREX_RATE_LIMIT": "0", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"})
	waitHTTP(t, queryURL+"/readyz", 60*time.Second)

	seq := 0
	change := func(tenant string, i int, to string) *kgo.Record {
		seq++
		id := fmt.Sprintf("%s:s-%d", tenant, i%500)
		p := keyPartition(id, parts)
		c := feed.Change{SessionID: id, Version: uint64(seq), Position: feed.Position{Partition: p, Offset: int64(seq)},
			EventID: fmt.Sprintf("%s-%d", tenant, i), Type: "SessionStarted", OccurredAt: time.Unix(1_800_000_000, 0).UTC(),
			Outcome: feed.Applied, From: "CREATED", To: to}
		return &kgo.Record{Topic: feed.Topic(topic), Key: []byte(id), Value: c.AppendJSON(nil), Partition: p}
	}
	produce := func(recs []*kgo.Record) {
		t.Helper()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Each tenant watches from now and gets a cursor for its first change,
	// at the feed's start: the valid cursors below resume from there.
	start := map[string]string{}
	for _, name := range tenants {
		var w *soakWatch
		testwait.Until(t, "a watch is answered 200", 30*time.Second, func() bool {
			w = openSoakWatch(queryURL+"/v1/watch", tok[name], "")
			return w.status == http.StatusOK
		})
		produce([]*kgo.Record{change(name, -1, "ACTIVE")})
		if n := w.read(1, 10*time.Second); n != 1 {
			t.Fatalf("%s: the first change did not arrive: %v", name, w.err)
		}
		start[name] = w.lastID
		w.close()
	}

	// The feed: 100,000 changes, most of them the busy tenant's; 1,000 of
	// each other tenant, and 100 of the busy tenant's are PAUSED.
	want := map[string]int{"t1": 1000, "t2": 1000, "t3": 1000, "busy:PAUSED": 100}
	var recs []*kgo.Record
	for i := range soakFeedChanges {
		switch {
		case i%100 == 1, i%100 == 34, i%100 == 67:
			recs = append(recs, change(tenants[1+(i%100)/33], i, "ACTIVE"))
		case i%1000 == 2:
			recs = append(recs, change("busy", i, "PAUSED"))
		default:
			recs = append(recs, change("busy", i, "ACTIVE"))
		}
		if len(recs) == 10_000 {
			produce(recs)
			recs = recs[:0]
		}
	}
	produce(recs)

	// Sample the query process's resident memory until the end.
	before := procStatusBytes(query, "VmRSS:")
	var peak atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if rss := procStatusBytes(query, "VmRSS:"); rss > peak.Load() {
				peak.Store(rss)
				if rss > before+2*watchSoakGrowth { // far past the bound: stop before it takes the machine
					_ = query.cmd.Process.Kill()
					return
				}
			}
			time.Sleep(10 * time.Millisecond) // the scenario: the sampling period
		}
	}()

	forged := []string{base64.RawURLEncoding.EncodeToString(append([]byte{1, parts}, make([]byte, parts)...))}
	{
		b := make([]byte, len(start["t1"])*3/4)
		for i := range b {
			b[i] = byte(i*7 + 3)
		}
		forged = append(forged, base64.RawURLEncoding.EncodeToString(b))
	}
	type result struct {
		what      string
		forged    bool
		status, n int
		err       error
	}
	results := make(chan result, soakWatches)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range soakWatches {
		tenant := tenants[i%4]
		path, cursor, key := "/v1/watch", start[tenant], tenant
		if tenant == "busy" {
			path, key = "/v1/watch?state=PAUSED", "busy:PAUSED"
		}
		if i/4%4 == 3 { // 16 forged cursors, 4 a tenant
			cursor, key = forged[i%2], ""
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := openSoakWatch(queryURL+path, tok[tenant], cursor)
			defer w.close()
			r := result{what: fmt.Sprintf("watch %d (%s, %s)", i, tenant, path), forged: key == "", status: w.status}
			if key != "" && w.status == http.StatusOK {
				r.n = w.read(want[key], 90*time.Second)
				r.err = w.err
				for id := range w.seen {
					if !strings.HasPrefix(id, tenant+"-") {
						r.err = fmt.Errorf("delivered %s", id)
					}
				}
			}
			results <- r
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	stopSampling()
	<-sampled
	close(results)
	delivered := 0
	for r := range results {
		switch {
		case r.forged && r.status != http.StatusGone && r.status != http.StatusBadRequest:
			t.Errorf("%s: a forged cursor was answered %d", r.what, r.status)
		case !r.forged && r.status != http.StatusOK:
			t.Errorf("%s: %d", r.what, r.status)
		case r.err != nil:
			t.Errorf("%s: %v after %d changes", r.what, r.err, r.n)
		}
		delivered += r.n
	}
	wantDelivered := 12 * (want["t1"] + want["t2"] + want["t3"] + want["busy:PAUSED"])
	if delivered != wantDelivered {
		t.Errorf("%d changes delivered in all, want %d", delivered, wantDelivered)
	}
	hwm := procStatusBytes(query, "VmHWM:")
	t.Logf("query RSS: %d MiB before the watches, peak %d MiB sampled, VmHWM %d MiB (bound: %d MiB above before); %d changes delivered in %v",
		before>>20, peak.Load()>>20, hwm>>20, watchSoakGrowth>>20, delivered, elapsed.Round(time.Millisecond))
	if hwm-before > watchSoakGrowth {
		t.Errorf("the query process peaked at %d MiB, %d MiB above its %d MiB before the watches: over the bound of %d MiB", hwm>>20, (hwm-before)>>20, before>>20, watchSoakGrowth>>20)
	}
}

// procStatusBytes reads a "kB" field of the process's /proc status (0 when
// the process is gone).
func procStatusBytes(p *process, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// soakWatch is one watch of TestWatchSoak: a stream read in place, with
// the changes it delivered by event id.
type soakWatch struct {
	status int
	resp   *http.Response
	sc     *bufio.Scanner
	lastID string
	seen   map[string]bool
	err    error
}

// soakHTTP is not checked against api/openapi.json: the soak writes its
// feed itself, with synthetic event ids that the projector never writes.
var soakHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: soakWatches}}

func openSoakWatch(u, token, cursor string) *soakWatch {
	w := &soakWatch{seen: map[string]bool{}}
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	resp, err := soakHTTP.Do(req)
	if err != nil {
		w.err = err
		return w
	}
	w.status, w.resp = resp.StatusCode, resp
	w.sc = bufio.NewScanner(resp.Body)
	w.sc.Buffer(make([]byte, 64<<10), 1<<20)
	return w
}

// read reads changes until n distinct ones came or d passed (then w.err
// says why), and returns how many came.
func (w *soakWatch) read(n int, d time.Duration) int {
	if w.resp == nil {
		return 0
	}
	timer := time.AfterFunc(d, func() { w.resp.Body.Close() })
	defer timer.Stop()
	for len(w.seen) < n && w.err == nil && w.sc.Scan() {
		line := w.sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			w.lastID = line[4:]
		case strings.HasPrefix(line, "data: "):
			var c feed.Change
			if err := feed.Decode([]byte(line[6:]), &c); err != nil {
				w.err = err
			} else if w.seen[c.EventID] {
				w.err = fmt.Errorf("%s delivered twice", c.EventID)
			} else {
				w.seen[c.EventID] = true
			}
		}
	}
	if len(w.seen) < n && w.err == nil {
		w.err = fmt.Errorf("the stream ended or %v passed (%v)", d, w.sc.Err())
	}
	return len(w.seen)
}

func (w *soakWatch) close() {
	if w.resp != nil {
		w.resp.Body.Close()
	}
}
