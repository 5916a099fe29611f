package query

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
	// MaxWatchLabels bounds the label filters of one watch (a session has
	// at most 16 labels, so more filters can never all hold).
	MaxWatchLabels = 16
	// maxCursorChars bounds a cursor before it is decoded: 4096 partitions
	// of 10-byte varints in base64.
	maxCursorChars      = 56 << 10
	maxCursorPartitions = 4096
	cursorVersion       = 1
	// maxDrain is how many queued changes are written before a flush.
	maxDrain = 64
)

// TypeCursorExpired is the problem type of a cursor older than the change
// feed's retention (410).
const TypeCursorExpired = "https://correx.dev/problems/cursor-expired"

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
	// and the client resumes from its last id, further on.
	CatchUpTimeout time.Duration
	// Log receives the reader's problems (default slog.Default()).
	Log *slog.Logger
	// Opts are extra Kafka client options (telemetry).
	Opts []kgo.Opt
}

func (o *WatchOptions) withDefaults() {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Queue <= 0 {
		o.Queue = DefaultWatchQueue
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.MaxWatchesPerPrincipal <= 0 {
		o.MaxWatchesPerPrincipal = DefaultMaxWatchesPerPrincipal
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWatchWriteTimeout
	}
	if o.CatchUpTimeout <= 0 {
		o.CatchUpTimeout = DefaultCatchUpTimeout
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Watcher serves the watches (GET /v1/watch, GET /v1/sessions/{id}/watch)
// from the change feed, "<topic>.changes" (docs/exactly-once.md). Create it with
// NewWatcher, run it with Run, and hand it to the Handler in Options.Watch.
//
// One reader per process, fanned out. Run reads the feed with one Kafka
// client from the end of every partition and offers each change to every
// subscriber whose filter it passes, into that subscriber's queue of
// WatchOptions.Queue changes. So a thousand watches cost one consumer, and
// a change is decoded and encoded once whatever the number of watches. The
// offer never blocks: a subscriber whose queue is full is cut (its stream
// ends; the client resumes with its last id), so one slow client neither
// holds the reader back nor makes the process buffer without bound. Memory
// is at most Queue changes per subscriber, shared between subscribers.
//
// Cursors. The feed is partitioned, so a position in it is, per partition
// of the changes topic, the next offset to read: a cursor is that vector
// (base64url of a version byte, the partition count and one uvarint offset
// per partition), and every event carries the cursor just after it. Each
// stream keeps such a vector and writes a change only when its offset is at
// or past the vector's entry for its partition, then moves the entry past
// it; changes of one partition arrive in offset order, so nothing is
// written twice and, as every source below covers a contiguous range,
// nothing is skipped.
//
// Resuming. A watch with a cursor (Last-Event-ID, or ?cursor=) first
// subscribes, which returns the reader's position H at that instant under
// the same lock that offers changes: the queue gets every change from H on.
// Then a direct consumer of its own (no group) reads, per partition, from
// the cursor up to H and writes what passes the filter; then the queue is
// written, where changes before the stream's vector are dropped. A
// per-watch consumer only for the catch-up keeps the live path shared while
// letting a resume start anywhere in the retained feed: the oldest cursor
// that can be resumed is the topic's retention (a cursor older than the log
// start gets 410). A catch-up that overruns its queue is cut like any slow
// subscriber, and resumes further on.
//
// A session's watch subscribes first, then reads the snapshot: a change
// missing from the snapshot is written to the feed after the snapshot's
// write (the projector writes snapshots, then changes, then the
// checkpoint), so after the subscription, and is in the queue. Changes in
// the queue at or below the snapshot's position are already in it and are
// dropped. The snapshot event's id is H, at or before the snapshot.
//
// Partitions are learnt when Run starts: a changes topic grown later is
// read in full after a restart; until then a cursor's extra partitions are
// refused (400). Run ends every stream when it returns.
type Watcher struct {
	kcfg  kafka.Config
	topic string // the changes topic
	o     WatchOptions
	slots *waitSlots

	mu    sync.Mutex // guards what follows; held to offer a change, never across I/O
	ready bool       // positions known, reading
	next  []int64    // per partition, the next offset the reader offers
	subs  map[*subscriber]struct{}
	cuts  int64 // subscribers cut for a full queue
	adm   *kadm.Client
	done  chan struct{} // closed when Run returns
	ended bool
}

// NewWatcher returns a watcher of eventsTopic's change feed; it does not
// contact Kafka until Run.
func NewWatcher(cfg kafka.Config, eventsTopic string, o WatchOptions) *Watcher {
	o.withDefaults()
	return &Watcher{kcfg: cfg, topic: feed.Topic(eventsTopic), o: o,
		slots: newWaitSlots(o.MaxWatches, o.MaxWatchesPerPrincipal),
		subs:  map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// Run reads the change feed until ctx is done, then ends every stream. It
// waits (retrying each second) for the changes topic to exist; watches
// answer 503 until then. It returns nil when ctx ends, or the error that
// kept it from reading.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.end()
	adm, err := kafka.NewClient(w.kcfg, w.o.Opts...)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer adm.Close()
	// Until the projector has created the changes topic, each attempt is
	// logged at debug level; a warning says so once a minute.
	var next []int64
	var warned time.Time
	for {
		if next, err = endOffsets(ctx, kadm.NewClient(adm.Client), w.topic); err == nil {
			break
		}
		w.o.Log.Debug("watch: the change feed is not readable yet", "topic", w.topic, "err", adm.Explain(err))
		if time.Since(warned) >= time.Minute {
			warned = time.Now()
			w.o.Log.Warn("watch: the change feed is not readable yet; watches answer 503 until it is (retrying each second)",
				"topic", w.topic, "err", adm.Explain(err))
		}
		if sleepCtx(ctx, time.Second) != nil {
			return nil
		}
	}
	w.o.Log.Info("watch: reading the change feed", "topic", w.topic, "partitions", len(next))
	offs := make(map[int32]kgo.Offset, len(next))
	for p, o := range next {
		offs[int32(p)] = kgo.NewOffset().At(o)
	}
	cl, err := kafka.NewClient(w.kcfg, append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: offs})}, w.o.Opts...)...)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer cl.Close()
	w.mu.Lock()
	w.next, w.adm, w.ready = next, kadm.NewClient(adm.Client), true
	w.mu.Unlock()
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(_ string, p int32, err error) {
			w.o.Log.Warn("watch: reading the change feed", "partition", p, "err", cl.Explain(err))
		})
		fetches.EachRecord(w.offer)
	}
}

// endOffsets returns the end offset of each partition of topic, which must
// be numbered 0 to n-1.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, err
	}
	ps := listed[topic]
	if len(ps) == 0 {
		return nil, fmt.Errorf("topic %s: %w", topic, kerr.UnknownTopicOrPartition)
	}
	next := make([]int64, len(ps))
	for p := range next {
		o, ok := ps[int32(p)]
		if !ok {
			return nil, fmt.Errorf("topic %s: partition %d of %d is missing", topic, p, len(ps))
		}
		next[p] = o.Offset
	}
	return next, nil
}

// end stops offering and ends every stream.
func (w *Watcher) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.ended, w.ready = true, false
		clear(w.subs)
		close(w.done)
	}
}

// change is a decoded record of the feed, shared by every queue it is in;
// it is never modified after decoding.
type change struct {
	part   int32 // partition of the changes topic
	offset int64
	c      feed.Change
	data   []byte // c's canonical JSON (one line)
}

// subscriber is one open watch: its filter, its queue, and cut, closed
// by the reader when the queue overflowed.
type subscriber struct {
	filter watchFilter
	queue  chan *change
	cut    chan struct{}
}

// offer decodes a record and offers it to every subscriber it passes. A
// record that does not decode is skipped (and logged): the position moves
// past it, so it costs no watch anything.
func (w *Watcher) offer(rec *kgo.Record) {
	ch := &change{part: rec.Partition, offset: rec.Offset}
	err := feed.Decode(rec.Value, &ch.c)
	if err != nil {
		w.o.Log.Warn("watch: skipping a change that does not decode", "partition", rec.Partition, "offset", rec.Offset, "err", err)
	} else {
		ch.data = ch.c.AppendJSON(nil)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(rec.Partition) < len(w.next) {
		w.next[rec.Partition] = rec.Offset + 1
	}
	if err != nil {
		return
	}
	for s := range w.subs {
		if !s.filter.match(&ch.c) {
			continue
		}
		select {
		case s.queue <- ch:
		default:
			close(s.cut)
			delete(w.subs, s)
			w.cuts++
		}
	}
}

var errWatchUnavailable = errors.New("the change feed is not being read")

// subscribe registers a subscriber and returns it with the reader's
// position: its queue gets every change from that position on.
func (w *Watcher) subscribe(f watchFilter) (*subscriber, []int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ready {
		return nil, nil, errWatchUnavailable
	}
	s := &subscriber{filter: f, queue: make(chan *change, w.o.Queue), cut: make(chan struct{})}
	w.subs[s] = struct{}{}
	return s, append([]int64(nil), w.next...), nil
}

func (w *Watcher) unsubscribe(s *subscriber) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, s)
}

// startOffsets returns the log start offset of each partition.
func (w *Watcher) startOffsets(ctx context.Context) ([]int64, error) {
	w.mu.Lock()
	adm := w.adm
	w.mu.Unlock()
	if adm == nil {
		return nil, errWatchUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	listed, err := adm.ListStartOffsets(ctx, w.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(listed[w.topic]))
	for p, o := range listed[w.topic] {
		if int(p) < len(out) {
			out[p] = o.Offset
		}
	}
	return out, nil
}

var errCursorExpired = errors.New("the cursor is older than the change feed's retention")

// catchUp reads the feed from `from` up to `to` (exclusive) on each
// partition where from is behind, and calls each with every change, in
// offset order per partition. It returns when every such partition reached
// its end, or with the error that stopped it.
func (w *Watcher) catchUp(ctx context.Context, from, to []int64, each func(*change) error) error {
	offs := map[int32]kgo.Offset{}
	for p := range from {
		if from[p] < to[p] {
			offs[int32(p)] = kgo.NewOffset().At(from[p])
		}
	}
	if len(offs) == 0 {
		return nil
	}
	// NoResetOffset: a partition whose log start passed the cursor (records
	// deleted by retention since it was checked) is an error, not a silent
	// jump that would skip changes.
	cl, err := kafka.NewClient(w.kcfg, append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: offs}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset())}, w.o.Opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, w.o.CatchUpTimeout)
	defer cancel()
	for len(offs) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if errors.Is(ferr, kerr.OffsetOutOfRange) {
			return errCursorExpired
		}
		if ferr != nil {
			return cl.Explain(ferr)
		}
		var werr error
		fetches.EachRecord(func(rec *kgo.Record) {
			p := rec.Partition
			if _, ok := offs[p]; !ok || werr != nil {
				return
			}
			if rec.Offset >= to[p] {
				delete(offs, p)
				return
			}
			ch := &change{part: p, offset: rec.Offset}
			if feed.Decode(rec.Value, &ch.c) == nil {
				ch.data = ch.c.AppendJSON(nil)
				werr = each(ch)
			}
			if rec.Offset+1 >= to[p] {
				delete(offs, p)
			}
		})
		if werr != nil {
			return werr
		}
	}
	return nil
}

// watchFilter is what a watch asks for. Every field set must hold.
type watchFilter struct {
	prefix  string // the token's prefix, or a narrower one
	none    bool   // a prefix outside the token's: nothing passes
	session string
	state   string
	labels  [][2]string
	parent  string
}

func (f *watchFilter) match(c *feed.Change) bool {
	if f.none || !strings.HasPrefix(c.SessionID, f.prefix) ||
		(f.session != "" && c.SessionID != f.session) ||
		(f.state != "" && c.To != f.state) ||
		(f.parent != "" && c.ParentSessionID != f.parent) {
		return false
	}
	for _, l := range f.labels {
		if v, ok := c.Labels[l[0]]; !ok || v != l[1] {
			return false
		}
	}
	return true
}

var labelKey = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]{0,62}$`)

// parseWatchFilter reads state, label, prefix and parent; it writes the
// 400 and returns false on a bad one.
func parseWatchFilter(w http.ResponseWriter, r *http.Request) (watchFilter, bool) {
	q := r.URL.Query()
	f := watchFilter{prefix: auth.PrincipalFrom(r.Context()).SessionPrefix()}
	if v := q.Get("state"); v != "" {
		s, ok := fsm.ParseState(v)
		if !ok {
			badRequest(w, "state", "must be one of CREATED, INITIALIZING, ACTIVE, PAUSED, AWAITING_APPROVAL, CANCELLING, CANCELLED, FAILED, COMPLETED, RECOVERING")
			return f, false
		}
		f.state = s.String()
	}
	labels := q["label"]
	if len(labels) > MaxWatchLabels {
		badRequest(w, "label", fmt.Sprintf("at most %d label filters", MaxWatchLabels))
		return f, false
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || !labelKey.MatchString(k) || len(v) > 256 {
			badRequest(w, "label", "must be KEY=VALUE, the key of [a-z0-9][a-z0-9._/-]{0,62}, the value at most 256 bytes")
			return f, false
		}
		f.labels = append(f.labels, [2]string{k, v})
	}
	if v := q.Get("parent"); v != "" {
		if !fsm.ValidSessionID(v) {
			badRequest(w, "parent", "must be 1-128 characters of [A-Za-z0-9._:-]")
			return f, false
		}
		f.parent = v
	}
	// prefix narrows within the token's own prefix, as in listings: a
	// wider one watches the token's sessions, one outside it none.
	if v := q.Get("prefix"); v != "" {
		if !fsm.ValidSessionID(v) {
			badRequest(w, "prefix", "must be 1-128 characters of [A-Za-z0-9._:-]")
			return f, false
		}
		switch {
		case strings.HasPrefix(v, f.prefix):
			f.prefix = v
		case !strings.HasPrefix(f.prefix, v):
			f.none = true
		}
	}
	return f, true
}

// EncodeCursor returns the cursor of a position in the change feed: per
// partition of the changes topic, the next offset to read.
func EncodeCursor(next []int64) string {
	b := make([]byte, 0, 2+len(next)*binary.MaxVarintLen64)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(next)))
	for _, o := range next {
		b = binary.AppendUvarint(b, uint64(max(o, 0)))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ErrBadCursor is returned by DecodeCursor for a string that is not a
// cursor this service issued.
var ErrBadCursor = errors.New("not a watch cursor")

// DecodeCursor reads a cursor written by EncodeCursor.
func DecodeCursor(s string) ([]int64, error) {
	if len(s) == 0 || len(s) > maxCursorChars {
		return nil, ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != cursorVersion {
		return nil, ErrBadCursor
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > maxCursorPartitions {
		return nil, ErrBadCursor
	}
	b = b[k:]
	out := make([]int64, n)
	for i := range out {
		o, k := binary.Uvarint(b)
		if k <= 0 || o > 1<<63-1 {
			return nil, ErrBadCursor
		}
		out[i], b = int64(o), b[k:]
	}
	if len(b) != 0 {
		return nil, ErrBadCursor
	}
	return out, nil
}

// watchAll serves GET /v1/watch.
func (h *Handler) watchAll(w http.ResponseWriter, r *http.Request) {
	f, ok := parseWatchFilter(w, r)
	if !ok {
		return
	}
	h.serveWatch(w, r, f)
}

// watchSession serves GET /v1/sessions/{id}/watch.
func (h *Handler) watchSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !fsm.ValidSessionID(id) {
		badRequest(w, "id", "must be 1-128 characters of [A-Za-z0-9._:-]")
		return
	}
	if !visible(r, id) {
		notFound(w)
		return
	}
	h.serveWatch(w, r, watchFilter{prefix: id, session: id})
}

// serveWatch checks the request's method, cursor and limits, then streams.
func (h *Handler) serveWatch(w http.ResponseWriter, r *http.Request, f watchFilter) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not allowed here; use GET"})
		return
	}
	var from []int64
	if v := r.Header.Get("Last-Event-ID"); v != "" || r.URL.Query().Get("cursor") != "" {
		field := "Last-Event-ID"
		if v == "" {
			field, v = "cursor", r.URL.Query().Get("cursor")
		}
		c, err := DecodeCursor(v)
		if err != nil {
			badRequest(w, field, "is not a cursor this service issued; watch again without it")
			return
		}
		from = c
	}
	wt := h.watch
	if wt == nil {
		httpx.Unavailable(w, 30*time.Second, "watching needs Kafka, and this query service has no brokers configured", nil)
		return
	}
	who := auth.PrincipalFrom(r.Context()).Key()
	if !wt.slots.take(who) {
		w.Header().Set("Retry-After", "5")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeRateLimited, Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("too many open watches: at most %d per token and %d per process; close one or retry", wt.o.MaxWatchesPerPrincipal, wt.o.MaxWatches)})
		return
	}
	defer wt.slots.give(who)
	sub, live, err := wt.subscribe(f)
	if err != nil {
		httpx.Unavailable(w, time.Second, "the change feed is not being read yet; retry", nil)
		return
	}
	defer wt.unsubscribe(sub)
	st := &watchStream{w: w, rc: http.NewResponseController(w), wt: wt, sub: sub, next: live}
	if from != nil {
		if len(from) > len(live) {
			badRequest(w, "cursor", fmt.Sprintf("names %d partitions, and the change feed has %d", len(from), len(live)))
			return
		}
		starts, err := wt.startOffsets(r.Context())
		if err != nil {
			h.log.Warn("watch: reading the change feed's start offsets", "err", err)
			httpx.Unavailable(w, time.Second, "the change feed is unavailable; retry", nil)
			return
		}
		for p, o := range from {
			if p < len(starts) && o < starts[p] {
				httpx.WriteProblem(w, httpx.Problem{Type: TypeCursorExpired, Status: http.StatusGone,
					Detail: fmt.Sprintf("the cursor is older than the change feed's retention (partition %d starts at offset %d, the cursor asks for %d); read the snapshots and watch again without a cursor", p, starts[p], o)})
				return
			}
		}
		// A partition the cursor does not name (the topic grew after it was
		// issued) starts at the live position.
		st.next = append(append([]int64(nil), from...), live[len(from):]...)
	}
	var snap *snapshot.Snapshot
	if f.session != "" && from == nil {
		snap, err = h.get(r.Context(), f.session)
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
	if from != nil {
		err := wt.catchUp(r.Context(), st.next, live, func(ch *change) error {
			if !st.take(ch) {
				return nil
			}
			if len(st.buf) >= 32<<10 {
				return st.flush()
			}
			return nil
		})
		if err == nil {
			err = st.flush()
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				h.log.Info("watch: catch-up ended the stream", "err", err)
			}
			return
		}
	}
	st.live(r.Context())
}

// watchStream writes one watch's events. It is used by one goroutine, the
// request's.
type watchStream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	wt   *Watcher
	sub  *subscriber
	next []int64            // per partition, the next offset to write
	snap *snapshot.Position // the snapshot written first, if any
	buf  []byte
}

// start writes the headers. The server's read deadline is lifted (a read
// deadline passing would cancel the request's context mid-stream) and each
// flush sets its own write deadline in place of the server's.
func (st *watchStream) start() {
	_ = st.rc.SetReadDeadline(time.Time{})
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	st.w.WriteHeader(http.StatusOK)
	st.buf = append(st.buf, ": watching\n\n"...)
	_ = st.flush()
}

// take adds ch to the buffer if it is past the stream's position and, for
// a session's watch, past its snapshot; it reports whether it did.
func (st *watchStream) take(ch *change) bool {
	if int(ch.part) >= len(st.next) || ch.offset < st.next[ch.part] {
		return false
	}
	st.next[ch.part] = ch.offset + 1
	// The live queue holds only changes that match, but a catch-up reads
	// every change of the feed: the filter, which carries the token's own
	// prefix, decides here for both.
	if !st.sub.filter.match(&ch.c) {
		return false
	}
	if s := st.snap; s != nil && ch.c.Position.Partition == s.Partition && ch.c.Position.Offset <= s.Offset {
		return false
	}
	st.event("change", ch.data)
	return true
}

func (st *watchStream) event(name string, data []byte) {
	st.buf = append(st.buf, "event: "...)
	st.buf = append(st.buf, name...)
	st.buf = append(st.buf, "\nid: "...)
	st.buf = append(st.buf, EncodeCursor(st.next)...)
	st.buf = append(st.buf, "\ndata: "...)
	st.buf = append(st.buf, data...)
	st.buf = append(st.buf, "\n\n"...)
}

func (st *watchStream) flush() error {
	if len(st.buf) == 0 {
		return nil
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.wt.o.WriteTimeout))
	_, err := st.w.Write(st.buf)
	st.buf = st.buf[:0]
	if err == nil {
		err = st.rc.Flush()
	}
	return err
}

// live writes the queue's changes until the client leaves, the write
// fails, the subscriber is cut or the watcher stops.
func (st *watchStream) live(ctx context.Context) {
	beat := time.NewTicker(st.wt.o.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.wt.done:
			return
		case <-st.sub.cut:
			// Write what is queued: the stream then ends at a cursor
			// as far on as it can, and the client resumes from there.
			for len(st.sub.queue) > 0 {
				st.take(<-st.sub.queue)
			}
			_ = st.flush()
			return
		case ch := <-st.sub.queue:
			st.take(ch)
			for i := 0; i < maxDrain && len(st.sub.queue) > 0; i++ {
				st.take(<-st.sub.queue)
			}
		case <-beat.C:
			st.buf = append(st.buf, ": ping\n\n"...)
		}
		if st.flush() != nil {
			return
		}
	}
}
