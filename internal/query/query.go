package query

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
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
	// a waiting read, of each chunk of a listing page): a hung Redis gets a 503 with Retry-After in time,
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
	// (Options.PollEvery); progress wakes it at each checkpoint write
	// (Options.Progress), nil without.
	poll     time.Duration
	progress *progressHub
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
	// progress; default 20ms. With Progress, a waiting read checks at each
	// checkpoint write of its partition, and on its own only every
	// 250ms or PollEvery, whichever is longer.
	PollEvery time.Duration
	// Progress delivers the partitions whose checkpoints were written
	// (snapshot.Store.Progress); nil: waiting reads poll.
	Progress <-chan int32
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
	if o.Progress != nil {
		h.progress = newProgressHub(o.Progress)
	}
	if o.Archive != nil {
		watchArchive(o.Meter, o.Archive, o.Log)
	}
	watchWatches(o.Meter, o.Watch, o.Log)
	// Scopes: sessions:read for reads, histories, listings and the counts of
	// /v1/stats, admin for replays and the partitions' progress in
	// /v1/stats (admin implies sessions:read). A token bound to a
	// session-id prefix sees only the sessions under it.
	mux := http.NewServeMux()
	mux.Handle("/v1/sessions/{id}", auth.Require(auth.ScopeSessionsRead, sessionRoute(http.MethodGet, h.getSession)))
	mux.Handle("/v1/sessions/{id}/replay", auth.Require(auth.ScopeAdmin, sessionRoute(http.MethodGet, h.replay)))
	mux.Handle("/v1/sessions/{id}/history", auth.Require(auth.ScopeSessionsRead, sessionRoute(http.MethodGet, h.history)))
	mux.Handle("/v1/sessions/{id}/watch", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.watchSession)))
	mux.Handle("/v1/watch", auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(h.watchAll)))
	mux.Handle("/v1/sessions/{id}/rebuild", auth.Require(auth.ScopeAdmin, sessionRoute(http.MethodPost, h.rebuild)))
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
