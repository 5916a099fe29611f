package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
		if backoff.Sleep(ctx, feedPoll) != nil {
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
// every subscriber it passes; with no subscriber it only moves the
// position past it.
func (w *Watcher) offer(rec *kgo.Record, parts int) {
	w.mu.Lock()
	if len(w.subs) == 0 {
		// Nobody watches: the position moves on and the change is not
		// decoded (the feed carries every change the projector makes, and
		// decoding each one was the query service's largest CPU cost under
		// writes). A subscriber that comes after this starts after it.
		if int(rec.Partition) < len(w.next) {
			w.next[rec.Partition] = rec.Offset + 1
		}
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
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
