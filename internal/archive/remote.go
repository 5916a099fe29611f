package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The archive is a secondary store: it holds closed sessions that left
// Redis, and nothing else depends on it. An outage of it (a bucket that
// refuses connections, or one that hangs) may delay archiving and make
// archived reads answer 503, and nothing more: the services start, join
// their group and fold while it is down. Remote is how they hold it: it
// opens the bucket in the background, bounds every call by a timeout
// (CORREX_ARCHIVE_TIMEOUT; a write, by the time each of its steps takes:
// PutStream), probes the bucket while it is unreachable, and
// while it is, fails each call at once with ErrUnreachable instead of
// waiting for the bucket again.

// DefaultTimeout bounds one call to the archive (CORREX_ARCHIVE_TIMEOUT).
const DefaultTimeout = 5 * time.Second

// Remote is an archive opened in the background, whose calls are bounded
// by a timeout and fail at once while the bucket is known unreachable.
// Safe for concurrent use.
type Remote struct {
	raw     string
	url     string // redacted
	timeout time.Duration
	log     *slog.Logger
	probe   time.Duration // the probes' interval while unreachable

	store     atomic.Pointer[Store]
	reachable atomic.Bool
	why       atomic.Pointer[string] // why it is unreachable
	since     atomic.Int64           // unix nanoseconds since it is unreachable
	warned    atomic.Bool            // the outage in progress was logged
	kick      chan struct{}
	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// RemoteOptions tune a Remote; the zero value takes the defaults.
type RemoteOptions struct {
	// Timeout bounds each call (open, ping, get, head, history page,
	// list), and each step of a write (PutStream); default DefaultTimeout.
	Timeout time.Duration
	// Probe is the interval of the probes while the bucket is
	// unreachable; default 2 s, and twice it while reachable.
	Probe time.Duration
	Log   *slog.Logger
}

// StartRemote checks rawURL (an unknown scheme is an error at once) and
// opens its bucket in the background until ctx is done or Close is
// called. The archive is unreachable until the bucket answers.
func StartRemote(ctx context.Context, rawURL string, o RemoteOptions) (*Remote, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL)
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Probe <= 0 {
		o.Probe = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Remote{raw: rawURL, url: u.Redacted(), timeout: o.Timeout, probe: o.Probe, log: o.Log,
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	msg := "not opened yet"
	r.why.Store(&msg)
	r.since.Store(time.Now().UnixNano())
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	go r.run(ctx)
	return r, nil
}

// run opens the bucket, then probes it: at once after a call failed, every
// probe interval while it is unreachable, half as often while it is
// reachable.
func (r *Remote) run(ctx context.Context) {
	defer close(r.done)
	for {
		r.check(ctx)
		every := r.probe
		if r.reachable.Load() {
			every *= 2
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			t.Stop()
		case <-t.C:
		}
	}
}

// check opens the bucket if it is not open, else pings it, within the
// timeout, and records the outcome.
func (r *Remote) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	s := r.store.Load()
	var err error
	if s == nil {
		if s, err = Open(cctx, r.raw); err == nil {
			r.store.Store(s)
		}
	} else {
		err = s.Ping(cctx)
	}
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("archive %s did not answer within %v (CORREX_ARCHIVE_TIMEOUT)", r.url, r.timeout)
		}
		r.markDown(err)
		return
	}
	if !r.reachable.Swap(true) {
		r.warned.Store(false)
		r.log.Info("the archive is reachable", "archive", r.url)
	}
}

// markDown records that the bucket is unreachable, and why.
func (r *Remote) markDown(err error) {
	msg := err.Error()
	r.why.Store(&msg)
	if r.reachable.Swap(false) {
		r.since.Store(time.Now().UnixNano())
	}
	if !r.warned.Swap(true) {
		r.log.Warn("the archive is unreachable: archiving waits and archived reads answer 503 until it answers; everything else works",
			"archive", r.url, "err", err)
	}
}

// Reachable reports whether the bucket answered its last probe or call.
func (r *Remote) Reachable() bool { return r.reachable.Load() }

// Status is nil while the bucket is reachable, and otherwise an error
// (wrapping ErrUnreachable) that says why and since when.
func (r *Remote) Status() error {
	if r.reachable.Load() {
		return nil
	}
	why := "unknown"
	if p := r.why.Load(); p != nil {
		why = *p
	}
	since := time.Unix(0, r.since.Load()).UTC().Format(time.RFC3339)
	return fmt.Errorf("%w: archive %s since %s: %s", ErrUnreachable, r.url, since, why)
}

// String is the archive's URL without its password.
func (r *Remote) String() string { return r.url }

// Timeout is the bound of each call.
func (r *Remote) Timeout() time.Duration { return r.timeout }

// Close stops the probes and closes the bucket.
func (r *Remote) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.stop()
		<-r.done
		if s := r.store.Load(); s != nil {
			err = s.Close()
		}
	})
	return err
}

// call runs f on the open bucket within the timeout (every call but the
// writes, which PutStream bounds by progress); while the bucket is
// unreachable it returns Status at once. A call that ran out of time
// marks the bucket unreachable; any other failure of the bucket has it
// probed at once.
func (r *Remote) call(ctx context.Context, f func(ctx context.Context, s *Store) error) error {
	s := r.store.Load()
	if s == nil || !r.reachable.Load() {
		return r.Status()
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := f(cctx, s)
	switch {
	case err == nil, ctx.Err() != nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrBadCursor), errors.Is(err, ErrChanged), errors.Is(err, errFormat):
		return err
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		r.markDown(fmt.Errorf("a call did not complete within %v (CORREX_ARCHIVE_TIMEOUT): %v", r.timeout, err))
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	default:
		r.probeNow()
		return err
	}
}

// probeNow has the bucket probed at once, after a call failed.
func (r *Remote) probeNow() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Ping reports whether the bucket can be reached, within the timeout.
func (r *Remote) Ping(ctx context.Context) error {
	return r.call(ctx, func(ctx context.Context, s *Store) error { return s.Ping(ctx) })
}

// Get is Store.Get, bounded by the timeout.
func (r *Remote) Get(ctx context.Context, id string) (o *Object, err error) {
	err = r.call(ctx, func(ctx context.Context, s *Store) error { o, err = s.Get(ctx, id); return err })
	return o, err
}

// List is Store.List, bounded by the timeout.
func (r *Remote) List(ctx context.Context, prefix, cursor string, limit int) (e []Entry, next string, err error) {
	err = r.call(ctx, func(ctx context.Context, s *Store) error {
		e, next, err = s.List(ctx, prefix, cursor, limit)
		return err
	})
	return e, next, err
}

// Put is Store.Put, bounded as PutStream is.
func (r *Remote) Put(ctx context.Context, o *Object) error {
	c := *o
	c.History = nil
	return r.putStream(ctx, &c, historyOf(o.History))
}

// PutStream is Store.PutStream, bounded by progress rather than by the
// timeout: a huge session's object takes as long as its history takes to
// produce and to upload, and a bound on the whole call would mark a
// healthy archive unreachable for writing one. So each call that hands the
// bucket bytes (a chunk of ChunkBytes, which the s3:// driver gathers
// into parts and uploads, the footer, the close that commits the object)
// must return within the timeout; one that does not aborts the write,
// leaves no object, and marks the archive unreachable, as a call past the
// timeout does. Time spent in each (reading the log) does not count; ctx
// bounds the whole.
func (r *Remote) PutStream(ctx context.Context, o *Object, each Entries) error {
	if o.History != nil {
		return fmt.Errorf("%w: PutStream takes the history from each, not from the object", errFormat)
	}
	return r.putStream(ctx, o, each)
}

func (r *Remote) putStream(ctx context.Context, o *Object, each Entries) error {
	s := r.store.Load()
	if s == nil || !r.reachable.Load() {
		return r.Status()
	}
	err := s.putStream(ctx, o, each, r.timeout)
	switch {
	case err == nil, ctx.Err() != nil, errors.Is(err, errFormat):
		return err
	case errors.Is(err, errStalled):
		r.markDown(fmt.Errorf("a write did not progress within %v (CORREX_ARCHIVE_TIMEOUT): %v", r.timeout, err))
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	default:
		r.probeNow()
		return err
	}
}

// Head is Store.Head, bounded by the timeout.
func (r *Remote) Head(ctx context.Context, id string) (h *Head, err error) {
	err = r.call(ctx, func(ctx context.Context, s *Store) error { h, err = s.Head(ctx, id); return err })
	return h, err
}

// HistoryPage is Store.HistoryPage, bounded by the timeout.
func (r *Remote) HistoryPage(ctx context.Context, h *Head, from int64, limit int) (p Page, err error) {
	err = r.call(ctx, func(ctx context.Context, s *Store) error { p, err = s.HistoryPage(ctx, h, from, limit); return err })
	return p, err
}

// BytesRead is Store.BytesRead of the open bucket (0 before it opens).
func (r *Remote) BytesRead() int64 {
	if s := r.store.Load(); s != nil {
		return s.BytesRead()
	}
	return 0
}
