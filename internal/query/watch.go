package query

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of WatchOptions, and the bounds of a watch request.
const (
	DefaultHeartbeat              = 15 * time.Second
	DefaultWatchQueue             = 256
	DefaultMaxWatches             = 1024
	DefaultMaxWatchesPerPrincipal = 16
	DefaultWatchWriteTimeout      = 10 * time.Second
	DefaultCatchUpTimeout         = 30 * time.Second
	DefaultCatchUps               = 4
	DefaultCatchUpQueue           = 256
	DefaultWatchMaxLifetime       = time.Hour
	// MaxWatchLabels bounds the label filters of one watch, as of a
	// listing: a session has at most fsm.MaxLabels labels, so more
	// filters can never all hold.
	MaxWatchLabels = fsm.MaxLabels
	// CatchUpFetchBytes bounds one fetch of a catch-up (all partitions),
	// and CatchUpPartitionBytes its share of one partition, counted as
	// the broker stores the batches (compressed: JSON changes take several
	// times more once decompressed); a catch-up has one fetch in flight
	// and one buffered. A record batch larger than these still comes whole
	// (Kafka's rule, so that a reader always progresses); batches are at
	// most the topic's max.message.bytes (1 MiB by default).
	CatchUpFetchBytes     = 256 << 10
	CatchUpPartitionBytes = 128 << 10
	// catchUpFirstFetch is how long a catch-up may wait for its first
	// fetch whatever CatchUpTimeout says: every catch-up reads something,
	// so that its stream's cursor always moves on.
	catchUpFirstFetch = 10 * time.Second
	// feedPoll is how often the watcher looks for a changes topic that
	// does not exist yet.
	feedPoll = 500 * time.Millisecond
	// maxDrain is how many queued changes are written before a flush.
	maxDrain = 64
	// flushBytes is how much a catch-up buffers before it writes.
	flushBytes = 32 << 10
)

// listOffsetsTimeout bounds the Kafka request that lists the change feed's
// start offsets when a watch begins.
const listOffsetsTimeout = 2 * time.Second

// TypeCursorExpired is the problem type of a cursor older than the change
// feed's retention (410): pkg/wire's.
const TypeCursorExpired = wire.ProblemCursorExpired

// WatchOptions configure a Watcher; the zero value takes every default.
type WatchOptions struct {
	// Heartbeat is the interval of the `: ping` comment on an idle stream
	// (default 15s), so that proxies keep the connection and a dead client
	// is found by a failed write.
	Heartbeat time.Duration
	// Queue is how many changes may wait for one subscriber (default 256);
	// a subscriber whose queue is full is cut, and resumes with its last id.
	Queue int
	// MaxWatches bounds the open watches of the process (default 1024) and
	// MaxWatchesPerPrincipal those of one token, or one client address
	// without authentication (default 16); beyond, 429 with Retry-After.
	MaxWatches, MaxWatchesPerPrincipal int
	// WriteTimeout bounds each write to a watching client (default 10s): a
	// client that does not read is cut then.
	WriteTimeout time.Duration
	// CatchUpTimeout bounds the reading of the feed between a resumed
	// cursor and the live position (default 30s); past it the stream ends
	// at a cursor past everything read (an id-only event when the last
	// changes were filtered out), and the client resumes from there,
	// further on. The first fetch may take up to 10 s whatever this says.
	CatchUpTimeout time.Duration
	// CatchUps bounds the catch-ups that read the feed at once in the
	// process (default 4), each with at most one fetch of
	// CatchUpFetchBytes in flight, so that the memory of catch-ups does
	// not grow with the number of resumed watches. A resumed watch waits
	// its turn, in order, answered 200 with its heartbeat meanwhile.
	CatchUps int
	// CatchUpQueue bounds the resumed watches waiting for a catch-up
	// (default 256); beyond, 429 with Retry-After.
	CatchUpQueue int
	// MaxLifetime ends a stream after this long (default 1h), at a cursor
	// the client resumes from, so that no stream outlives a rotation of
	// credentials for long. A stream also ends when the token file is
	// reloaded without its token (or with other scopes or prefix).
	MaxLifetime time.Duration
	// CursorKey is the secret the cursors are sealed with (see cursor.go);
	// empty draws one at random, and cursors then do not survive a
	// restart nor move between replicas.
	CursorKey []byte
	// Log receives the reader's problems (default slog.Default()).
	Log *slog.Logger
	// Opts are extra Kafka client options (telemetry).
	Opts []kgo.Opt
}

func (o *WatchOptions) withDefaults() {
	orDefault(&o.Heartbeat, DefaultHeartbeat)
	orDefault(&o.Queue, DefaultWatchQueue)
	orDefault(&o.MaxWatches, DefaultMaxWatches)
	orDefault(&o.MaxWatchesPerPrincipal, DefaultMaxWatchesPerPrincipal)
	orDefault(&o.WriteTimeout, DefaultWatchWriteTimeout)
	orDefault(&o.CatchUpTimeout, DefaultCatchUpTimeout)
	orDefault(&o.CatchUps, DefaultCatchUps)
	orDefault(&o.CatchUpQueue, DefaultCatchUpQueue)
	orDefault(&o.MaxLifetime, DefaultWatchMaxLifetime)
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// orDefault sets *v to d when it is zero or negative: an option left out
// (or nonsensical) takes its default.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// watchFilter is what a watch asks for: a listing's filter
// (sessionFilter), or one session's changes. Every condition set must hold.
type watchFilter struct {
	sessionFilter
	session string
}

func (f *watchFilter) match(c *feed.Change) bool {
	return (f.session == "" || c.SessionID == f.session) && f.matchChange(c)
}

// watchAll serves GET /v1/watch.
func (h *Handler) watchAll(w http.ResponseWriter, r *http.Request) {
	f, ok := parseSessionFilter(w, r)
	if !ok {
		return
	}
	h.serveWatch(w, r, watchFilter{sessionFilter: f})
}

// watchSession serves GET /v1/sessions/{id}/watch. It is no sessionRoute:
// it reads the id before the method, which serveWatch checks for both
// watches, and a stream takes GET alone (no HEAD).
func (h *Handler) watchSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !fsm.ValidSessionID(id) {
		badRequest(w, "id", "must be "+fsm.SessionIDRule)
		return
	}
	if !canSee(w, r, id) {
		return
	}
	h.serveWatch(w, r, watchFilter{sessionFilter: sessionFilter{prefix: id}, session: id})
}

// cursorGone answers 410 for a cursor the stream cannot resume from.
func cursorGone(w http.ResponseWriter, detail string) {
	httpx.WriteProblem(w, httpx.Problem{Type: TypeCursorExpired, Status: http.StatusGone,
		Detail: detail + "; read the snapshots and watch again without a cursor"})
}

// serveWatch checks the request's method, cursor and limits, then streams.
func (h *Handler) serveWatch(w http.ResponseWriter, r *http.Request, f watchFilter) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not allowed here; use GET"})
		return
	}
	wt := h.watch
	if wt == nil {
		httpx.Unavailable(w, retryUnconfigured, "watching needs Kafka, and this query service has no brokers configured", nil)
		return
	}
	var from []int64
	if v := r.Header.Get("Last-Event-ID"); v != "" || r.URL.Query().Get("cursor") != "" {
		field := "Last-Event-ID"
		if v == "" {
			field, v = "cursor", r.URL.Query().Get("cursor")
		}
		c, err := wt.DecodeCursor(v)
		switch {
		case errors.Is(err, errCursorForeign):
			cursorGone(w, "the cursor was not issued with this service's cursor key (a cursor of an earlier format, "+
				"one issued before a restart without CORREX_WATCH_CURSOR_KEY_FILE or with another key, or an altered one)")
			return
		case err != nil:
			badRequest(w, field, "is not a cursor this service issued; watch again without it")
			return
		}
		from = c
	}
	p := auth.PrincipalFrom(r.Context())
	who := p.Key()
	if !wt.slots.take(who) {
		tooMany(w, fmt.Sprintf("too many open watches: at most %d per token and %d per process; close one or retry", wt.o.MaxWatchesPerPrincipal, wt.o.MaxWatches))
		return
	}
	defer wt.slots.give(who)
	// The stream lives at most MaxLifetime, and no longer than its token
	// once the token file is reloaded.
	ctx, cancel := context.WithTimeout(r.Context(), wt.o.MaxLifetime)
	defer cancel()
	if reloaded := h.guard.Reloaded(); reloaded != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-reloaded:
				}
				reloaded = h.guard.Reloaded()
				if !h.guard.Still(r, p, auth.ScopeSessionsRead) {
					h.log.Info("watch: the token no longer grants this watch; ending it", "token", p.Name)
					cancel()
					return
				}
			}
		}()
	}
	st := &watchStream{w: w, rc: http.NewResponseController(w), wt: wt, filter: f}
	if h.guard.Reloaded() != nil {
		st.granted = func() bool { return h.guard.Still(r, p, auth.ScopeSessionsRead) }
	}
	if from != nil {
		h.resume(ctx, w, r, st, from)
		return
	}
	sub, live, err := wt.subscribe(ctx, f)
	if err != nil {
		if ctx.Err() == nil {
			httpx.Unavailable(w, retrySoon, "the change feed is not being read yet; retry", nil)
		}
		return
	}
	defer wt.unsubscribe(sub)
	st.sub, st.next = sub, live
	var snap *snapshot.Snapshot
	if f.session != "" {
		snap, err = h.get(ctx, f.session)
		switch {
		case errors.Is(err, snapshot.ErrNotFound):
			notFound(w)
			return
		case errors.Is(err, context.Canceled):
			return
		case err != nil:
			h.storeError(w, err)
			return
		}
	}
	st.start()
	if snap != nil {
		b, err := snap.MarshalJSON()
		if err != nil {
			h.log.Error("watch: encoding a snapshot", "session", f.session, "err", err)
			return
		}
		st.event("snapshot", b)
		st.snap = &snap.Position
		if st.flush() != nil {
			return
		}
	}
	st.live(ctx)
}

// resume serves a watch with a cursor: it checks the cursor against the
// feed, waits for a catch-up turn, subscribes, catches up, then streams.
func (h *Handler) resume(ctx context.Context, w http.ResponseWriter, r *http.Request, st *watchStream, from []int64) {
	wt := st.wt
	select { // the watcher's first look at the feed
	case <-wt.decided:
	case <-ctx.Done():
		return
	case <-time.After(5 * time.Second):
	}
	starts, err := wt.startOffsets(ctx)
	switch {
	case errors.Is(err, errFeedAbsent):
		httpx.Unavailable(w, retrySoon, "the change feed does not exist yet, so no cursor can be resumed; watch without it", nil)
		return
	case err != nil:
		h.log.Warn("watch: reading the change feed's start offsets", "err", err)
		httpx.Unavailable(w, retrySoon, "the change feed is unavailable; retry", nil)
		return
	}
	if len(from) > len(starts) {
		badRequest(w, "cursor", fmt.Sprintf("names %d partitions, and the change feed has %d", len(from), len(starts)))
		return
	}
	for p, o := range from {
		if o < starts[p] {
			cursorGone(w, fmt.Sprintf("the cursor is older than the change feed's retention (partition %d starts at offset %d, the cursor asks for %d)", p, starts[p], o))
			return
		}
	}
	if !wt.queueCatchUp() {
		tooMany(w, fmt.Sprintf("too many resumed watches wait to catch up (at most %d); retry", wt.o.CatchUpQueue))
		return
	}
	st.start()
	err = wt.awaitCatchUp(ctx, func() error {
		st.buf = append(st.buf, ": ping\n\n"...)
		return st.flush()
	})
	if err != nil {
		return
	}
	sub, live, err := wt.subscribe(ctx, st.filter)
	if err != nil {
		wt.doneCatchUp()
		return
	}
	defer wt.unsubscribe(sub)
	st.sub = sub
	// A partition the cursor does not name (the topic grew after it was
	// issued) starts at the live position.
	st.next = append(append([]int64(nil), from...), live[len(from):]...)
	err = wt.catchUp(ctx, st.next, live, func(ch *change) {
		st.take(ch)
	}, func() error {
		if len(st.buf) >= flushBytes || !st.idWritten() {
			st.progress()
			return st.flush()
		}
		return nil
	})
	wt.doneCatchUp()
	if err != nil {
		// Whatever ended the catch-up, the stream ends at a cursor past
		// what it read: the client resumes further on.
		st.progress()
		_ = st.flush()
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errCatchUpLimit):
			h.log.Debug("watch: catch-up ended the stream", "err", err)
		default:
			h.log.Info("watch: catch-up ended the stream", "err", err)
		}
		return
	}
	st.progress()
	if st.flush() != nil {
		return
	}
	st.live(ctx)
}
