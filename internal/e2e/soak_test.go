package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/internal/testwait"
)

// soakRequests is how many hostile requests TestSoak sends: 10,000 in an
// ordinary run (make test), the full 100,000 with CORREX_SOAK=full (make
// bench runs it so).
var soakRequests = func() int64 {
	if os.Getenv("CORREX_SOAK") == "full" {
		return 100_000
	}
	return 10_000
}()

// TestSoak sends 100,000 (CORREX_SOAK=full; 10,000 otherwise) malformed or hostile requests to running services
// (in process, with kfake and a real redis-server): bad and missing
// tokens, bad JSON, wrong media types, bodies over 1 MiB, headers over
// 64 KiB, half-sent requests that stall and disconnect, path traversal,
// other tenants' sessions, bad query parameters, a token over its rate
// limit. Valid traffic runs at the same time. The services must stay up and
// answer every request with a documented status, the valid traffic must be
// accepted and projected in full (checked through the query API), the heap
// must come back within a generous bound and the goroutines to their
// baseline.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	f := securitytest.Write(t)
	srv := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: 6, Log: quietLog(),
		// The hostile token ("writer") goes over this; the valid traffic
		// ("admin" writes, "reader" reads) stays under it.
		Auth:      &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"], RateLimit: 300, RateBurst: 100},
		Projector: func(c *projector.Config) { c.FlushInterval = 50 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	tok := f.Tokens
	c := client{t: t}
	// Warm up (the topic, the clients' connections), then take the baseline.
	waitReady(t, st)
	if a := c.do(http.MethodPost, st.IngestURL+"/v1/events", tok["admin"], "application/json", []byte(event("warm:1", "SessionCreated"))); a.status != 202 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	waitFolded(t, c, st.QueryURL, tok["admin"], "warm:1")
	// A transition too, so that every path the valid traffic takes has
	// opened its connections (the change feed's and the deadlines' writes),
	// and the valid traffic's whole lifecycle once, before the baseline.
	if a := c.do(http.MethodPost, st.IngestURL+"/v1/events", tok["admin"], "application/json",
		batch(event("warm:2", "SessionCreated"), event("warm:2", "SessionStarted"), event("warm:2", "SessionCompleted"))); a.status != 202 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	waitFolded(t, c, st.QueryURL, tok["admin"], "warm:2")
	// The reads that ask Kafka (a minPosition's partition count) connect too.
	for _, path := range []string{"/v1/sessions/warm:2?minPosition=0:0&wait=1s", "/v1/sessions/warm:2?minPosition=5:0&wait=1s", "/v1/stats"} {
		c.do(http.MethodGet, st.QueryURL+path, tok["admin"], "", nil)
	}
	http.DefaultClient.CloseIdleConnections()
	// The query service starts reading the change feed (for watches) once
	// the projector has created it, in the background: wait for it, so
	// that its consumer is in the baseline.
	testwait.Until(t, "the change feed read by the query service", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.QueryURL+"/v1/watch", nil)
		req.Header.Set("Authorization", "Bearer "+tok["admin"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	http.DefaultClient.CloseIdleConnections()
	// The baseline is taken once the goroutines stop changing: clients
	// open their connections (and the broker its goroutines for them)
	// asynchronously after the warm-up's requests have been answered.
	steady(10 * time.Second)
	heapBefore, goroutinesBefore := settle(0, 0)

	began := time.Now()
	var valid validTraffic
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); valid.run(t, st, tok["admin"]) }()

	statuses := newStatusCounts()
	var next atomic.Int64
	var hostileClients []*http.Client
	const workers = 12
	for w := range workers {
		// The hostile requests are not checked against api/openapi.json:
		// they are malformed on purpose (traversals, huge headers, stalled
		// bodies), and checking 100,000 of them would slow the flood below
		// the rate limit it must reach. The valid traffic beside it is.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4},
			// A traversal that the server answers with a redirect to the
			// cleaned path counts as that redirect.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		hostileClients = append(hostileClients, hc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for next.Add(1) <= soakRequests {
				kind, status := hostile(rng, hc, st, tok)
				statuses.add(kind, status)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	for _, hc := range hostileClients {
		hc.CloseIdleConnections()
	}

	// Every answer was a documented one, and nothing failed on the server.
	t.Logf("%d hostile requests in %v (%.0f/s); answers:\n%s", soakRequests, elapsed.Round(time.Millisecond),
		float64(soakRequests)/elapsed.Seconds(), statuses)
	if statuses.check(t) == 0 && !overTheLimit(hostileClients, st.IngestURL, tok["writer"]) {
		// The flood's rate per token depends on the machine's load, so a
		// busy machine may keep the writer under its limit; overTheLimit
		// then goes over it on purpose, and the limiter must answer.
		t.Error("no request was rate-limited: the writer token went over its limit and was never answered 429")
	}

	// The valid traffic was accepted and projected in full.
	if valid.err != nil {
		t.Fatalf("valid traffic: %v", valid.err)
	}
	valid.verify(t, c, st, tok["admin"])
	http.DefaultClient.CloseIdleConnections()
	for _, base := range []string{st.IngestURL, st.QueryURL, st.ProjectorURL} {
		if a := c.do(http.MethodGet, base+"/readyz", "", "", nil); a.status != 200 {
			t.Fatalf("%s not ready after the soak: %d %s", base, a.status, a.body)
		}
	}
	http.DefaultClient.CloseIdleConnections()

	heapAfter, goroutinesAfter := settle(goroutinesBefore, 10*time.Second)
	t.Logf("heap in use %.1f MiB before, %.1f MiB after; goroutines %d before, %d after",
		float64(heapBefore)/(1<<20), float64(heapAfter)/(1<<20), goroutinesBefore, goroutinesAfter)
	if heapAfter > heapBefore+96<<20 {
		t.Errorf("heap grew from %d to %d bytes", heapBefore, heapAfter)
	}
	if goroutinesAfter > goroutinesBefore+5 { // those not franz-go's (ownGoroutines)
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines %d, baseline %d:\n%s", goroutinesAfter, goroutinesBefore, buf[:runtime.Stack(buf, true)])
	}
}

func waitReady(t *testing.T, st *devstack.Stack) {
	t.Helper()
	for _, base := range []string{st.IngestURL, st.QueryURL} {
		waitHTTP(t, base+"/readyz", 15*time.Second)
	}
}

// steady waits, at most max, until the number of goroutines has not
// changed for a second.
func steady(max time.Duration) {
	last, since := ownGoroutines(), time.Now()
	testwait.Eventually(max, func() bool {
		if n := ownGoroutines(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= time.Second
	})
}

// settle collects garbage and returns the heap in use and the goroutine
// count (ownGoroutines), waiting up to wait for the goroutines to come
// down to target.
func settle(target int, wait time.Duration) (uint64, int) {
	testwait.Eventually(wait, func() bool {
		runtime.GC()
		return ownGoroutines() <= target+5
	})
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ownGoroutines()
}

// ownGoroutines counts the process's goroutines but those a Kafka client
// or the in-process broker started (created by franz-go's packages): a
// client's goroutines come and go with its fetches and connections, and
// the projector's background verifier opens a client for each partition
// it checks (sessionlog.Cursor), so their number at any moment says
// nothing of a leak. A soak failed so: 15 goroutines over its baseline,
// a verifier's client among them. A goroutine of ours left behind (a
// handler, a stream, a watcher) still counts; a client left open would
// show in the heap bound instead.
func ownGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	own := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.TrimSpace(g) != "" && !strings.Contains(g, "created by github.com/twmb/franz-go/") {
			own++
		}
	}
	return own
}

// statusCounts counts the answers per kind of request.
type statusCounts struct {
	mu sync.Mutex
	m  map[string]map[int]int
}

func newStatusCounts() *statusCounts { return &statusCounts{m: map[string]map[int]int{}} }

func (s *statusCounts) add(kind string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[kind] == nil {
		s.m[kind] = map[int]int{}
	}
	s.m[kind][status]++
}

func (s *statusCounts) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for kind, m := range s.m {
		var parts []string
		for code, n := range m {
			parts = append(parts, fmt.Sprintf("%d×%d", code, n))
		}
		sort.Strings(parts)
		lines = append(lines, fmt.Sprintf("  %-22s %s", kind, strings.Join(parts, " ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// allowed are the answers each kind may get; 0 stands for "the server
// closed the connection", which only the stalled requests may see. 429 is
// allowed where the hostile token is used.
var allowed = map[string][]int{
	"no token":          {401},
	"bad token":         {401},
	"garbage auth":      {401},
	"huge headers":      {431},
	"stalled request":   {0},
	"bad json":          {400, 429},
	"media type":        {415, 429},
	"oversized body":    {413, 429, -1},
	"traversal":         {301, 307, 308, 400, 404, 429},
	"other tenant":      {404, 429},
	"outside prefix":    {403, 429},
	"bad parameters":    {400, 429},
	"missing scope":     {403, 429},
	"method":            {405, 429},
	"bad cursor":        {400, 429},
	"binary session id": {400, 404, 429},
}

// check reports each answer the kind does not allow, and each kind no
// request of which got past the rate limit; it returns how many requests
// were rate-limited.
func (s *statusCounts) check(t *testing.T) (limited int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for kind := range allowed {
		if len(s.m[kind]) == 0 || len(s.m[kind]) == 1 && s.m[kind][429] > 0 {
			t.Errorf("%s: no request of this kind got past the rate limit", kind)
		}
		limited += s.m[kind][429]
	}
	for kind, m := range s.m {
		for code, n := range m {
			ok := false
			for _, a := range allowed[kind] {
				ok = ok || a == code
			}
			if !ok {
				t.Errorf("%s: %d answers with status %d", kind, n, code)
			}
		}
	}
	return limited
}

// hostile sends one hostile request of a random kind and returns its kind
// and the status (0: connection closed by the server; -1: the client gave
// up writing a body the server had stopped reading).
func hostile(rng *rand.Rand, hc *http.Client, st *devstack.Stack, tok map[string]string) (string, int) {
	ev := event("acme:"+fmt.Sprint(rng.IntN(1000)), "SessionCreated")
	n := rng.IntN(1000)
	switch {
	case n < 2:
		body := bytes.Repeat([]byte(ev+"\n"), (1<<20)/len(ev)+10)
		return "oversized body", send(hc, http.MethodPost, st.IngestURL+"/v1/events", tok["writer"], "application/x-ndjson", body, nil)
	case n < 5:
		return "huge headers", send(hc, http.MethodGet, st.QueryURL+"/v1/sessions/a", tok["reader"], "", nil,
			http.Header{"X-Pad": {strings.Repeat("x", 100<<10)}})
	case n < 7:
		return "stalled request", stall(st.IngestURL)
	case n < 150:
		return "no token", send(hc, http.MethodPost, st.IngestURL+"/v1/events", "", "application/json", []byte(ev), nil)
	case n < 300:
		return "bad token", send(hc, http.MethodGet, st.QueryURL+"/v1/sessions/acme:1", fmt.Sprintf("cxs_%043d", rng.Int64()), "", nil, nil)
	case n < 380:
		return "garbage auth", send(hc, http.MethodGet, st.QueryURL+"/v1/stats", "", "", nil,
			http.Header{"Authorization": {[]string{"Bearer", "Bearer ", "Basic \x80\xfe", "Bearer a b c", "Token x",
				"Bearer " + strings.Repeat("\xff", 600)}[rng.IntN(6)]}})
	case n < 480:
		bad := []string{`{"sessionId":`, `[1,2,3]`, `{"events":{}}`, "\x00\x01\x02", `{"events":[` + strings.Repeat("[", 5000)}
		return "bad json", send(hc, http.MethodPost, st.IngestURL+"/v1/events", tok["writer"], "application/json", []byte(bad[rng.IntN(len(bad))]), nil)
	case n < 530:
		return "media type", send(hc, http.MethodPost, st.IngestURL+"/v1/events", tok["writer"], "text/html", []byte(ev), nil)
	case n < 630:
		paths := []string{"/v1/sessions/..%2f..%2fetc%2fpasswd", "/v1/../../etc/passwd", "/v1/sessions/%2e%2e/%2e%2e/stats",
			"/v1/sessions/acme:1/../../stats", "/v1//sessions", "/v1/sessions/acme:1%00"}
		return "traversal", send(hc, http.MethodGet, st.QueryURL+paths[rng.IntN(len(paths))], tok["acme"], "", nil, nil)
	case n < 730:
		return "other tenant", send(hc, http.MethodGet, st.QueryURL+"/v1/sessions/warm:1", tok["acme"], "", nil, nil)
	case n < 780:
		return "outside prefix", send(hc, http.MethodPost, st.IngestURL+"/v1/events", tok["acme"], "application/json",
			[]byte(event("globex:1", "SessionCreated")), nil)
	case n < 880:
		params := []string{"wait=1h&minPosition=0:1", "minPosition=x", "wait=-1s", "limit=100000", "state=EXPLODED", "wait=2s"}
		p := params[rng.IntN(len(params))]
		path := "/v1/sessions/acme:1?" + p
		if strings.HasPrefix(p, "limit") || strings.HasPrefix(p, "state") {
			path = "/v1/sessions?" + p
		}
		return "bad parameters", send(hc, http.MethodGet, st.QueryURL+path, tok["reader"], "", nil, nil)
	case n < 930:
		return "missing scope", send(hc, http.MethodGet, st.QueryURL+"/v1/stats", tok["writer"], "", nil, nil)
	case n < 960:
		return "method", send(hc, http.MethodDelete, st.IngestURL+"/v1/events", tok["writer"], "", nil, nil)
	case n < 980:
		return "bad cursor", send(hc, http.MethodGet, st.QueryURL+"/v1/sessions?cursor="+url.QueryEscape(string(rune(rng.IntN(5000)))+"/x"), tok["acme"], "", nil, nil)
	default:
		return "binary session id", send(hc, http.MethodGet, st.QueryURL+"/v1/sessions/"+url.PathEscape(string([]byte{byte(rng.IntN(256)), 0xff})), tok["reader"], "", nil, nil)
	}
}

// overTheLimit sends cheap requests (a method ingest does not allow) with
// token from every client at once until one is answered 429, at most
// 5,000: it reports whether the limiter answered.
func overTheLimit(clients []*http.Client, ingestURL, token string) bool {
	var sent atomic.Int64
	var limited atomic.Bool
	var wg sync.WaitGroup
	for _, hc := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !limited.Load() && sent.Add(1) <= 5000 {
				if send(hc, http.MethodDelete, ingestURL+"/v1/events", token, "", nil, nil) == http.StatusTooManyRequests {
					limited.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	for _, hc := range clients {
		hc.CloseIdleConnections()
	}
	return limited.Load()
}

func send(hc *http.Client, method, u, token, ct string, body []byte, h http.Header) int {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return -2
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 400 && resp.StatusCode != 431 && resp.Header.Get("Content-Type") != "application/problem+json" {
		return 1000 + resp.StatusCode // not a problem document
	}
	return resp.StatusCode
}

// stall opens a connection, sends half a request, waits a little and
// disconnects (slowloris, with a short fuse).
func stall(base string) int {
	u, _ := url.Parse(base)
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		return -1
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nX-Slow: a")
	time.Sleep(20 * time.Millisecond) // the scenario, slow on purpose: the time between the parts is the attack
	_, _ = io.WriteString(conn, "b")
	time.Sleep(20 * time.Millisecond) // the scenario: then the client goes away mid-request
	return 0
}

// validTraffic creates sessions, takes each through its lifecycle, and
// remembers the last position each session's events were accepted at.
type validTraffic struct {
	sessions []string
	last     map[string]string
	err      error
}

const validSessions = 300

func (v *validTraffic) run(t *testing.T, st *devstack.Stack, token string) {
	v.last = map[string]string{}
	hc := apiCheck.Client(&http.Client{Timeout: 10 * time.Second})
	defer hc.CloseIdleConnections()
	// A well-behaved client: at most 200 requests per second, under the
	// stack's limit of 300 per token.
	pace := time.NewTicker(5 * time.Millisecond)
	defer pace.Stop()
	for i := range validSessions {
		id := fmt.Sprintf("soak:%03d", i)
		v.sessions = append(v.sessions, id)
		for _, body := range [][]byte{
			[]byte(event(id, "SessionCreated")),
			batch(event(id, "SessionStarted"), fmt.Sprintf(`{"sessionId":%q,"type":"ToolCompleted","payload":{"ok":false}}`, id)),
			[]byte(event(id, "SessionCompleted")),
		} {
			<-pace.C
			req, _ := http.NewRequest(http.MethodPost, st.IngestURL+"/v1/events", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				v.err = err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 202 {
				v.err = fmt.Errorf("%s: %d %s", id, resp.StatusCode, b)
				return
			}
			var r struct {
				Position string `json:"position"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				v.err = err
				return
			}
			v.last[id] = r.Position
		}
	}
}

// verify reads every session back, waiting for its last position.
func (v *validTraffic) verify(t *testing.T, c client, st *devstack.Stack, token string) {
	t.Helper()
	if len(v.sessions) != validSessions {
		t.Fatalf("%d valid sessions sent, want %d", len(v.sessions), validSessions)
	}
	pace := time.NewTicker(5 * time.Millisecond) // under the limit, as in run
	defer pace.Stop()
	for _, id := range v.sessions {
		<-pace.C
		a := c.do(http.MethodGet, st.QueryURL+"/v1/sessions/"+id+"?wait=10s&minPosition="+v.last[id], token, "", nil)
		var s struct {
			State    string `json:"state"`
			Version  int    `json:"version"`
			Counters struct {
				ToolFailures int `json:"toolFailures"`
			} `json:"counters"`
		}
		if a.status != 200 || json.Unmarshal(a.body, &s) != nil || s.State != "COMPLETED" || s.Version != 4 || s.Counters.ToolFailures != 1 {
			t.Fatalf("%s: %d %s", id, a.status, a.body)
		}
	}
}
