//go:build integration

package integration

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// load is a workload run in the background against a stack's ingest.
type load struct {
	done chan struct{}
	rep  loadgen.Report
	err  error
}

// startLoad runs cfg against ingestURL in a goroutine; wait returns its report.
func startLoad(ctx context.Context, ingestURL string, cfg loadgen.Config) *load {
	cfg.IngestURL = ingestURL
	cfg.KeepWritten = true
	cfg.Verify = false // verified here, through the query API, after the chaos
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	l := &load{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.rep, l.err = loadgen.Run(ctx, cfg)
	}()
	return l
}

// running reports whether the load is still sending.
func (l *load) running() bool {
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

func (l *load) wait(t *testing.T) loadgen.Report {
	t.Helper()
	<-l.done
	if l.err != nil {
		t.Fatalf("load: %v", l.err)
	}
	r := l.rep
	t.Logf("load: %d sessions, %d events in %d requests over %v (%.0f events/s), %d resent requests, %d sessions resent",
		r.Sessions, r.Events, r.Requests, r.Elapsed.Round(time.Millisecond), r.EventsPerSecond(), r.Retries, len(r.Resent))
	if r.Rejected != 0 {
		t.Fatalf("ingest rejected %d requests of valid envelopes", r.Rejected)
	}
	return r
}

// expected is what a set of sessions must look like: the reference fold of
// the events ingest accepted for each.
type expected struct {
	written map[string][]fsm.Event
	last    map[string]snapshot.Position
	resent  map[string]bool
}

func expectOf(reps ...loadgen.Report) expected {
	e := expected{written: map[string][]fsm.Event{}, last: map[string]snapshot.Position{}, resent: map[string]bool{}}
	for _, r := range reps {
		for id, evs := range r.Written {
			e.written[id] = evs
		}
		for id, p := range r.Last {
			e.last[id] = p
		}
		for id := range r.Resent {
			e.resent[id] = true
		}
	}
	return e
}

// ids returns the session ids, sorted.
func (e expected) ids() []string {
	out := make([]string, 0, len(e.written))
	for id := range e.written {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// wantJSON is the reference snapshot of a session as the query API spells
// it; the parts only the log knows (position, firstOffset) come from got
// and are checked separately.
//
// The services run with the default session timeouts (CORREX_TIMEOUT_*
// unset), which the API shows as the effective timeouts and the deadline.
func wantJSON(ref fsm.Session, pos snapshot.Position, firstOffset int64) []byte {
	s := &snapshot.Snapshot{Session: ref, Position: pos, FirstOffset: firstOffset, TimeoutDefaults: fsm.DefaultTimeouts()}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a snapshot always encodes
	}
	return b
}

// compareSnapshot compares a served snapshot with the reference: the whole
// JSON document, with the position equal to the one ingest returned for the
// session's last event. For a resent session, counters.events,
// counters.duplicates and the position may be higher (Kafka may hold a copy
// that ingest could not confirm) and are compared as lower bounds.
func compareSnapshot(got []byte, ref fsm.Session, last snapshot.Position, resent bool) (diffs []string, want []byte) {
	var g map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		return []string{"undecodable: " + err.Error()}, nil
	}
	first, _ := g["firstOffset"].(float64)
	want = wantJSON(ref, last, int64(first))
	var w map[string]any
	if err := json.Unmarshal(want, &w); err != nil {
		panic(err)
	}
	if resent {
		gc, _ := g["counters"].(map[string]any)
		wc, _ := w["counters"].(map[string]any)
		for _, k := range []string{"events", "duplicates"} {
			if gv, wv := num(gc[k]), num(wc[k]); gv < wv {
				diffs = append(diffs, fmt.Sprintf("counters.%s %v, want at least %v", k, gv, wv))
			}
			delete(gc, k)
			delete(wc, k)
		}
		gp, wp := position(g["position"]), position(w["position"])
		if gp.Partition != wp.Partition || gp.Offset < wp.Offset {
			diffs = append(diffs, fmt.Sprintf("position %s, want at least %s", gp, wp))
		}
		delete(g, "position")
		delete(w, "position")
	}
	keys := map[string]bool{}
	for k := range g {
		keys[k] = true
	}
	for k := range w {
		keys[k] = true
	}
	for k := range keys {
		if !reflect.DeepEqual(g[k], w[k]) {
			gb, _ := json.Marshal(g[k])
			wb, _ := json.Marshal(w[k])
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", k, gb, wb))
		}
	}
	sort.Strings(diffs)
	return diffs, want
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func position(v any) snapshot.Position {
	m, _ := v.(map[string]any)
	return snapshot.Position{Partition: int32(num(m["partition"])), Offset: int64(num(m["offset"]))}
}

// verifyOpts tunes verifySnapshots.
type verifyOpts struct {
	timeout time.Duration // for all sessions together (default 3m)
}

// verifySnapshots reads every session through the query API, once the
// projector has folded its last accepted event (minPosition), and compares it
// with the reference fold. A session whose events never created it must be
// unknown (404). On failure it prints the first differing snapshots.
func verifySnapshots(t *testing.T, queryURL string, exp expected, o verifyOpts) {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 3 * time.Minute
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	type result struct {
		id        string
		problem   string
		got, want []byte
	}
	ids := exp.ids()
	results := make(chan result, len(ids))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := result{id: id}
			r.problem, r.got, r.want = verifyOne(ctx, queryURL, id, exp)
			results <- r
		}()
	}
	wg.Wait()
	close(results)
	var bad []result
	for r := range results {
		if r.problem != "" {
			bad = append(bad, r)
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].id < bad[j].id })
	for i, r := range bad {
		if i == 5 {
			break
		}
		t.Errorf("session %s: %s\n got %s\nwant %s", r.id, r.problem, r.got, r.want)
	}
	if len(bad) > 0 {
		t.Fatalf("%d of %d sessions differ from the reference fold of the accepted events", len(bad), len(ids))
	}
	t.Logf("verified %d sessions against the reference fold in %v", len(ids), time.Since(started).Round(time.Millisecond))
}

// verifyOne checks one session; it returns a problem ("" if none) and the
// documents compared.
func verifyOne(ctx context.Context, queryURL, id string, exp expected) (problem string, got, want []byte) {
	ref := loadgen.Expected(exp.written[id])
	last, hasLast := exp.last[id]
	if !ref.Exists() {
		if !hasLast {
			return "", nil, nil // nothing of it reached Kafka
		}
		// Wait until its last event is folded, then it must be unknown.
		u := fmt.Sprintf("%s/v1/stats", queryURL)
		for {
			code, _, body, err := get(ctx, u, nil)
			if err == nil && code == http.StatusOK {
				var st stats
				if json.Unmarshal(body, &st) == nil && st.checkpoint(last.Partition) > last.Offset {
					break
				}
			}
			if ctx.Err() != nil {
				return "the projector did not fold its partition past " + last.String(), nil, nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		code, _, body, err := get(ctx, queryURL+"/v1/sessions/"+url.PathEscape(id), nil)
		if err != nil || code != http.StatusNotFound {
			return fmt.Sprintf("never created, so want 404; got %d %v", code, err), body, nil
		}
		return "", nil, nil
	}
	u := fmt.Sprintf("%s/v1/sessions/%s?minPosition=%s&wait=5s", queryURL, url.PathEscape(id), last)
	var lastErr string
	for {
		code, _, body, err := get(ctx, u, nil)
		switch {
		case err != nil:
			lastErr = err.Error()
		case code == http.StatusOK:
			diffs, want := compareSnapshot(body, ref, last, exp.resent[id])
			if len(diffs) > 0 {
				return strings.Join(diffs, "; "), body, want
			}
			return "", nil, nil
		case code == http.StatusGatewayTimeout || code == http.StatusServiceUnavailable:
			lastErr = fmt.Sprintf("%d %s", code, body)
		default:
			return fmt.Sprintf("query answered %d", code), body, wantJSON(ref, last, 0)
		}
		if ctx.Err() != nil {
			return "not served at " + last.String() + " in time: " + lastErr, nil, wantJSON(ref, last, 0)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stats is the body of GET /v1/stats.
type stats struct {
	Sessions struct {
		Total   int64            `json:"total"`
		ByState map[string]int64 `json:"byState"`
	} `json:"sessions"`
	Partitions []struct {
		Partition  int32 `json:"partition"`
		Checkpoint int64 `json:"checkpoint"`
	} `json:"partitions"`
}

// checkpoint returns a partition's checkpoint, -1 if it has none.
func (s stats) checkpoint(p int32) int64 {
	for _, ps := range s.Partitions {
		if ps.Partition == p {
			return ps.Checkpoint
		}
	}
	return -1
}

func (s stats) checkpoints() map[int32]int64 {
	m := map[int32]int64{}
	for _, ps := range s.Partitions {
		m[ps.Partition] = ps.Checkpoint
	}
	return m
}

func getStats(ctx context.Context, queryURL string) (stats, error) {
	code, _, body, err := get(ctx, queryURL+"/v1/stats", nil)
	if err != nil {
		return stats{}, err
	}
	if code != http.StatusOK {
		return stats{}, fmt.Errorf("GET /v1/stats: %d %s", code, body)
	}
	var st stats
	return st, json.Unmarshal(body, &st)
}

// verifyStats checks /v1/stats against the reference: sessions per state,
// and every partition checkpointed past the last accepted event on it. A
// checkpoint is written just after the snapshots it covers, so it polls for
// up to 30s before it reports the differences.
func verifyStats(t *testing.T, queryURL string, exp expected) {
	t.Helper()
	want := map[string]int64{}
	var total int64
	end := map[int32]int64{}
	for id, evs := range exp.written {
		if ref := loadgen.Expected(evs); ref.Exists() {
			want[ref.State.String()]++
			total++
		}
		if p, ok := exp.last[id]; ok && p.Offset+1 > end[p.Partition] {
			end[p.Partition] = p.Offset + 1
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := getStats(context.Background(), queryURL)
		if err != nil {
			t.Fatal(err)
		}
		var diffs []string
		if st.Sessions.Total != total {
			diffs = append(diffs, fmt.Sprintf("%d sessions, want %d", st.Sessions.Total, total))
		}
		for _, s := range fsm.States() {
			if got := st.Sessions.ByState[s.String()]; got != want[s.String()] {
				diffs = append(diffs, fmt.Sprintf("%d sessions %s, want %d", got, s, want[s.String()]))
			}
		}
		for p, o := range end {
			if cp := st.checkpoint(p); cp < o {
				diffs = append(diffs, fmt.Sprintf("partition %d checkpoint %d, want at least %d (after its last accepted event)", p, cp, o))
			}
		}
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(diffs)
			t.Fatalf("stats differ from the reference: %s", strings.Join(diffs, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verifyListing pages through GET /v1/sessions, for all states and for one,
// and compares the ids with the reference.
func verifyListing(t *testing.T, queryURL string, exp expected) {
	t.Helper()
	all, byState := map[string]bool{}, map[string]map[string]bool{}
	for id, evs := range exp.written {
		if ref := loadgen.Expected(evs); ref.Exists() {
			all[id] = true
			st := ref.State.String()
			if byState[st] == nil {
				byState[st] = map[string]bool{}
			}
			byState[st][id] = true
		}
	}
	check := func(state string, want map[string]bool) {
		got := map[string]bool{}
		cursor := ""
		for pages := 0; ; pages++ {
			q := url.Values{"limit": {"500"}}
			if state != "" {
				q.Set("state", state)
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			code, _, body, err := get(context.Background(), queryURL+"/v1/sessions?"+q.Encode(), nil)
			if err != nil || code != http.StatusOK {
				t.Fatalf("GET /v1/sessions?%s: %d %v %s", q.Encode(), code, err, body)
			}
			var page struct {
				Sessions []struct {
					SessionID string `json:"sessionId"`
					State     string `json:"state"`
				} `json:"sessions"`
				Next *string `json:"next"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			for _, s := range page.Sessions {
				if got[s.SessionID] {
					t.Errorf("listing (state %q) shows %s twice", state, s.SessionID)
				}
				if state != "" && s.State != state {
					t.Errorf("listing of state %s shows %s in %s", state, s.SessionID, s.State)
				}
				got[s.SessionID] = true
			}
			if page.Next == nil {
				break
			}
			cursor = *page.Next
			if pages > 1000 {
				t.Fatal("listing does not end")
			}
		}
		missing, extra := 0, 0
		for id := range want {
			if !got[id] {
				missing++
			}
		}
		for id := range got {
			if !want[id] {
				extra++
			}
		}
		if missing > 0 || extra > 0 {
			t.Errorf("listing (state %q): %d sessions, want %d (%d missing, %d not expected)", state, len(got), len(want), missing, extra)
		}
	}
	check("", all)
	for _, st := range []string{"COMPLETED", "ACTIVE"} {
		check(st, byState[st])
	}
}

// verifyReplays rebuilds a sample of sessions from the log through
// GET /v1/sessions/{id}/replay: each must match the stored snapshot and the
// reference fold.
func verifyReplays(t *testing.T, queryURL string, exp expected, n int, seed uint64) {
	t.Helper()
	ids := exp.ids()
	rng := rand.New(rand.NewPCG(seed, 7))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	checked := 0
	for _, id := range ids {
		if checked == n {
			break
		}
		ref := loadgen.Expected(exp.written[id])
		if !ref.Exists() {
			continue
		}
		checked++
		code, _, body, err := get(context.Background(), queryURL+"/v1/sessions/"+url.PathEscape(id)+"/replay", nil)
		if err != nil || code != http.StatusOK {
			t.Errorf("replay %s: %d %v %s", id, code, err, body)
			continue
		}
		var r struct {
			Snapshot struct {
				Version uint64 `json:"version"`
				Digest  string `json:"digest"`
				State   string `json:"state"`
			} `json:"snapshot"`
			MatchesStored bool `json:"matchesStored"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		if !r.MatchesStored || r.Snapshot.Version != ref.Version || r.Snapshot.Digest != hex.EncodeToString(ref.Digest[:]) ||
			r.Snapshot.State != ref.State.String() {
			t.Errorf("replay %s: matchesStored %v, version %d, state %s; want true, %d, %s (digest equal: %v)", id, r.MatchesStored,
				r.Snapshot.Version, r.Snapshot.State, ref.Version, ref.State, r.Snapshot.Digest == hex.EncodeToString(ref.Digest[:]))
		}
	}
	if checked < n {
		t.Fatalf("only %d sessions to replay, want %d", checked, n)
	}
}

// monitor polls the query API while a scenario runs: a set of sessions (with
// If-None-Match, so unchanged ones answer 304) and the partition checkpoints
// in /v1/stats. It records every status code and every regression: a
// snapshot whose position or version, or a checkpoint, moves backwards.
type monitor struct {
	queryURL string
	stop     chan struct{}
	done     chan struct{}

	mu          sync.Mutex
	codes       map[int]int
	errors      []string
	regressions []string
	polls       int
}

func startMonitor(queryURL string) *monitor {
	m := &monitor{queryURL: queryURL, stop: make(chan struct{}), done: make(chan struct{}), codes: map[int]int{}}
	go m.run()
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	type seen struct {
		pos     snapshot.Position
		version float64
		etag    string
	}
	sessions := map[string]*seen{}
	var ids []string
	ckpts := map[int32]int64{}
	for i := 0; ; i++ {
		select {
		case <-m.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if len(ids) < 64 && i%10 == 0 { // discover sessions as they appear
			code, _, body, err := get(ctx, m.queryURL+"/v1/sessions?limit=64", nil)
			m.record(ctx, "list", code, err)
			var page struct {
				Sessions []struct {
					SessionID string `json:"sessionId"`
				} `json:"sessions"`
			}
			if err == nil && code == http.StatusOK && json.Unmarshal(body, &page) == nil {
				for _, s := range page.Sessions {
					if sessions[s.SessionID] == nil && len(ids) < 64 {
						sessions[s.SessionID] = &seen{}
						ids = append(ids, s.SessionID)
					}
				}
			}
		}
		for j := 0; j < 8 && len(ids) > 0; j++ {
			id := ids[(i*8+j)%len(ids)]
			prev := sessions[id]
			h := map[string]string{}
			if prev.etag != "" {
				h["If-None-Match"] = prev.etag
			}
			code, hdr, body, err := get(ctx, m.queryURL+"/v1/sessions/"+url.PathEscape(id), h)
			m.record(ctx, "session", code, err)
			if err != nil || code != http.StatusOK {
				continue
			}
			var s struct {
				Position snapshot.Position `json:"position"`
				Version  float64           `json:"version"`
			}
			if json.Unmarshal(body, &s) != nil {
				continue
			}
			if prev.etag != "" && (s.Position.Less(prev.pos) || s.Version < prev.version) {
				m.regress(fmt.Sprintf("session %s went back from %s (version %v) to %s (version %v)", id, prev.pos, prev.version, s.Position, s.Version))
			}
			prev.pos, prev.version, prev.etag = s.Position, s.Version, hdr.Get("ETag")
		}
		if i%4 == 0 {
			code, _, body, err := get(ctx, m.queryURL+"/v1/stats", nil)
			m.record(ctx, "stats", code, err)
			var st stats
			if err == nil && code == http.StatusOK && json.Unmarshal(body, &st) == nil {
				for p, o := range st.checkpoints() {
					if prev, ok := ckpts[p]; ok && o < prev {
						m.regress(fmt.Sprintf("partition %d checkpoint went back from %d to %d", p, prev, o))
					}
					ckpts[p] = o
				}
			}
		}
		m.mu.Lock()
		m.polls++
		m.mu.Unlock()
	}
}

func (m *monitor) record(ctx context.Context, what string, code int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			m.errors = append(m.errors, what+": "+err.Error())
		}
		return
	}
	m.codes[code]++
}

func (m *monitor) regress(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.regressions = append(m.regressions, time.Now().Format("15:04:05.000")+" "+s)
}

// finish stops the monitor and fails the test on a regression, a transport
// error, or a status other than 200, 304 and 404.
func (m *monitor) finish(t *testing.T) {
	t.Helper()
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var codes []string
	for c, n := range m.codes {
		codes = append(codes, strconv.Itoa(c)+"×"+strconv.Itoa(n))
	}
	sort.Strings(codes)
	t.Logf("monitor: %d polls, answers %s", m.polls, strings.Join(codes, " "))
	for c, n := range m.codes {
		if c != http.StatusOK && c != http.StatusNotModified && c != http.StatusNotFound {
			t.Errorf("monitor: the query service answered %d %d times", c, n)
		}
	}
	if len(m.errors) > 0 {
		t.Errorf("monitor: %d failed requests, first: %s", len(m.errors), m.errors[0])
	}
	if m.codes[http.StatusOK] == 0 {
		t.Errorf("monitor: no snapshot was read")
	}
	for i, r := range m.regressions {
		if i == 10 {
			break
		}
		t.Errorf("monitor: %s", r)
	}
	if len(m.regressions) > 0 {
		t.Fatalf("monitor: %d regressions", len(m.regressions))
	}
}
