package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// putGoal stores a created session whose goal is goal as given: the fold
// cuts long goals, but a store may hold snapshots written before that rule.
func (f *fixture) putGoal(id string, p int32, offset int64, goal string) {
	f.t.Helper()
	var s snapshot.Snapshot
	var r fsm.Reducer
	e := fsm.NewEvent(fsm.EventID{1, 7}, id, fsm.SessionCreated, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC), fsm.Fields{})
	s.Fold(&r, &e, snapshot.Position{Partition: p, Offset: offset})
	s.Goal = goal
	if _, err := f.store.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		f.t.Fatal(err)
	}
}

func TestJSONIsNotHTMLEscaped(t *testing.T) {
	f := newFixture(t)
	const goal = `<script>alert("x")</script> & <b>`
	f.putGoal("h-1", 0, 10, goal)
	for _, path := range []string{"/v1/sessions/h-1", "/v1/sessions"} {
		resp, body := f.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if !strings.Contains(string(body), `"goal":"<script>alert(\"x\")</script> & <b>"`) {
			t.Errorf("%s: the goal is not given back as itself:\n%s", path, body)
		}
		if !json.Valid(body) {
			t.Errorf("%s: not JSON: %s", path, body)
		}
	}
}

// A listing page stops at query.MaxListBytes of JSON, whatever the limit,
// and its cursor continues exactly after the last session it holds.
func TestListingPagesAreBoundedInBytes(t *testing.T) {
	f := newFixture(t)
	const n = 100
	goal := strings.Repeat("g", 64<<10)
	for i := range n {
		f.putGoal(fmt.Sprintf("big-%03d", i), 0, int64(i), goal)
	}
	seen := map[string]int{}
	next, pages := "", 0
	for {
		path := "/v1/sessions?limit=1000"
		if next != "" {
			path += "&cursor=" + next
		}
		resp, body := f.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if len(body) > query.MaxListBytes {
			t.Errorf("page %d is %d bytes, more than %d", pages, len(body), query.MaxListBytes)
		}
		var page struct {
			Sessions []struct {
				SessionID string `json:"sessionId"`
			} `json:"sessions"`
			Next *string `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		if pages == 1 && (len(page.Sessions) == n || page.Next == nil) {
			t.Fatalf("the first page holds %d sessions (%d bytes) and next %v: no byte cap", len(page.Sessions), len(body), page.Next)
		}
		for _, s := range page.Sessions {
			seen[s.SessionID]++
		}
		if page.Next == nil || pages > n {
			break
		}
		next = *page.Next
	}
	if len(seen) != n {
		t.Errorf("listed %d distinct sessions over %d pages, want %d", len(seen), pages, n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", id, c)
		}
	}
}

// slowList is a store whose every listing read takes delay longer.
type slowList struct {
	*snapshot.Store
	delay time.Duration
}

func (s slowList) ListFiltered(ctx context.Context, state fsm.State, prefix string, f snapshot.Filter, cursor string, limit int) (snapshot.Page, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return snapshot.Page{}, ctx.Err()
	}
	return s.Store.ListFiltered(ctx, state, prefix, f, cursor, limit)
}

// A page of large snapshots takes several reads of Redis: each has its own
// RedisTimeout, not the page as a whole (which also spends time encoding
// what it read). Reads of 60% of RedisTimeout each serve the page.
func TestListingChunksEachHaveTheRedisTimeout(t *testing.T) {
	f := newFixture(t)
	const n = 100
	goal := strings.Repeat("g", 64<<10)
	for i := range n {
		f.putGoal(fmt.Sprintf("big-%03d", i), 0, int64(i), goal)
	}
	h := query.NewHandler(slowList{f.store, query.RedisTimeout * 6 / 10}, topic, nil, query.Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/sessions?limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var page struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	// More sessions than the first chunk's: the page took two reads or more.
	if len(page.Sessions) <= 32 {
		t.Fatalf("the page holds %d sessions: it took one read, and tests nothing", len(page.Sessions))
	}
}

// tokenServer serves the query API behind bearer tokens, one per name, each
// with sessions:read and no prefix.
func tokenServer(t *testing.T, store *snapshot.Store, o query.Options, names ...string) (*httptest.Server, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var lines []string
	for _, name := range names {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
		lines = append(lines, auth.HashToken(tok)+" sessions:read name="+name)
	}
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guard, err := auth.New(auth.Config{TokensFile: file}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o.Guard = guard
	srv := httptest.NewServer(query.NewHandler(store, topic, nil, o))
	t.Cleanup(srv.Close)
	return srv, tokens
}

// One token holding its share of the waiting reads leaves room for the
// others: a second token's wait still succeeds, while the first token's
// next wait answers 503 with Retry-After.
func TestWaitingReadsAreSharedFairly(t *testing.T) {
	f := newFixture(t)
	f.put("s-1", 0, 0, fsm.SessionCreated)
	srv, tokens := tokenServer(t, f.store, query.Options{MaxWaiting: 8, MaxWaitingPerPrincipal: 2, PollEvery: 5 * time.Millisecond}, "a", "b")
	get := func(token, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	// Token a asks for every slot there is, and holds what it gets.
	codes := make(chan int, 8)
	for range 8 {
		go func() {
			resp, _ := get(tokens["a"], "/v1/sessions/s-1?minPosition=0:99&wait=3s")
			codes <- resp.StatusCode
		}()
	}
	busy := 0
	for range 6 {
		if c := <-codes; c == http.StatusServiceUnavailable {
			busy++
		}
	}
	if busy != 6 {
		t.Fatalf("%d of token a's 6 first answers were 503, want every one beyond its 2 slots", busy)
	}
	resp, body := get(tokens["a"], "/v1/sessions/s-1?minPosition=0:99&wait=3s")
	wantProblem(t, resp, body, 503, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// Token b waits while a holds its slots, and is answered when the
	// position is reached.
	whenWaiting(srv.Config.Handler.(*query.Handler), 3, func() { // a's 2 and b's
		f.put("s-1", 0, 0, fsm.SessionCreated, fsm.SessionStarted)
	})
	if resp, body := get(tokens["b"], "/v1/sessions/s-1?minPosition=0:1&wait=3s"); resp.StatusCode != 200 {
		t.Fatalf("token b's wait answered %d while token a held its slots: %s", resp.StatusCode, body)
	}
	for range 2 {
		if c := <-codes; c != http.StatusGatewayTimeout {
			t.Errorf("token a's waiting read answered %d, want 504", c)
		}
	}
}

// A minPosition on a partition the topic does not have is refused at once
// (400), from the partition count that Kafka reports; a topic that grows
// later is seen.
func TestMinPositionPartitionMustExist(t *testing.T) {
	r := redistest.Start(t)
	store, err := snapshot.NewStore(r.Client(t), "q")
	if err != nil {
		t.Fatal(err)
	}
	cluster := kafkatest.Start(t, kfake.SeedTopics(12, topic))
	kcfg := kafka.Config{Brokers: cluster.ListenAddrs(), ClientID: "query-test"}
	parts, err := query.NewKafkaPartitions(kcfg, topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(parts.Close)
	h := query.NewHandler(store, topic, nil, query.Options{Partitions: parts, PartitionsEvery: 10 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, store: store, srv: srv}
	f.put("s-1", 11, 5, fsm.SessionCreated)

	for _, q := range []string{"minPosition=999:0&wait=10s", "minPosition=12:0", "minPosition=12:0&wait=1s"} {
		start := time.Now()
		resp, body := f.get("/v1/sessions/s-1?" + q)
		wantProblem(t, resp, body, 400, "minPosition")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s answered after %v", q, d)
		}
	}
	if resp, body := f.get("/v1/sessions/s-1?minPosition=11:5&wait=1s"); resp.StatusCode != 200 {
		t.Fatalf("an existing partition: %d %s", resp.StatusCode, body)
	}

	adm := kadm.NewClient(mustKafka(t, kcfg))
	if _, err := adm.CreatePartitions(ctx, 4, topic); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "15:0 answers 504 after the topic grew to 16 partitions (the position is not reached)", 10*time.Second, func() bool {
		resp, _ := f.get("/v1/sessions/s-1?minPosition=15:0")
		return resp.StatusCode == http.StatusGatewayTimeout
	})
}

func mustKafka(t *testing.T, cfg kafka.Config) *kgo.Client {
	t.Helper()
	cl, err := kafka.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl.Client
}
