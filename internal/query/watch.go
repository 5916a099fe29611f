package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
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
// of the changes topic, the next offset to read: a cursor is that vector,
// sealed (cursor.go), and every event carries the cursor just after it.
// Each stream keeps such a vector and writes a change only when its offset
// is at or past the vector's entry for its partition, then moves the entry
// past it; changes of one partition arrive in offset order, so nothing is
// written twice and, as every source below covers a contiguous range,
// nothing is skipped.
//
// Progress. A stream's vector moves past everything it read, not only what
// it wrote: a catch-up writes an id-only event (`id:` and no data, which
// moves an EventSource's last event id without an event) after each fetch
// whose changes it filtered out, and a live stream does so with its
// heartbeat when its queue is empty: under the lock that offers changes, an
// empty queue means that every change before the reader's position that
// passes the filter was written, so the vector may move up to it. So a
// stream that ends for any reason (its catch-up's time limit, a cut, its
// lifetime) ends at a cursor past what it read, and resuming always goes
// further; the first fetch of a catch-up is waited for whatever the limit.
//
// Resuming. A watch with a cursor (Last-Event-ID, or ?cursor=) first
// waits for one of WatchOptions.CatchUps turns (in order; at most
// CatchUpQueue wait, answered 200 with heartbeats), then subscribes, which
// returns the reader's position H at that instant under the same lock that
// offers changes: the queue gets every change from H on. Then a direct
// consumer of its own (no group, small fetches, one in flight) reads, per
// partition, from the cursor up to H and writes what passes the filter;
// then the turn is given back and the queue is written, where changes
// before the stream's vector are dropped. So the memory of catch-ups is
// bounded for the process, whatever the number of resumed watches and how
// old their cursors: the oldest cursor that can be resumed is the topic's
// retention (a cursor older than the log start gets 410). A catch-up that
// overruns its queue is cut like any slow subscriber, and resumes further
// on.
//
// A session's watch subscribes first, then reads the snapshot: a change
// missing from the snapshot is written to the feed after the snapshot's
// write (the projector writes snapshots, then changes, then the
// checkpoint), so after the subscription, and is in the queue. Changes in
// the queue at or below the snapshot's position are already in it and are
// dropped. The snapshot event's id is H, at or before the snapshot.
//
// Before the feed exists. The projector creates the changes topic; until
// it does, watches without a cursor are answered 200 and wait, and the
// reader, once the topic appears, reads it from its start rather than its
// end, so that what was written before the reader noticed the topic is
// delivered too. A watch's vector then grows to the topic's partitions with
// its first change. (A cursor names a feed that exists: with none, 503.)
//
// Revocation. A stream checks its token again whenever the token file is
// reloaded and ends when the token no longer grants what it did; every
// stream ends after WatchOptions.MaxLifetime.
//
// Partitions are learnt when Run starts: a changes topic grown later is
// read in full after a restart; until then a cursor's extra partitions are
// refused (400). Run ends every stream when it returns.
type Watcher struct {
	kcfg    kafka.Config
	topic   string // the changes topic
	o       WatchOptions
	slots   *waitSlots
	cursors cursorSealer
	turns   chan struct{} // a catch-up holds one while it reads
	waiting atomic.Int64  // resumed watches waiting for a turn

	mu      sync.Mutex // guards what follows; held to offer a change, never across I/O
	state   feedState
	decided chan struct{} // closed when state leaves feedUnknown
	next    []int64       // per partition, the next offset the reader offers
	subs    map[*subscriber]struct{}
	cuts    int64 // subscribers cut for a full queue
	adm     *kadm.Client
	done    chan struct{} // closed when Run returns
	ended   bool
}

// feedState is what the watcher knows of the changes topic.
type feedState int

const (
	feedUnknown feedState = iota // not asked yet, or Kafka did not answer
	feedAbsent                   // no topic yet: read it from its start when it appears
	feedReading                  // positions known, reading
)

// NewWatcher returns a watcher of eventsTopic's change feed; it does not
// contact Kafka until Run.
func NewWatcher(cfg kafka.Config, eventsTopic string, o WatchOptions) *Watcher {
	o.withDefaults()
	return &Watcher{kcfg: cfg, topic: feed.Topic(eventsTopic), o: o,
		slots:   newWaitSlots(o.MaxWatches, o.MaxWatchesPerPrincipal),
		cursors: newCursorSealer(o.CursorKey), turns: make(chan struct{}, o.CatchUps),
		subs: map[*subscriber]struct{}{}, decided: make(chan struct{}), done: make(chan struct{})}
}

// Run reads the change feed until ctx is done, then ends every stream. It
// waits for the changes topic to exist (looking again every 500 ms);
// watches without a cursor wait with it. It returns nil when ctx ends, or
// the error that kept it from reading.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.end()
	adm, err := kafka.NewClient(w.kcfg, w.o.Opts...)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer adm.Close()
	kadmc := kadm.NewClient(adm.Client)
	// Until the projector has created the changes topic, each attempt is
	// logged at debug level; a warning says so once a minute.
	var next []int64
	var warned time.Time
	for {
		var exists bool
		exists, err = topicExists(ctx, kadmc, w.topic)
		if err == nil && exists {
			w.mu.Lock()
			absent := w.state == feedAbsent
			w.mu.Unlock()
			// A topic seen absent is read from its start: what was
			// written before this look is what waiting watches wait for.
			if absent {
				next, err = listOffsets(ctx, kadmc, w.topic, true)
			} else {
				next, err = listOffsets(ctx, kadmc, w.topic, false)
			}
			if err == nil {
				break
			}
		}
		if err == nil { // no topic yet: watches wait for it
			w.decide(feedAbsent, kadmc)
			err = fmt.Errorf("topic %s: %w", w.topic, kerr.UnknownTopicOrPartition)
		}
		w.o.Log.Debug("watch: the change feed is not readable yet", "topic", w.topic, "err", adm.Explain(err))
		if time.Since(warned) >= time.Minute {
			warned = time.Now()
			w.o.Log.Warn("watch: the change feed is not readable yet; watches wait until it is (looking again every 500ms)",
				"topic", w.topic, "err", adm.Explain(err))
		}
		if sleepCtx(ctx, feedPoll) != nil {
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
	w.next = next
	w.mu.Unlock()
	w.decide(feedReading, kadmc)
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(_ string, p int32, err error) {
			w.o.Log.Warn("watch: reading the change feed", "partition", p, "err", cl.Explain(err))
		})
		fetches.EachRecord(func(rec *kgo.Record) { w.offer(rec, len(next)) })
	}
}

// decide records what the watcher knows of the feed.
func (w *Watcher) decide(s feedState, adm *kadm.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended || w.state == s {
		return
	}
	if w.state == feedUnknown {
		close(w.decided)
	}
	w.state, w.adm = s, adm
}

// topicExists asks the brokers' metadata about topic: it answers at once,
// where listing offsets of a missing topic waits for it.
func topicExists(ctx context.Context, adm *kadm.Client, topic string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, err
	}
	d, ok := td[topic]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return false, nil
	case d.Err != nil:
		return false, d.Err
	}
	return len(d.Partitions) > 0, nil
}

// listOffsets returns the end offset (or, with start, the log start) of
// each partition of topic, which must be numbered 0 to n-1.
func listOffsets(ctx context.Context, adm *kadm.Client, topic string, start bool) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list := adm.ListEndOffsets
	if start {
		list = adm.ListStartOffsets
	}
	listed, err := list(ctx, topic)
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
		w.ended = true
		if w.state == feedUnknown {
			close(w.decided)
		}
		w.state = feedUnknown
		clear(w.subs)
		close(w.done)
	}
}

// change is a decoded record of the feed, shared by every queue it is in;
// it is never modified after decoding.
type change struct {
	part   int32 // partition of the changes topic
	parts  int32 // partitions of the changes topic
	offset int64
	c      feed.Change
	ok     bool   // c decoded
	raw    []byte // the record's value (the fetch's buffer): valid only while the record is
	data   []byte // what a stream writes as the change's data (wireBytes), nil until needed; set before the change is shared
}

// wireBytes returns what a stream writes as the change's data: the
// record's own bytes, the canonical JSON the projector wrote (one line of
// wire.Change; encoding the decoded change again gives the same bytes),
// copied when the change outlives the fetch that read it. A record that
// holds a line break was not written by the projector and would break the
// stream's framing: that one is encoded again.
func (ch *change) wireBytes(keep bool) []byte {
	if bytes.ContainsAny(ch.raw, "\r\n") {
		return ch.c.AppendJSON(nil)
	}
	if keep {
		return bytes.Clone(ch.raw)
	}
	return ch.raw
}

// subscriber is one open watch: its filter, its queue, and cut, closed
// by the reader when the queue overflowed.
type subscriber struct {
	filter watchFilter
	queue  chan *change
	cut    chan struct{}
}

// decode reads a record of the feed. A record that does not decode is
// logged and kept, not ok: the position moves past it, so it costs no
// watch anything.
func (w *Watcher) decode(rec *kgo.Record, parts int) *change {
	ch := &change{part: rec.Partition, parts: int32(parts), offset: rec.Offset}
	if err := feed.Decode(rec.Value, &ch.c); err != nil {
		w.o.Log.Warn("watch: skipping a change that does not decode", "partition", rec.Partition, "offset", rec.Offset, "err", err)
	} else {
		ch.ok, ch.raw = true, rec.Value
	}
	return ch
}

// offer decodes a record of a feed of parts partitions and offers it to
// every subscriber it passes.
func (w *Watcher) offer(rec *kgo.Record, parts int) {
	ch := w.decode(rec, parts)
	if ch.ok {
		// Once, before any queue shares it, and copied: a queued change
		// must not keep its fetch's buffer alive.
		ch.data, ch.raw = ch.wireBytes(true), nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(rec.Partition) < len(w.next) {
		w.next[rec.Partition] = rec.Offset + 1
	}
	if !ch.ok {
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

var (
	errWatchUnavailable = errors.New("the change feed is not being read")
	errFeedAbsent       = errors.New("the change feed does not exist yet")
)

// subscribe registers a subscriber and returns it with the reader's
// position: its queue gets every change from that position on. Before the
// feed exists the position is empty (the reader will start at the feed's
// start); while the watcher does not know yet, it waits up to 5 s.
func (w *Watcher) subscribe(ctx context.Context, f watchFilter) (*subscriber, []int64, error) {
	select {
	case <-w.decided:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(5 * time.Second):
		return nil, nil, errWatchUnavailable
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == feedUnknown {
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

// drained returns the reader's position when s's queue is empty (every
// change before it that passes s's filter has been taken from the queue
// by the only goroutine that reads it, the caller), or nil.
func (w *Watcher) drained(s *subscriber) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[s]; !ok || len(s.queue) > 0 || w.state != feedReading {
		return nil
	}
	return append([]int64(nil), w.next...)
}

// startOffsets returns the log start offset of each partition.
func (w *Watcher) startOffsets(ctx context.Context) ([]int64, error) {
	w.mu.Lock()
	adm, state := w.adm, w.state
	w.mu.Unlock()
	switch {
	case state == feedAbsent:
		return nil, errFeedAbsent
	case adm == nil || state != feedReading:
		return nil, errWatchUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, listOffsetsTimeout)
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

// queueCatchUp reserves a place among the watches waiting for a catch-up;
// false when CatchUpQueue are waiting. Call awaitCatchUp then, or
// leaveCatchUpQueue.
func (w *Watcher) queueCatchUp() bool {
	if w.waiting.Add(1) > int64(w.o.CatchUpQueue) {
		w.waiting.Add(-1)
		return false
	}
	return true
}

func (w *Watcher) leaveCatchUpQueue() { w.waiting.Add(-1) }

// awaitCatchUp waits for a catch-up turn, calling beat at each heartbeat
// (an error from it ends the wait), and leaves the queue. On nil, the
// caller holds a turn and gives it back with doneCatchUp.
func (w *Watcher) awaitCatchUp(ctx context.Context, beat func() error) error {
	defer w.leaveCatchUpQueue()
	t := time.NewTicker(w.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case w.turns <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-w.done:
			return errWatchUnavailable
		case <-t.C:
			if err := beat(); err != nil {
				return err
			}
		}
	}
}

func (w *Watcher) doneCatchUp() { <-w.turns }

var (
	errCursorExpired = errors.New("the cursor is older than the change feed's retention")
	errCatchUpLimit  = errors.New("the catch-up reached its time limit")
)

// catchUp reads the feed from `from` up to `to` (exclusive) on each
// partition where from is behind, and calls each with every record (data
// not ok for one that does not decode), in offset order per partition, and
// fetched after each fetch. It returns when every such partition reached
// its end, or with the error that stopped it: errCatchUpLimit after
// CatchUpTimeout, but never before the first fetch was read (which may
// wait up to catchUpFirstFetch).
func (w *Watcher) catchUp(ctx context.Context, from, to []int64, each func(*change), fetched func() error) error {
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
	// jump that would skip changes. Small fetches, one in flight: the
	// memory of a catch-up does not depend on how far it has to go.
	cl, err := kafka.NewClient(w.kcfg, append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.topic: offs}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxBytes(CatchUpFetchBytes), kgo.FetchMaxPartitionBytes(CatchUpPartitionBytes),
		kgo.MaxConcurrentFetches(1)}, w.o.Opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	began := time.Now()
	limit, first := began.Add(w.o.CatchUpTimeout), began.Add(catchUpFirstFetch)
	read := false
	for len(offs) > 0 {
		deadline := limit
		if !read && first.After(limit) {
			deadline = first
		}
		if !time.Now().Before(deadline) {
			return errCatchUpLimit
		}
		pctx, cancel := context.WithDeadline(ctx, deadline)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = errors.Join(ferr, err)
			}
		})
		if errors.Is(ferr, kerr.OffsetOutOfRange) {
			return errCursorExpired
		}
		if ferr != nil {
			return cl.Explain(ferr)
		}
		n := 0
		fetches.EachRecord(func(rec *kgo.Record) {
			p := rec.Partition
			if _, ok := offs[p]; !ok {
				return
			}
			if rec.Offset >= to[p] {
				delete(offs, p)
				return
			}
			n++
			each(w.decode(rec, len(to)))
			if rec.Offset+1 >= to[p] {
				delete(offs, p)
			}
		})
		if n > 0 {
			read = true
		}
		if err := fetched(); err != nil {
			return err
		}
	}
	return nil
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

// watchSession serves GET /v1/sessions/{id}/watch.
func (h *Handler) watchSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !fsm.ValidSessionID(id) {
		badRequest(w, "id", "must be "+fsm.SessionIDRule)
		return
	}
	if !visible(r, id) {
		notFound(w)
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
		httpx.Unavailable(w, 30*time.Second, "watching needs Kafka, and this query service has no brokers configured", nil)
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
		w.Header().Set("Retry-After", "5")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeRateLimited, Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("too many open watches: at most %d per token and %d per process; close one or retry", wt.o.MaxWatchesPerPrincipal, wt.o.MaxWatches)})
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
	if from != nil {
		h.resume(ctx, w, r, st, from)
		return
	}
	sub, live, err := wt.subscribe(ctx, f)
	if err != nil {
		if ctx.Err() == nil {
			httpx.Unavailable(w, time.Second, "the change feed is not being read yet; retry", nil)
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
		httpx.Unavailable(w, time.Second, "the change feed does not exist yet, so no cursor can be resumed; watch without it", nil)
		return
	case err != nil:
		h.log.Warn("watch: reading the change feed's start offsets", "err", err)
		httpx.Unavailable(w, time.Second, "the change feed is unavailable; retry", nil)
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
		w.Header().Set("Retry-After", "5")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeRateLimited, Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("too many resumed watches wait to catch up (at most %d); retry", wt.o.CatchUpQueue)})
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

// watchStream writes one watch's events. It is used by one goroutine, the
// request's.
type watchStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	wt     *Watcher
	filter watchFilter
	sub    *subscriber
	next   []int64            // per partition, the next offset to write
	said   []int64            // the position of the last id written
	snap   *snapshot.Position // the snapshot written first, if any
	buf    []byte
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
	// Where the stream starts, as an id-only event: a client whose
	// connection drops before the first change resumes from here, not
	// from the end it would find on a new watch.
	st.progress()
	_ = st.flush()
}

// take moves the stream's position past ch and adds ch to the buffer if it
// is past the stream's position, passes the filter and, for a session's
// watch, is past its snapshot; it reports whether it did.
func (st *watchStream) take(ch *change) bool {
	if len(st.next) < int(ch.parts) {
		// Subscribed before the feed existed: the reader started at its
		// start, so the position grows with zeros.
		st.next = append(st.next, make([]int64, int(ch.parts)-len(st.next))...)
	}
	if int(ch.part) >= len(st.next) || ch.offset < st.next[ch.part] {
		return false
	}
	st.next[ch.part] = ch.offset + 1
	// The live queue holds only changes that match, but a catch-up reads
	// every change of the feed: the filter, which carries the token's own
	// prefix, decides here for both.
	if !ch.ok || !st.filter.match(&ch.c) {
		return false
	}
	if s := st.snap; s != nil && ch.c.Position.Partition == s.Partition && ch.c.Position.Offset <= s.Offset {
		return false
	}
	if ch.data == nil { // a catch-up's own change, written before its fetch is released
		ch.data = ch.wireBytes(false)
	}
	st.event("change", ch.data)
	return true
}

// advance moves the stream's position up to pos, where it is behind.
func (st *watchStream) advance(pos []int64) {
	if len(st.next) < len(pos) {
		st.next = append(st.next, make([]int64, len(pos)-len(st.next))...)
	}
	for p, o := range pos {
		st.next[p] = max(st.next[p], o)
	}
}

// idWritten reports whether the last id written is the stream's position.
func (st *watchStream) idWritten() bool {
	if len(st.said) != len(st.next) {
		return len(st.next) == 0
	}
	for p := range st.next {
		if st.said[p] != st.next[p] {
			return false
		}
	}
	return true
}

// progress adds an id-only event when the stream's position moved past the
// last id written (changes read and filtered out): a client that resumes
// from its last id then goes further.
func (st *watchStream) progress() {
	if st.idWritten() {
		return
	}
	st.buf = append(st.buf, "id: "...)
	st.buf = append(st.buf, st.wt.EncodeCursor(st.next)...)
	st.buf = append(st.buf, "\n\n"...)
	st.said = append(st.said[:0], st.next...)
}

func (st *watchStream) event(name string, data []byte) {
	st.buf = append(st.buf, "event: "...)
	st.buf = append(st.buf, name...)
	if len(st.next) > 0 {
		st.buf = append(st.buf, "\nid: "...)
		st.buf = append(st.buf, st.wt.EncodeCursor(st.next)...)
		st.said = append(st.said[:0], st.next...)
	}
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
// fails, the subscriber is cut, the stream's lifetime or token ends or the
// watcher stops. It ends with the stream's position written.
func (st *watchStream) live(ctx context.Context) {
	beat := time.NewTicker(st.wt.o.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			st.progress()
			_ = st.flush()
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
			if pos := st.wt.drained(st.sub); pos != nil {
				st.advance(pos)
				st.progress()
			}
			st.buf = append(st.buf, ": ping\n\n"...)
		}
		if st.flush() != nil {
			return
		}
	}
}
