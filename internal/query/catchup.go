package query

import (
	"context"
	"errors"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

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
