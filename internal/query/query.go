// Package query serves the read model over HTTP: a session's snapshot (with
// ETag and read-your-writes waits), listings by state, statistics, a
// replay that rebuilds a session from the Kafka log to check the stored
// snapshot, a session as of a version or a time (asof.go), a session's whole history read from the log in pages (history.go
// argues its cursor), and watches: Server-Sent Events streams of the change
// feed (watch.go; Watcher's comment argues how they stay gap-free and
// bounded). Only the replay, the rebuild, the history and the watches touch
// Kafka; a session whose first events left the log answers them 409
// history-truncated (truncated.go). Closed sessions that left Redis are read
// back from the archive, and listed (archived.go). Metrics: correx.query.replays by outcome (match, mismatch) and
// correx.query.rebuilds by outcome (match, replaced, kept). For the console
// it also says who a token is (GET /v1/whoami) and forwards a session's
// actions to ingest with the caller's token (actions.go); it writes no event
// itself.
package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"go.opentelemetry.io/otel/metric"
)

// Limits of the API.
const (
	MaxWait      = 10 * time.Second
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxListBytes bounds a listing page's JSON: the page stops before the
	// session that would take it past this size (it always holds one
	// session, whatever its size), and its cursor continues from there.
	MaxListBytes = 4 << 20
	// RedisTimeout bounds the Redis work of a request (of each round of
	// a waiting read): a hung Redis gets a 503 with Retry-After in time,
	// not a request held until the client gives up.
	RedisTimeout = 2 * time.Second
)

// Replayer rebuilds a session from the log, up to the stored snapshot's
// position. What it returns is the fold alone: the handler gives it the
// store's timeout defaults.
type Replayer interface {
	Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error)
}

// Handler serves the query API. Create it with NewHandler.
type Handler struct {
	store    Store
	topic    string
	replayer Replayer
	log      *slog.Logger
	// poll is how often a waiting read checks the projector's progress
	// (Options.PollEvery).
	poll time.Duration
	// replayLimit bounds a replay or rebuild (Options.ReplayLimit).
	replayLimit time.Duration
	waits       *waitSlots
	parts       *partitionCount
	replays     chan struct{}
	watch       *Watcher
	guard       *auth.Guard
	api         http.Handler
	// histCursors seals the history's cursors, folds keeps the fold
	// states where history pages ended (history.go).
	histCursors cursorSealer
	folds       *foldCache
	// archCursors seals the archive listing's cursors (archived.go).
	archCursors cursorSealer
	metrics     *metrics
	logStarts   *logStartCache
	archive     Archive
	// archiveReads bounds the archived reads, apart from the replays;
	// heads keeps archived heads for the next reads (archived.go).
	archiveReads *waitSlots
	heads        *headCache
}

// Options bound the expensive requests.
type Options struct {
	MaxWaiting int // concurrent reads waiting for a position (default 256)
	MaxReplays int // concurrent replays (default 4)
	Log        *slog.Logger
	// PollEvery is how often a waiting read checks the projector's
	// progress; default 20ms.
	PollEvery time.Duration
	// ReplayLimit is the longest a replay or a rebuild may read the log
	// (then 503); default 30s.
	ReplayLimit time.Duration
	// MaxWaitingPerPrincipal bounds the reads one token (or, without
	// authentication, one client address) may have waiting at once
	// (default a quarter of MaxWaiting), so that no caller takes every
	// waiting slot from the others.
	MaxWaitingPerPrincipal int
	// Partitions tells how many partitions the topic has, to refuse a
	// minPosition on a partition that does not exist (400); nil accepts
	// every partition.
	Partitions PartitionCounter
	// PartitionsEvery is the shortest time between two questions to
	// Partitions, asked when a position names a partition beyond the known
	// count (default 1s).
	PartitionsEvery time.Duration
	// Guard authenticates and rate-limits every request; nil serves
	// without authentication (auth.Open), as the tests of the handler do.
	// Serve always passes the guard of its settings.
	Guard *auth.Guard
	// Watch serves the watches; nil answers them 503 (no Kafka).
	Watch *Watcher
	// CursorKey is the secret the history's and the archive listing's
	// cursors are sealed with, each under a key of its own (Serve passes
	// the watch cursors' secret);
	// empty draws a key at random, valid in this process only.
	CursorKey []byte
	// HistoryCache is how many fold states the history keeps for the next
	// pages (default DefaultHistoryCache; negative keeps none, and every
	// page after the first folds the session again from its start).
	HistoryCache int
	// Meter records the service's metrics (correx.query.*); nil records
	// none.
	Meter metric.MeterProvider
	// IngestURL is where POST /v1/sessions/{id}/actions forwards the
	// console's actions (actions.go); "" answers them 503.
	IngestURL string
	// LogStarts tells where the events topic's partitions start, so that
	// the history, replay and rebuild of a session whose first events left
	// the log answer 409 history-truncated (truncated.go); nil takes the
	// log as whole.
	LogStarts LogStarts
	// Archive is where closed sessions that left Redis are read back
	// (archived.go); nil: no archive (GET /v1/archive answers 503).
	Archive Archive
	// MaxArchiveReads bounds the archived reads (a session's snapshot or
	// history page read from the archive) running at once, apart from the
	// replays' bound; default DefaultArchiveReads.
	MaxArchiveReads int
	// MaxArchiveReadsPerPrincipal bounds those of one token (or client
	// address); default DefaultArchiveReadsPerPrincipal, at most
	// MaxArchiveReads.
	MaxArchiveReadsPerPrincipal int
	// ArchiveHeadCache bounds, in bytes, the archived heads kept for the
	// next reads (headcache.go); default DefaultArchiveHeadCache; negative
	// keeps none.
	ArchiveHeadCache int64
}

// NewHandler returns the query API over store for topic. replayer may be nil
// (replay then answers 503).
func NewHandler(store Store, topic string, replayer Replayer, o Options) *Handler {
	if o.MaxWaiting <= 0 {
		o.MaxWaiting = 256
	}
	if o.MaxReplays <= 0 {
		o.MaxReplays = 4
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 20 * time.Millisecond
	}
	if o.ReplayLimit <= 0 {
		o.ReplayLimit = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxWaitingPerPrincipal <= 0 {
		o.MaxWaitingPerPrincipal = max(1, o.MaxWaiting/4)
	}
	if o.PartitionsEvery <= 0 {
		o.PartitionsEvery = time.Second
	}
	if o.Guard == nil {
		o.Guard = auth.Open()
	}
	if o.HistoryCache == 0 {
		o.HistoryCache = DefaultHistoryCache
	}
	if o.MaxArchiveReads <= 0 {
		o.MaxArchiveReads = DefaultArchiveReads
	}
	if o.MaxArchiveReadsPerPrincipal <= 0 {
		o.MaxArchiveReadsPerPrincipal = DefaultArchiveReadsPerPrincipal
	}
	if o.ArchiveHeadCache == 0 {
		o.ArchiveHeadCache = DefaultArchiveHeadCache
	}
	h := &Handler{store: store, topic: topic, replayer: replayer, log: o.Log, poll: o.PollEvery, replayLimit: o.ReplayLimit,
		waits:   newWaitSlots(o.MaxWaiting, o.MaxWaitingPerPrincipal),
		parts:   &partitionCount{src: o.Partitions, every: o.PartitionsEvery},
		replays: make(chan struct{}, o.MaxReplays), watch: o.Watch, guard: o.Guard,
		histCursors: newSealer(historyKeyLabel, o.CursorKey), archCursors: newSealer(archiveKeyLabel, o.CursorKey), folds: newFoldCache(o.HistoryCache), metrics: newMetrics(o.Meter, o.Log),
		logStarts: &logStartCache{src: o.LogStarts, every: logStartsEvery}, archive: o.Archive,
		archiveReads: newWaitSlots(o.MaxArchiveReads, o.MaxArchiveReadsPerPrincipal), heads: newHeadCache(o.ArchiveHeadCache)}
	if o.Archive != nil {
		watchArchive(o.Meter, o.Archive, o.Log)
	}
	watchWatches(o.Meter, o.Watch, o.Log)
	// Scopes: sessions:read for reads, histories, listings and the counts of
	// /v1/stats, admin for replays and the partitions' progress in
	// /v1/stats (admin implies sessions:read). A token bound to a
	// session-id prefix sees only the sessions under it.
	mux := http.NewServeMux()
	mux.Handle("/v1/sessions/{id}", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.getSession)))
	mux.Handle("/v1/sessions/{id}/replay", auth.Require(auth.ScopeAdmin, http.HandlerFunc(h.replay)))
	mux.Handle("/v1/sessions/{id}/history", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.history)))
	mux.Handle("/v1/sessions/{id}/watch", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.watchSession)))
	mux.Handle("/v1/watch", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.watchAll)))
	mux.Handle("/v1/sessions/{id}/rebuild", auth.Require(auth.ScopeAdmin, http.HandlerFunc(h.rebuild)))
	mux.Handle("/v1/sessions", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.list)))
	mux.Handle("/v1/archive", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.listArchive)))
	mux.Handle("/v1/stats", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.stats)))
	mux.Handle("/v1/verify", auth.Require(auth.ScopeAdmin, http.HandlerFunc(h.verify)))
	registerConsoleRoutes(mux, o.IngestURL, o.Log)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeEndpointNotFound, Status: http.StatusNotFound, Detail: "no such endpoint"})
	})
	h.api = o.Guard.Authenticate(mux)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.api.ServeHTTP(w, r) }

func onlyGET(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
		Detail: r.Method + " is not allowed here; use GET"})
	return false
}

func badRequest(w http.ResponseWriter, field, msg string) {
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest, Detail: field + ": " + msg,
		Errors: []httpx.FieldError{{Field: field, Message: msg}}})
}

// notFound answers 404 for a session that does not exist or that the
// token may not see (outside its prefix): the two answers are the same
// bytes, so a tenant cannot learn which of another tenant's ids exist. The
// id is left out of the body since the caller knows it.
func notFound(w http.ResponseWriter) {
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: http.StatusNotFound, Detail: "no such session"})
}

// visible reports whether the request's principal may see the session.
func visible(r *http.Request, id string) bool { return auth.PrincipalFrom(r.Context()).Owns(id) }

// get reads a snapshot within RedisTimeout.
func (h *Handler) get(ctx context.Context, id string) (*snapshot.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	return h.store.Get(ctx, id)
}

// checkpoints reads the topic's checkpoints within RedisTimeout.
func (h *Handler) checkpoints(ctx context.Context) (map[int32]snapshot.Checkpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	return h.store.Checkpoints(ctx, h.topic)
}

func (h *Handler) storeError(w http.ResponseWriter, err error) {
	h.log.Error("store", "err", err)
	httpx.Unavailable(w, time.Second, "the read model is unavailable", nil)
}

// ETag returns the entity tag of a snapshot: its version and the number of
// events seen. Version alone is not enough, since rejected and duplicate
// events change counters without changing the version.
func ETag(s *snapshot.Snapshot) string {
	return `"` + strconv.FormatUint(s.Version, 10) + "." + strconv.FormatUint(s.Counters.Events, 10) + `"`
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	id := r.PathValue("id")
	if !fsm.ValidSessionID(id) {
		badRequest(w, "id", "must be "+fsm.SessionIDRule)
		return
	}
	q := r.URL.Query()
	if q.Has("asOf") {
		h.getAsOf(w, r, id)
		return
	}
	var wait time.Duration
	var minPos *snapshot.Position
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxWait {
			badRequest(w, "wait", fmt.Sprintf("must be a duration between 0s and %v, such as 2s", MaxWait))
			return
		}
		wait = d
	}
	if v := q.Get("minPosition"); v != "" {
		p, err := snapshot.ParsePosition(v)
		if err != nil {
			badRequest(w, "minPosition", "must be PARTITION:OFFSET, as returned by ingest's position")
			return
		}
		if ok, n := h.parts.exists(r.Context(), p.Partition); !ok {
			badRequest(w, "minPosition", fmt.Sprintf("partition %d does not exist: the topic has %d partitions (0 to %d)", p.Partition, n, n-1))
			return
		}
		minPos = &p
	} else if wait > 0 {
		badRequest(w, "wait", "needs minPosition: the position to wait for")
		return
	}
	if !visible(r, id) {
		notFound(w)
		return
	}
	snap, err := h.read(r.Context(), auth.PrincipalFrom(r.Context()).Key(), id, minPos, wait)
	switch {
	case errors.Is(err, errNotReached):
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeTimeout, Status: http.StatusGatewayTimeout,
			Detail: fmt.Sprintf("the projector has not folded up to %s within %v", minPos, wait)})
		return
	case errors.Is(err, errBusy):
		httpx.Unavailable(w, time.Second, "too many reads are waiting; retry", nil)
		return
	case errors.Is(err, snapshot.ErrNotFound):
		h.serveArchived(w, r, id)
		return
	case errors.Is(err, context.Canceled):
		return
	case err != nil:
		h.storeError(w, err)
		return
	}
	if notModified(w, r, ETag(snap)) {
		return
	}
	httpx.WriteJSON(w, http.StatusOK, snap)
}

// notModified sets a snapshot answer's ETag and Cache-Control and, when
// the request's If-None-Match matches etag, answers 304 and reports true.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && (match == etag || match == "*" || match == "W/"+etag) {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

// parseLimit reads the limit parameter of a listing: def when absent or
// empty, otherwise an integer from 1 to most (a 400 naming it if not).
func parseLimit(w http.ResponseWriter, q url.Values, def, most int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		badRequest(w, "limit", fmt.Sprintf("must be an integer from 1 to %d", most))
		return 0, false
	}
	return n, true
}

var (
	errNotReached = errors.New("position not reached")
	errBusy       = errors.New("too many waiting reads")
)

// read returns the snapshot, first waiting (up to wait) until partition P is
// folded up to offset O when minPos is set. The position counts as reached
// when the partition's checkpoint is past O, or when the snapshot itself is
// at or past it (snapshots are written before checkpoints).
func (h *Handler) read(ctx context.Context, who, id string, minPos *snapshot.Position, wait time.Duration) (*snapshot.Snapshot, error) {
	if minPos == nil {
		return h.get(ctx, id)
	}
	if !h.waits.take(who) {
		return nil, errBusy
	}
	defer h.waits.give(who)
	deadline := time.Now().Add(wait)
	for {
		snap, err := h.get(ctx, id)
		if err != nil && !errors.Is(err, snapshot.ErrNotFound) {
			return nil, err
		}
		if snap != nil && snap.Position.Partition == minPos.Partition && snap.Position.Offset >= minPos.Offset {
			return snap, nil
		}
		cps, cerr := h.checkpoints(ctx)
		if cerr != nil {
			return nil, cerr
		}
		if cp, ok := cps[minPos.Partition]; ok && cp.Offset > minPos.Offset {
			// Read again: the projector may have written the newer snapshot
			// (and then this checkpoint) after the read above, and only a
			// read after the checkpoint is sure to see it.
			return h.get(ctx, id)
		}
		if !time.Now().Before(deadline) {
			return nil, errNotReached
		}
		if err := sleepCtx(ctx, min(h.poll, time.Until(deadline))); err != nil {
			return nil, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ListResponse is the body of GET /v1/sessions (written piecewise by
// listPage, within MaxListBytes).
type ListResponse struct {
	Sessions []*snapshot.Snapshot `json:"sessions"`
	Next     *string              `json:"next"`
}

// stateMessage refuses a state filter that names no state.
var stateMessage = func() string {
	names := make([]string, 0, fsm.NumStates-1)
	for _, s := range fsm.States() {
		names = append(names, s.String())
	}
	return "must be one of " + strings.Join(names, ", ")
}()

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	q := r.URL.Query()
	f, ok := parseSessionFilter(w, r)
	if !ok {
		return
	}
	limit, ok := parseLimit(w, q, DefaultLimit, MaxLimit)
	if !ok {
		return
	}
	if f.none {
		httpx.WriteJSON(w, http.StatusOK, ListResponse{Sessions: []*snapshot.Snapshot{}})
		return
	}
	state, prefix, filter := f.state, f.prefix, f.store()
	ctx, cancel := context.WithTimeout(r.Context(), RedisTimeout)
	defer cancel()
	body, err := h.listPage(ctx, state, prefix, filter, q.Get("cursor"), limit)
	if errors.Is(err, snapshot.ErrBadCursor) {
		badRequest(w, "cursor", "is not a cursor this service issued; start again without it")
		return
	}
	if err != nil {
		h.storeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// Listing reads in chunks: the first of minListChunk sessions, the next
// ones sized by the page's remaining bytes over the mean size so far, never
// more than maxListChunk, so that memory stays near MaxListBytes plus one
// chunk of snapshots while small snapshots still take few round trips.
const (
	minListChunk = 32
	maxListChunk = 256
	// listTail is room kept for `],"next":"CURSOR"}` (a cursor is the
	// base64 of a bucket and a session id of at most 128 bytes).
	listTail = 256
)

// listPage encodes the ListResponse of at most limit index entries from
// cursor, stopping before the session that would take the page past
// MaxListBytes (the first session is always taken, so paging advances
// whatever the sizes stored). Next then continues right after the last
// session of the page: none is skipped or repeated. With a label or parent
// filter, limit counts the sessions examined (see snapshot.ListFiltered):
// the page may hold fewer, or none, and still carry next.
func (h *Handler) listPage(ctx context.Context, state fsm.State, prefix string, filter snapshot.Filter, cursor string, limit int) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"sessions":[`)
	n, next, chunk := 0, "", min(limit, minListChunk)
fill:
	for limit > 0 {
		page, err := h.store.ListFiltered(ctx, state, prefix, filter, cursor, chunk)
		if err != nil {
			return nil, err
		}
		for i, snap := range page.Snapshots {
			b, err := snap.MarshalJSON()
			if err != nil {
				return nil, err
			}
			if n > 0 && buf.Len()+1+len(b)+listTail > MaxListBytes {
				break fill // next is the cursor after the last session taken
			}
			if n > 0 {
				buf.WriteByte(',')
			}
			buf.Write(b)
			n++
			next = page.After[i]
		}
		limit -= chunk
		cursor, next = page.Next, page.Next
		if cursor == "" {
			break
		}
		chunk = min(limit, minListChunk)
		if n > 0 {
			mean := buf.Len() / n
			chunk = min(limit, max(chunk, min(maxListChunk, (MaxListBytes-buf.Len())/mean+1)))
		}
	}
	buf.WriteString(`],"next":`)
	if next == "" {
		buf.WriteString("null")
	} else {
		buf.WriteString(`"` + next + `"`)
	}
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

// Stats is the body of GET /v1/stats (pkg/wire's, which the client reads
// too).
type Stats = wire.Stats

// PartitionStats is one partition's progress.
type PartitionStats = wire.PartitionStats

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	p := auth.PrincipalFrom(r.Context())
	prefix := p.SessionPrefix()
	ctx, cancel := context.WithTimeout(r.Context(), RedisTimeout)
	defer cancel()
	counts, err := h.store.CountPrefix(ctx, prefix)
	if err != nil {
		h.storeError(w, err)
		return
	}
	var st Stats
	st.Topic, st.Prefix = h.topic, prefix
	st.Sessions.Total = counts.Total
	st.Sessions.ByState = map[string]int64{}
	for _, s := range fsm.States() {
		st.Sessions.ByState[s.String()] = counts.ByState[s]
	}
	if prefix != "" || !p.Has(auth.ScopeAdmin) {
		httpx.WriteJSON(w, http.StatusOK, st)
		return
	}
	cps, err := h.store.Checkpoints(ctx, h.topic)
	if err != nil {
		h.storeError(w, err)
		return
	}
	st.Partitions = []PartitionStats{}
	for _, cp := range cps {
		ps := PartitionStats{Partition: cp.Partition, Checkpoint: cp.Offset}
		if !cp.Time.IsZero() {
			t := cp.Time
			ps.CheckpointAt = &t
		}
		if lag, ok := cp.Lag(); ok {
			hw := cp.HighWatermark
			ps.HighWatermark, ps.Lag = &hw, &lag
		}
		st.Partitions = append(st.Partitions, ps)
	}
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	httpx.WriteJSON(w, http.StatusOK, st)
}

// ReplayResponse is the body of GET /v1/sessions/{id}/replay.
type ReplayResponse struct {
	Snapshot      *snapshot.Snapshot `json:"snapshot"`
	MatchesStored bool               `json:"matchesStored"`
	Stored        snapshot.Position  `json:"storedPosition"`
}

func (h *Handler) replay(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	id := r.PathValue("id")
	if !fsm.ValidSessionID(id) {
		badRequest(w, "id", "must be "+fsm.SessionIDRule)
		return
	}
	if !visible(r, id) {
		notFound(w)
		return
	}
	stored, rebuilt, ok := h.fromLog(w, r, id, "replay")
	if !ok {
		return
	}
	match := bytes.Equal(rebuilt.AppendBinary(nil), stored.AppendBinary(nil))
	h.metrics.replayed(r.Context(), match)
	httpx.WriteJSON(w, http.StatusOK, ReplayResponse{Snapshot: rebuilt, Stored: stored.Position, MatchesStored: match})
}

// fromLog reads the stored snapshot of id and folds the session again from
// the log (what names the operation, "replay" or "rebuild", in the
// answers), under the bound that replays and rebuilds share. When it cannot,
// it answers the request itself and returns ok false.
func (h *Handler) fromLog(w http.ResponseWriter, r *http.Request, id, what string) (stored, rebuilt *snapshot.Snapshot, ok bool) {
	if h.replayer == nil {
		httpx.Unavailable(w, 30*time.Second, what+" needs Kafka, and this query service has no brokers configured", nil)
		return nil, nil, false
	}
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	default:
		httpx.Unavailable(w, 5*time.Second, "too many replays and rebuilds are running; retry", nil)
		return nil, nil, false
	}
	stored, err := h.get(r.Context(), id)
	if errors.Is(err, snapshot.ErrNotFound) {
		notFound(w)
		return nil, nil, false
	}
	if err != nil {
		h.storeError(w, err)
		return nil, nil, false
	}
	if h.truncated(w, r, stored, what) {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.replayLimit)
	defer cancel()
	rebuilt, err = h.replayer.Replay(ctx, stored)
	if err != nil {
		h.log.Warn(what, "session", id, "err", err)
		httpx.Unavailable(w, 5*time.Second, what+" from Kafka failed: "+err.Error(), nil)
		return nil, nil, false
	}
	// The service's timeout defaults, as the store set them on stored (the
	// CORREX_TIMEOUT_* settings, bound as the projector binds them): the
	// rebuilt snapshot shows the effective timeouts and the deadline the
	// projector arms, as the stored one does.
	rebuilt.TimeoutDefaults = stored.TimeoutDefaults
	return stored, rebuilt, true
}
