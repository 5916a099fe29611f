package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher sends events in the background, in batches, for producers that
// emit events one at a time from many goroutines (an agent runtime, a
// service's request handlers). It is safe for concurrent use.
//
// Order: events of one session are sent in the order Add queued them. Each
// session maps to a lane (a hash of its id); a lane sends one request at a
// time and retries it (the Client's Retry policy) before sending the next,
// so a session's events reach Kafka in order. Lanes run in parallel.
//
// Batches: a lane sends what it holds when it reaches BatchEvents events or
// BatchBytes bytes, when its oldest event has waited Linger, at Flush and at
// Close. While a request is in flight the lane's next batch fills, so under
// load batches grow by themselves.
//
// Memory: the encoded events queued or in flight are bounded by
// BufferBytes; Add blocks while the buffer is full (back-pressure), until
// room is freed or its context ends.
//
// Results: each event's outcome goes to the OnResult callback, if set, and
// failures are also returned by the next Flush or Close. An event that failed
// (refused by validation, or not confirmed after the retries) is not sent
// again; the session's later events still are.
type Batcher struct {
	c        *Client
	lanes    []*lane
	cfg      batcherSettings
	mem      budget
	sendCtx  context.Context
	abort    context.CancelFunc
	wg       sync.WaitGroup
	closeMu  sync.RWMutex // Add holds it shared while queueing; Close exclusively to close
	closed   bool         // under closeMu
	isClosed atomic.Bool  // closed, for the lanes, which must not take closeMu under a lane's lock
	flushing atomic.Int32

	mu      sync.Mutex
	pending int           // events queued or in flight
	idle    chan struct{} // closed when pending drops to zero
	errs    []error       // failures since the last Flush (the first maxKeptErrors)
	nerrs   int
}

const maxKeptErrors = 10

type batcherSettings struct {
	lanes       int
	events      int
	bytes       int
	linger      time.Duration
	bufferBytes int
	onResult    func(Event, Accepted, error)
}

// Lanes is the number of lanes, each with at most one request in flight
// (default 8).
func Lanes(n int) BatcherOpt { return batcherOpt(func(s *batcherSettings) { s.lanes = n }) }

// BatchEvents is the most events per request (default and most 1000).
func BatchEvents(n int) BatcherOpt { return batcherOpt(func(s *batcherSettings) { s.events = n }) }

// BatchBytes is the most bytes per request body (default and most 1 MiB).
func BatchBytes(n int) BatcherOpt { return batcherOpt(func(s *batcherSettings) { s.bytes = n }) }

// Linger is how long a lane waits for more events before sending a batch
// that is not full (default 5ms; 0 sends as soon as the lane is free).
func Linger(d time.Duration) BatcherOpt { return batcherOpt(func(s *batcherSettings) { s.linger = d }) }

// BufferBytes bounds the encoded events queued or in flight over all lanes
// (default 16 MiB: more lets producers run further ahead of ingest for no
// gain in throughput, and a larger heap costs the garbage collector); Add
// blocks beyond it. An event larger than the bound is
// taken when the buffer is empty.
func BufferBytes(n int) BatcherOpt { return batcherOpt(func(s *batcherSettings) { s.bufferBytes = n }) }

// OnResult is called once per event added, from the lane that sent it, with
// where it was written or why it failed (a *ValidationError naming its
// problems, a *SendError, or a *StatusError). It must not block:
// the lane waits for it. Default: none.
func OnResult(f func(ev Event, a Accepted, err error)) BatcherOpt {
	return batcherOpt(func(s *batcherSettings) { s.onResult = f })
}

// NewBatcher starts a Batcher on c. Close it to send what it holds and stop
// its goroutines.
func (c *Client) NewBatcher(opts ...BatcherOpt) (*Batcher, error) {
	s := batcherSettings{lanes: 8, events: MaxRequestEvents, bytes: MaxRequestBytes, linger: 5 * time.Millisecond, bufferBytes: 16 << 20}
	for _, o := range opts {
		o.applyBatcher(&s)
	}
	var errs []error
	if s.lanes < 1 || s.lanes > 1024 {
		errs = append(errs, fmt.Errorf("Lanes must be 1-1024, got %d", s.lanes))
	}
	if s.events < 1 || s.events > MaxRequestEvents {
		errs = append(errs, fmt.Errorf("BatchEvents must be 1-%d, got %d", MaxRequestEvents, s.events))
	}
	if s.bytes < 1024 || s.bytes > MaxRequestBytes {
		errs = append(errs, fmt.Errorf("BatchBytes must be 1024-%d, got %d", MaxRequestBytes, s.bytes))
	}
	if s.linger < 0 {
		errs = append(errs, fmt.Errorf("Linger must not be negative, got %v", s.linger))
	}
	if s.bufferBytes < 1 {
		errs = append(errs, fmt.Errorf("BufferBytes must be positive, got %d", s.bufferBytes))
	}
	if len(errs) > 0 {
		return nil, oneLine(errs)
	}
	b := &Batcher{c: c, cfg: s, mem: budget{max: s.bufferBytes, freed: make(chan struct{})}}
	b.sendCtx, b.abort = context.WithCancel(context.Background())
	b.lanes = make([]*lane, s.lanes)
	for i := range b.lanes {
		l := &lane{wake: make(chan struct{}, 1)}
		b.lanes[i] = l
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.run(l)
		}()
	}
	return b, nil
}

// queued is one event in a lane: its encoded form, and the Event itself
// only when OnResult needs it back.
type queued struct {
	it item
	ev *Event
}

type lane struct {
	mu      sync.Mutex
	q       []queued
	qBytes  int
	firstAt time.Time // when the oldest queued event was queued
	wake    chan struct{}
}

func (l *lane) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Add queues events. It returns once they are queued, not sent; it blocks
// while the buffer is full. An event that cannot be encoded is refused
// here with a *ValidationError and nothing of the call is queued; after
// Close, Add returns ErrClosed.
func (b *Batcher) Add(ctx context.Context, events ...Event) error {
	items, err := encodeAll(events)
	if err != nil {
		return err
	}
	for i, it := range items {
		n := len(it.raw)
		if err := b.mem.acquire(ctx, n); err != nil {
			return fmt.Errorf("client: batcher: waiting for buffer space (%d of %d events queued): %w", i, len(items), err)
		}
		b.closeMu.RLock()
		if b.closed {
			b.closeMu.RUnlock()
			b.mem.release(n)
			return ErrClosed
		}
		b.mu.Lock()
		if b.pending == 0 {
			b.idle = make(chan struct{})
		}
		b.pending++
		b.mu.Unlock()
		q := queued{it: it}
		if b.cfg.onResult != nil {
			ev := events[i]
			q.ev = &ev
		}
		l := b.lanes[laneOf(it.sid, len(b.lanes))]
		l.mu.Lock()
		if len(l.q) == 0 {
			l.firstAt = time.Now()
		}
		l.q = append(l.q, q)
		l.qBytes += n + 1
		wake := len(l.q) == 1 || len(l.q) >= b.cfg.events || l.qBytes+bodyOverhead >= b.cfg.bytes
		l.mu.Unlock()
		b.closeMu.RUnlock()
		if wake {
			l.signal()
		}
	}
	return nil
}

func laneOf(sessionID string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(sessionID))
	return int(h.Sum32() % uint32(n))
}

// Flush sends everything queued without waiting for Linger and returns once
// nothing is queued or in flight (events added meanwhile are waited for
// too), or when ctx ends. It returns the failures since the last Flush.
func (b *Batcher) Flush(ctx context.Context) error {
	b.flushing.Add(1)
	defer b.flushing.Add(-1)
	for _, l := range b.lanes {
		l.signal()
	}
	b.mu.Lock()
	idle := b.idle
	done := b.pending == 0
	b.mu.Unlock()
	if !done {
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("client: batcher: flush: %w", ctx.Err())
		}
	}
	return b.takeErrors()
}

func (b *Batcher) takeErrors() error {
	b.mu.Lock()
	errs, n := b.errs, b.nerrs
	b.errs, b.nerrs = nil, 0
	b.mu.Unlock()
	if n > len(errs) {
		errs = append(errs, fmt.Errorf("client: batcher: and %d more failures", n-len(errs)))
	}
	return errors.Join(errs...)
}

// Close stops accepting events, sends what is queued and stops the lanes.
// If ctx ends first, requests in flight are abandoned (their events may or
// may not be written) and queued events fail at once with an error
// wrapping context.Canceled. It returns the
// failures since the last Flush. Calling Close again returns nil.
func (b *Batcher) Close(ctx context.Context) error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	b.isClosed.Store(true)
	b.closeMu.Unlock()
	err := b.Flush(ctx)
	if err != nil && ctx.Err() != nil {
		b.abort()
	}
	for _, l := range b.lanes {
		l.signal()
	}
	b.wg.Wait()
	b.abort()
	return errors.Join(err, b.takeErrors())
}

func (b *Batcher) run(l *lane) {
	for {
		l.mu.Lock()
		for len(l.q) == 0 {
			l.mu.Unlock()
			if b.isClosed.Load() {
				return
			}
			<-l.wake
			l.mu.Lock()
		}
		for !b.full(l) && b.flushing.Load() == 0 && !b.isClosed.Load() {
			wait := time.Until(l.firstAt.Add(b.cfg.linger))
			if wait <= 0 {
				break
			}
			l.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.wake:
			}
			t.Stop()
			l.mu.Lock()
		}
		n, size := 0, bodyOverhead
		for n < len(l.q) && n < b.cfg.events {
			add := len(l.q[n].it.raw) + 1
			if n > 0 && size+add > b.cfg.bytes {
				break
			}
			size += add
			n++
		}
		// The batch aliases the queue's array: the queue never writes
		// into that part again (it is only appended to, past it, or
		// replaced by a new array).
		batch := l.q[:n:n]
		l.q = l.q[n:]
		if len(l.q) == 0 {
			l.q = nil
		}
		for _, q := range batch {
			l.qBytes -= len(q.it.raw) + 1
		}
		l.firstAt = time.Now()
		l.mu.Unlock()
		b.send(batch)
	}
}

func (b *Batcher) full(l *lane) bool {
	return len(l.q) >= b.cfg.events || l.qBytes+bodyOverhead >= b.cfg.bytes
}

// send sends one batch with the Client's retries. Events named by a 400
// fail; the others of the request were not written either, so they are
// sent again without them.
func (b *Batcher) send(batch []queued) {
	items := make([]item, len(batch))
	for i := range batch {
		items[i] = batch[i].it
		items[i].idx = i
	}
	out := make([]Accepted, len(batch))
	failed := make([]error, len(batch))
	for len(items) > 0 {
		err := b.c.sendBatch(b.sendCtx, items, out, nil)
		if err == nil {
			break
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			for _, it := range items {
				if out[it.idx].EventID == "" {
					failed[it.idx] = err
				}
			}
			break
		}
		bad := map[int][]FieldProblem{}
		for _, p := range ve.Problems {
			bad[p.Index] = append(bad[p.Index], p)
		}
		if len(bad) == 0 { // a 400 that names no event: fail them all
			for _, it := range items {
				failed[it.idx] = err
			}
			break
		}
		left := items[:0:0]
		for _, it := range items {
			if ps, ok := bad[it.idx]; ok {
				failed[it.idx] = &ValidationError{Op: "send", Detail: ve.Detail, Problems: ps}
			} else {
				left = append(left, it)
			}
		}
		items = left
	}
	var nfail, freed int
	var first []error
	for i := range batch {
		if failed[i] != nil {
			nfail++
			if len(first) < maxKeptErrors {
				first = append(first, fmt.Errorf("event %s of session %s: %w", batch[i].it.id, batch[i].it.sid, failed[i]))
			}
		}
		if b.cfg.onResult != nil {
			b.cfg.onResult(*batch[i].ev, out[i], failed[i])
		}
		freed += len(batch[i].it.raw)
	}
	b.mem.release(freed)
	b.mu.Lock()
	for _, e := range first {
		if len(b.errs) < maxKeptErrors {
			b.errs = append(b.errs, e)
		}
	}
	b.nerrs += nfail
	b.pending -= len(batch)
	if b.pending == 0 {
		close(b.idle)
	}
	b.mu.Unlock()
}

// budget bounds bytes in use; acquire waits for room.
type budget struct {
	mu      sync.Mutex
	used    int
	max     int
	waiters int           // acquirers waiting for room
	freed   chan struct{} // closed and replaced at a release that has waiters
}

func (m *budget) acquire(ctx context.Context, n int) error {
	m.mu.Lock()
	for m.used > 0 && m.used+n > m.max {
		ch := m.freed
		m.waiters++
		m.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		m.mu.Lock()
		m.waiters--
		if err != nil {
			m.mu.Unlock()
			return err
		}
	}
	m.used += n
	m.mu.Unlock()
	return nil
}

func (m *budget) release(n int) {
	m.mu.Lock()
	m.used -= n
	if m.waiters > 0 {
		close(m.freed)
		m.freed = make(chan struct{})
	}
	m.mu.Unlock()
}
