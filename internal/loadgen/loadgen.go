// Package loadgen drives realistic workloads against the ingest API and
// verifies the outcome through the query API. Sessions walk random lifecycle
// paths (internal/workload), with a chosen share of invalid and duplicate
// events; each worker owns its sessions and sends their events in order, in
// batches, at a target rate. At the end every session's snapshot is compared
// with the fold of exactly the events Kafka accepted for it, done here with
// pkg/fsm.
package loadgen

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/client"
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
	Prefix              string       // session id prefix (default "lg")
	Verify              bool         // compare every final snapshot with the reference fold
	Client              *http.Client // default: the client's (pkg/client)
	// Start is the occurredAt of the first event (default now).
	Start time.Time
	// Progress, when set, is called after every accepted request.
	Progress func(events int)
	// KeepWritten fills Report.Written.
	KeepWritten bool
	// Token is a bearer token sent with every request (empty: none).
	Token string
	// Settled makes every session end (workload.Options.Settled): none is
	// left in CREATED or running. The demo, which runs for hours, sets it.
	Settled bool
	// Timeouts are each session's own (workload.Options.Timeouts).
	Timeouts fsm.Timeouts
}

// workloadOptions are the generator's options for cfg.
func (cfg Config) workloadOptions() workload.Options {
	return workload.Options{InvalidShare: cfg.InvalidShare, DuplicateShare: cfg.DuplicateShare, Structured: true, Settled: cfg.Settled, Timeouts: cfg.Timeouts}
}

// Generate returns the sessions Run would send for cfg, each session's
// events in the order they are sent, without sending anything.
func Generate(cfg Config) map[string][]fsm.Event {
	cfg = cfg.withDefaults()
	out := make(map[string][]fsm.Event, cfg.Sessions)
	for w := range cfg.Concurrency {
		g := workload.New(cfg.Seed+uint64(w)*7919, cfg.workloadOptions())
		for i := w; i < cfg.Sessions; i += cfg.Concurrency {
			id := cfg.sessionID(i)
			out[id] = g.Session(id, cfg.Start.Add(time.Duration(i)*time.Millisecond))
		}
	}
	return out
}

func (cfg Config) sessionID(i int) string {
	return cfg.Prefix + "-" + strconv.FormatUint(cfg.Seed, 36) + "-" + strconv.Itoa(i)
}

// withDefaults fills in the defaults of the zero fields (but Start, which
// Run sets to now).
func (cfg Config) withDefaults() Config {
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
	return cfg
}

// Report is what a run did.
type Report struct {
	Sessions   int
	Events     int           // events accepted by ingest (resends after a 503 included)
	Requests   int           // requests answered 202
	Retries    int           // requests resent after a 503 or a transport error (by the client)
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
	cfg = cfg.withDefaults()
	c, err := newClient(cfg)
	if err != nil {
		return Report{}, err
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
		g := workload.New(cfg.Seed+uint64(w)*7919, cfg.workloadOptions())
		for i := w; i < cfg.Sessions; i += cfg.Concurrency {
			id := cfg.sessionID(i)
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
			wk := worker{cfg: cfg, c: c, owner: owner, events: &events, requests: &requests, retries: &retries, rejected: &rejected}
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
		verify(ctx, c, all, &rep)
	}
	return rep, nil
}

func newClient(cfg Config) (*client.Client, error) {
	opts := []client.ClientOpt{client.IngestURL(cfg.IngestURL), client.Token(cfg.Token),
		// retry until ctx ends: a broker restart under load is a scenario
		client.Retry(math.MaxInt32, 100*time.Millisecond, 2*time.Second)}
	if cfg.QueryURL != "" { // only a verifying run reads; without it, the client's default stands
		opts = append(opts, client.QueryURL(cfg.QueryURL))
	}
	if cfg.Client != nil {
		opts = append(opts, client.HTTPClient(cfg.Client))
	}
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return c, nil
}

// Verify does what Config.Verify does at the end of Run, when the caller
// chooses: it reads every session of rep (a run with KeepWritten) through
// the query service at cfg.QueryURL, once the projector has folded its last
// accepted event, compares it with the reference fold of what Kafka
// accepted for it, and sets rep.Verified and rep.Mismatches. A test that
// injects faults after the load calls it once the projector has recovered.
func Verify(ctx context.Context, cfg Config, rep *Report) error {
	if rep.Written == nil {
		return errors.New("loadgen: Verify needs a report of a run with KeepWritten")
	}
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	all := make([]*session, 0, len(rep.Written))
	for id, written := range rep.Written {
		last, ok := rep.Last[id]
		all = append(all, &session{id: id, written: written, resent: rep.Resent[id], last: last, hasLast: ok})
	}
	rep.Verified, rep.Mismatches = 0, nil
	verify(ctx, c, all, rep)
	return nil
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
	c                                   *client.Client
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

// clientEvent is e as the client sends it: the same id, so that the
// client's resends are duplicates to the fold.
func clientEvent(e *fsm.Event) client.Event {
	ce := client.Event{ID: e.ID.String(), SessionID: e.SessionID, Type: e.TypeName(), OccurredAt: e.OccurredAt,
		CorrelationID: e.CorrelationID}
	if e.HasExpectedVersion {
		v := e.ExpectedVersion
		ce.ExpectedVersion = &v
	}
	if len(e.Payload) > 0 {
		ce.Payload = json.RawMessage(e.Payload)
	}
	return ce
}

// post sends one batch in one request until Kafka has taken all of it; the
// client retries, and after a 503 resends exactly the unconfirmed events.
func (wk *worker) post(ctx context.Context, batch []fsm.Event) error {
	evs := make([]client.Event, len(batch))
	for i := range batch {
		evs[i] = clientEvent(&batch[i])
	}
	res, err := wk.c.Send(ctx, evs...)
	wk.record(batch, res)
	if res.Resent > 0 {
		wk.retries.Add(int64(res.Resent))
		wk.markResent(batch)
	}
	if err != nil {
		var ve *client.ValidationError
		var se *client.StatusError
		if errors.As(err, &ve) || errors.As(err, &se) {
			wk.rejected.Add(1)
		}
		return err
	}
	wk.requests.Add(1)
	wk.events.Add(int64(len(batch)))
	if wk.cfg.Progress != nil {
		wk.cfg.Progress(len(batch))
	}
	return nil
}

// record appends the accepted events to their sessions' written logs, in
// the batch's order (a session's events keep their order within it).
func (wk *worker) record(batch []fsm.Event, res client.Result) {
	for i, a := range res.Accepted {
		if a.EventID == "" {
			continue
		}
		s := wk.owner[batch[i].SessionID]
		s.written = append(s.written, batch[i])
		if p := (snapshot.Position{Partition: a.Partition, Offset: a.Offset}); !s.hasLast || s.last.Offset < p.Offset {
			s.last, s.hasLast = p, true
		}
	}
}

func (wk *worker) markResent(batch []fsm.Event) {
	for i := range batch {
		wk.owner[batch[i].SessionID].resent = true
	}
}

// verify reads every session once the projector has folded its last event
// and compares it with the reference fold of what Kafka accepted.
func verify(ctx context.Context, c *client.Client, all []*session, rep *Report) {
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
			msg := check(ctx, c, s)
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

// waitRounds bounds the waiting reads of one check: each waits up to 10 s.
const waitRounds = 6

func check(ctx context.Context, c *client.Client, s *session) string {
	want := Expected(s.written)
	rctx, cancel := context.WithTimeout(ctx, waitRounds*10*time.Second)
	defer cancel()
	got, err := c.Get(rctx, s.id, client.MinPosition(client.Position{Partition: s.last.Partition, Offset: s.last.Offset}))
	if errors.Is(err, client.ErrNotFound) && !want.Exists() {
		return ""
	}
	if err != nil {
		return err.Error()
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
	w, g := want.Counters, got.Counters
	type pair struct {
		name      string
		got, want uint64
	}
	pairs := []pair{{"modelTurns", g.ModelTurns, w.ModelTurns}, {"toolCalls", g.ToolCalls, w.ToolCalls},
		{"toolFailures", g.ToolFailures, w.ToolFailures}, {"repairCycles", g.RepairCycles, w.RepairCycles},
		{"pauses", g.Pauses, w.Pauses}, {"approvalsRequested", g.ApprovalsRequested, w.ApprovalsRequested},
		{"approvalsGranted", g.ApprovalsGranted, w.ApprovalsGranted}, {"approvalsDenied", g.ApprovalsDenied, w.ApprovalsDenied},
		{"recoveries", g.Recoveries, w.Recoveries}, {"rejected", g.Rejected, w.Rejected}}
	if !s.resent { // a resend after a lost answer can add duplicates only Kafka saw
		pairs = append(pairs, pair{"events", g.Events, w.Events}, pair{"duplicates", g.Duplicates, w.Duplicates})
	}
	for _, p := range pairs {
		if p.got != p.want {
			diffs = append(diffs, fmt.Sprintf("counters.%s %d, want %d", p.name, p.got, p.want))
		}
	}
	if len(diffs) > 0 {
		return fmt.Sprint(diffs)
	}
	return ""
}
