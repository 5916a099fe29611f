// Package loadgen drives realistic workloads against the ingest API and
// verifies the outcome through the query API. Sessions walk random lifecycle
// paths (internal/workload), with a chosen share of invalid and duplicate
// events; each worker owns its sessions and sends their events in order, in
// batches, at a target rate. At the end every session's snapshot is compared
// with the fold of exactly the events Kafka accepted for it, done here with
// pkg/fsm.
package loadgen

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// Config is a workload.
type Config struct {
	IngestURL, QueryURL string
	Sessions            int     // sessions to run (default 100)
	Concurrency         int     // workers, each owning Sessions/Concurrency sessions (default 4)
	Rate                float64 // events per second over all workers; 0 is as fast as possible
	Batch               int     // events per request (default 50; 1 sends single events)
	InvalidShare        float64 // share of lifecycle-invalid events mixed in
	DuplicateShare      float64 // share of events resent with the same eventId
	Seed                uint64
	Prefix              string // session id prefix (default "lg")
	Verify              bool   // compare every final snapshot with the reference fold
	Client              *http.Client
	// Start is the occurredAt of the first event (default now).
	Start time.Time
	// Progress, when set, is called after every accepted request.
	Progress func(events int)
	// KeepWritten fills Report.Written.
	KeepWritten bool
	// Token is a bearer token sent with every request (empty: none).
	Token string
}

// Report is what a run did.
type Report struct {
	Sessions   int
	Events     int           // events accepted by ingest (resends after a 503 included)
	Requests   int           // requests answered 202
	Retries    int           // requests resent after a 503 or a transport error
	Rejected   int           // requests answered 4xx (a bug: the generator sends valid envelopes)
	Elapsed    time.Duration // sending time
	Verified   int           // sessions whose snapshot equals the reference
	Mismatches []string      // one line per session that differs
	// Written holds, per session, the events Kafka accepted, in order
	// (with Config.KeepWritten).
	Written map[string][]fsm.Event
	// Last holds, per session with an accepted event, the position ingest
	// returned for its last accepted event: the minPosition to wait for
	// (with Config.KeepWritten).
	Last map[string]snapshot.Position
	// Resent lists the sessions with events in a request that was resent
	// (with Config.KeepWritten). Kafka may hold a copy of such an event that
	// ingest could not confirm, which the fold counts as a duplicate: their
	// counters.events and counters.duplicates (and position) can exceed the
	// reference fold of Written, nothing else can differ.
	Resent map[string]bool
}

// EventsPerSecond is the accepted rate.
func (r Report) EventsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Events) / r.Elapsed.Seconds()
}

type session struct {
	id      string
	events  []fsm.Event
	written []fsm.Event // what Kafka accepted, in order
	resent  bool        // a batch with this session's events was resent
	last    snapshot.Position
	hasLast bool
}

// Run runs the workload; it returns early with ctx.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Sessions <= 0 {
		cfg.Sessions = 100
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 50
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "lg"
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now().UTC()
	}
	var rep Report
	rep.Sessions = cfg.Sessions
	var events, requests, retries, rejected atomic.Int64
	all := make([]*session, cfg.Sessions)
	var wg sync.WaitGroup
	errc := make(chan error, cfg.Concurrency)
	began := time.Now()
	for w := range cfg.Concurrency {
		var mine []*session
		g := workload.New(cfg.Seed+uint64(w)*7919, workload.Options{InvalidShare: cfg.InvalidShare, DuplicateShare: cfg.DuplicateShare})
		for i := w; i < cfg.Sessions; i += cfg.Concurrency {
			id := cfg.Prefix + "-" + strconv.FormatUint(cfg.Seed, 36) + "-" + strconv.Itoa(i)
			s := &session{id: id, events: g.Session(id, cfg.Start.Add(time.Duration(i)*time.Millisecond))}
			all[i] = s
			mine = append(mine, s)
		}
		if len(mine) == 0 {
			continue
		}
		stream := g.Interleave(eventsOf(mine))
		owner := map[string]*session{}
		for _, s := range mine {
			owner[s.id] = s
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := worker{cfg: cfg, owner: owner, events: &events, requests: &requests, retries: &retries, rejected: &rejected}
			if err := wk.send(ctx, stream); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(began)
	rep.Events, rep.Requests, rep.Retries, rep.Rejected = int(events.Load()), int(requests.Load()), int(retries.Load()), int(rejected.Load())
	select {
	case err := <-errc:
		return rep, err
	default:
	}
	if cfg.KeepWritten {
		rep.Written = map[string][]fsm.Event{}
		rep.Last = map[string]snapshot.Position{}
		rep.Resent = map[string]bool{}
		for _, s := range all {
			rep.Written[s.id] = s.written
			if s.hasLast {
				rep.Last[s.id] = s.last
			}
			if s.resent {
				rep.Resent[s.id] = true
			}
		}
	}
	if cfg.Verify {
		verify(ctx, cfg, all, &rep)
	}
	return rep, nil
}

func eventsOf(ss []*session) [][]fsm.Event {
	out := make([][]fsm.Event, len(ss))
	for i, s := range ss {
		out[i] = s.events
	}
	return out
}

type worker struct {
	cfg                                 Config
	owner                               map[string]*session
	events, requests, retries, rejected *atomic.Int64
}

func (wk *worker) send(ctx context.Context, stream []fsm.Event) error {
	perWorker := 0.0
	if wk.cfg.Rate > 0 {
		perWorker = wk.cfg.Rate / float64(wk.cfg.Concurrency)
	}
	start := time.Now()
	sent := 0
	for i := 0; i < len(stream); i += wk.cfg.Batch {
		batch := stream[i:min(i+wk.cfg.Batch, len(stream))]
		if err := wk.post(ctx, batch); err != nil {
			return err
		}
		sent += len(batch)
		if perWorker > 0 { // pace: sent events should take sent/rate seconds
			if d := time.Duration(float64(sent)/perWorker*float64(time.Second)) - time.Since(start); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
	}
	return nil
}

type ingestAnswer struct {
	Accepted []struct {
		EventID   string `json:"eventId"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	} `json:"accepted"`
}

// post sends one batch until Kafka has taken all of it, resending the whole
// batch after a 503 (safe: resent ids are duplicates to the fold).
func (wk *worker) post(ctx context.Context, batch []fsm.Event) error {
	var body []byte
	ct := "application/json"
	if len(batch) == 1 {
		body = fsm.AppendRecord(nil, &batch[0])
	} else {
		ct = "application/x-ndjson"
		for i := range batch {
			body = fsm.AppendRecord(body, &batch[i])
			body = append(body, '\n')
		}
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.cfg.IngestURL+"/v1/events", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", ct)
		setToken(req, wk.cfg.Token)
		resp, err := wk.cfg.Client.Do(req)
		if err != nil {
			wk.retries.Add(1)
			wk.markResent(batch)
			time.Sleep(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second))
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ans ingestAnswer
		_ = json.Unmarshal(raw, &ans)
		switch {
		case resp.StatusCode == http.StatusAccepted:
			wk.record(batch, ans)
			wk.requests.Add(1)
			wk.events.Add(int64(len(batch)))
			if wk.cfg.Progress != nil {
				wk.cfg.Progress(len(batch))
			}
			return nil
		case resp.StatusCode == http.StatusTooManyRequests: // nothing was written
			time.Sleep(retryAfter(resp, 200*time.Millisecond))
		case resp.StatusCode == http.StatusServiceUnavailable:
			wk.record(batch, ans) // what was written before the failure
			wk.retries.Add(1)
			wk.markResent(batch)
			time.Sleep(retryAfter(resp, time.Second))
		default:
			wk.rejected.Add(1)
			return fmt.Errorf("ingest answered %d: %s", resp.StatusCode, raw)
		}
	}
}

// record appends the accepted events to their sessions' written logs.
func (wk *worker) record(batch []fsm.Event, ans ingestAnswer) {
	byID := map[string]int{}
	for i := range batch {
		byID[batch[i].ID.String()] = i
	}
	// Duplicates within a batch share an id; walk the batch in order and
	// consume answers in order, which is how ingest reports them.
	for _, a := range ans.Accepted {
		i, ok := byID[a.EventID]
		if !ok {
			continue
		}
		s := wk.owner[batch[i].SessionID]
		s.written = append(s.written, batch[i])
		s.last, s.hasLast = snapshot.Position{Partition: a.Partition, Offset: a.Offset}, true
	}
}

func (wk *worker) markResent(batch []fsm.Event) {
	for i := range batch {
		wk.owner[batch[i].SessionID].resent = true
	}
}

// verify reads every session once the projector has folded its last event
// and compares it with the reference fold of what Kafka accepted.
func verify(ctx context.Context, cfg Config, all []*session, rep *Report) {
	var mu sync.Mutex
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range all {
		if !s.hasLast {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			msg := check(ctx, cfg, s)
			mu.Lock()
			defer mu.Unlock()
			if msg == "" {
				rep.Verified++
			} else {
				rep.Mismatches = append(rep.Mismatches, s.id+": "+msg)
			}
		}()
	}
	wg.Wait()
}

// Expected returns the reference fold of events.
func Expected(events []fsm.Event) fsm.Session {
	var s fsm.Session
	var r fsm.Reducer
	for i := range events {
		r.Apply(&s, &events[i])
	}
	return s
}

type served struct {
	State   string `json:"state"`
	Version uint64 `json:"version"`
	Digest  string `json:"digest"`
	// Counters holds numbers, and objects such as counters.custom (by
	// type); only the numbers are compared.
	Counters map[string]json.RawMessage `json:"counters"`
}

func check(ctx context.Context, cfg Config, s *session) string {
	want := Expected(s.written)
	url := fmt.Sprintf("%s/v1/sessions/%s?minPosition=%s&wait=10s", cfg.QueryURL, s.id, s.last)
	var got served
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		setToken(req, cfg.Token)
		resp, err := cfg.Client.Do(req)
		if err != nil {
			return err.Error()
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound && !want.Exists() {
			return ""
		}
		if resp.StatusCode == http.StatusGatewayTimeout && attempt < 5 {
			continue
		}
		if resp.StatusCode == http.StatusTooManyRequests && attempt < 50 {
			time.Sleep(retryAfter(resp, 200*time.Millisecond))
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("query answered %d: %s", resp.StatusCode, raw)
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			return err.Error()
		}
		break
	}
	var diffs []string
	if got.State != want.State.String() {
		diffs = append(diffs, fmt.Sprintf("state %s, want %s", got.State, want.State))
	}
	if got.Version != want.Version {
		diffs = append(diffs, fmt.Sprintf("version %d, want %d", got.Version, want.Version))
	}
	if got.Digest != hex.EncodeToString(want.Digest[:]) {
		diffs = append(diffs, "digest differs")
	}
	c := want.Counters
	expect := map[string]uint64{"modelTurns": c.ModelTurns, "toolCalls": c.ToolCalls, "toolFailures": c.ToolFailures,
		"repairCycles": c.RepairCycles, "pauses": c.Pauses, "approvalsRequested": c.ApprovalsRequested,
		"approvalsGranted": c.ApprovalsGranted, "approvalsDenied": c.ApprovalsDenied, "recoveries": c.Recoveries,
		"rejected": c.Rejected}
	if !s.resent { // a resend after a lost answer can add duplicates only Kafka saw
		expect["events"], expect["duplicates"] = c.Events, c.Duplicates
	}
	for k, v := range expect {
		var n uint64
		if err := json.Unmarshal(got.Counters[k], &n); err != nil || n != v {
			diffs = append(diffs, fmt.Sprintf("counters.%s %s, want %d", k, got.Counters[k], v))
		}
	}
	if len(diffs) > 0 {
		return fmt.Sprint(diffs)
	}
	return ""
}

func setToken(req *http.Request, token string) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// retryAfter is the wait a 429 or 503 advises, or def.
func retryAfter(resp *http.Response, def time.Duration) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return def
}
