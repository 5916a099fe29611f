package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// folder is the fold goroutine: it polls (loop), decodes, reads the
// snapshots of the sessions not cached (getMany), folds the records in
// order (process, fold), hands batches to the flusher (startFlush) and
// writes the last one on a graceful stop (shutdown). It owns the reducer,
// the decode buffer and whether a partition advanced since the last batch
// (progress); the partitions and their sessions are the state's, which
// it holds st.mu over between polls. It is built by New; what the client
// makes is set by Run (connect) before the first poll.
type folder struct {
	cfg   Config
	log   *slog.Logger
	store Store
	obs   Observer
	crash *crashPoints
	auth  *systemAuth
	st    *state
	// verify is the background verifier, nil while off: the fold drops
	// its copies of the sessions it repaired (dropArchived).
	verify *atomic.Pointer[verifier]

	reducer  fsm.Reducer
	events   []fsm.Event // decode buffer, reused across polls
	progress bool        // a partition advanced since the last flush was built

	cl    *kgo.Client
	flush *flusher
	rec   *recovery
	sweep *sweeper
	dlq   *deadLetters
}

func (f *folder) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		// The poll waits at most FlushInterval, and returns as soon as the
		// batch in flight is written, so that what was folded meanwhile
		// is flushed at once (group commit, see flusher.due).
		pctx, cancel := context.WithTimeout(ctx, f.cfg.FlushInterval)
		f.st.mu.Lock()
		written := f.flush.inflightDone()
		f.st.mu.Unlock()
		if written != nil {
			go func() {
				select {
				case <-written:
					cancel()
				case <-pctx.Done():
				}
			}()
		}
		fetches := f.cl.PollRecords(pctx, f.cfg.MaxPollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				f.log.Warn("fetch", "topic", t, "partition", part, "err", err)
			}
		})
		f.st.mu.Lock()
		clear(f.st.rebuiltNow)
		err := f.rec.collect(false)
		f.dropArchived()
		if err == nil {
			err = f.process(ctx, fetches)
		}
		if err == nil && f.flush.due(f.st.cache.dirtyLen(), f.st.cache.dirtyBytes, f.progress, catchingUpOn(fetches, f.st.parts, f.cfg.MaxPollRecords)) {
			err = f.startFlush()
		}
		if err == nil && f.flush.inflight == nil && time.Since(f.st.lastCheck) >= f.cfg.MaxFlushInterval {
			f.rec.checkCheckpoints(ctx)
		}
		f.st.cache.evict()
		f.st.mu.Unlock()
		if f.crash.crashed.Load() {
			return errCrashed // a crash point hit between the steps above
		}
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Stopped while reading snapshots: what was folded before is
			// flushed by the shutdown; the rest is replayed next time.
			return nil
		}
		if err != nil {
			return err
		}
		f.cl.AllowRebalance()
	}
	return nil
}

// shutdown writes everything owned, then leaves the group (Close). It has
// until limitShutdown stops the writes.
func (f *folder) shutdown() error {
	f.st.mu.Lock()
	defer f.st.mu.Unlock()
	if err := f.rec.collect(true); err != nil {
		return err
	}
	job := f.buildJob()
	if err := f.flush.write(f.flush.ctx, job); err != nil {
		return fmt.Errorf("projector: final flush: %w", err)
	}
	f.rec.finish(job)
	if f.flush.changelog != "" {
		// The changelog's checkpoint records are produced without a wait
		// (the next write's waits for them): wait here, or closing the
		// client drops them and a restore folds more than it need.
		if err := f.cl.Flush(f.flush.ctx); err != nil {
			f.log.Warn("the changelog's last checkpoint records were not acknowledged; its checkpoints stay behind", "err", err)
		}
	}
	f.log.Info("flushed and checkpointed on shutdown", "snapshots", len(job.entries), "partitions", len(job.checkpoints))
	return nil
}

// catchingUpOn reports whether there is more to fold than the poll gave: it
// came back full, or the owned partitions are at least MaxPollRecords
// behind the high watermarks their latest fetches reported (the fetch
// buffer ran dry before the log end). A backlog under MaxPollRecords is
// caught up: one more poll folds it, and a gap of a few offsets at a
// partition's end (transaction markers) never makes the projector wait.
func catchingUpOn(fetches kgo.Fetches, parts map[int32]*partState, maxPoll int) bool {
	if fetches.NumRecords() >= maxPoll {
		return true
	}
	var behind int64
	for _, part := range parts {
		if part.next >= 0 && part.hw > part.next {
			behind += part.hw - part.next
		}
	}
	return behind >= int64(maxPoll)
}

// buildJob builds a batch of everything owned.
func (f *folder) buildJob() *flushJob {
	job := f.flush.build(&f.st.cache, f.st.parts, nil)
	f.progress = false
	return job
}

// startFlush hands a new batch to the flusher, after waiting for the one in
// flight (which is what slows folding down when Redis is slow).
func (f *folder) startFlush() error {
	if err := f.rec.collect(true); err != nil {
		return err
	}
	job := f.buildJob()
	f.st.cache.holdWriting(job)
	f.flush.start(job)
	return nil
}

// process decodes the polled records, reads the snapshots of sessions not in
// the cache in one round trip, and folds the records in order.
func (f *folder) process(ctx context.Context, fetches kgo.Fetches) error {
	recs := fetches.Records()
	if len(recs) == 0 {
		return nil
	}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if part := f.st.parts[fp.Partition]; part != nil && fp.HighWatermark >= 0 {
			part.hw = fp.HighWatermark
		}
	})
	if cap(f.events) < len(recs) {
		f.events = make([]fsm.Event, len(recs))
	}
	events := f.events[:len(recs)]
	decodeErr := make([]error, len(recs))
	wrongPart := make([]bool, len(recs))
	type miss struct {
		partition int32
		id        string
	}
	var missing []miss
	var ids []string
	seen := map[miss]bool{}
	for i, r := range recs {
		part := f.st.parts[r.Partition]
		if part == nil || f.st.rebuiltNow[r.Partition] {
			continue // revoked between fetch and now (its new owner folds it), or being rebuilt
		}
		if err := f.auth.loaded().DecodeEvent(r, &events[i]); err != nil {
			decodeErr[i] = err
			continue
		}
		m := miss{r.Partition, events[i].SessionID}
		if string(r.Key) == m.id && !f.st.pt.onKeyPartition(ctx, r) {
			wrongPart[i] = true
			continue
		}
		if f.st.cache.get(part.id, m.id) == nil && !seen[m] && string(r.Key) == m.id {
			seen[m] = true
			missing = append(missing, m)
			ids = append(ids, m.id)
		}
	}
	if len(missing) > 0 {
		snaps, tombs, err := getMany(ctx, f.store, f.log, ids)
		if err != nil {
			return err
		}
		var fresh []int32 // partitions of the sessions that look new
		for i, m := range missing {
			if snaps[i] == nil && tombs[i] == nil && !slices.Contains(fresh, m.partition) {
				fresh = append(fresh, m.partition)
			}
		}
		if len(fresh) > 0 {
			if err := f.rec.checkMisses(ctx, fresh); err != nil {
				return err
			}
		}
		for i, m := range missing {
			if part := f.st.parts[m.partition]; part != nil && !f.st.rebuiltNow[m.partition] {
				f.st.cache.add(part, m.id, snaps[i]).tomb = tombs[i]
			}
		}
	}
	for i, r := range recs {
		part := f.st.parts[r.Partition]
		if part == nil || f.st.rebuiltNow[r.Partition] {
			continue
		}
		if f.crash.at(crashFold) {
			return errCrashed
		}
		switch {
		case decodeErr[i] != nil:
			f.dlq.send(r, classify(decodeErr[i]), decodeErr[i].Error())
		case string(r.Key) != events[i].SessionID:
			f.dlq.send(r, ReasonKeyMismatch, fmt.Sprintf("record key %q (%d bytes) is not the event's sessionId %q",
				cutString(string(r.Key), 128), len(r.Key), events[i].SessionID))
		case wrongPart[i]:
			f.dlq.send(r, ReasonWrongPartition, fmt.Sprintf("key %q belongs to partition %d of %d, not %d",
				events[i].SessionID, f.st.pt.part.Partition(r, int(f.st.pt.n)), f.st.pt.n, r.Partition))
		default:
			if err := f.fold(ctx, part, r, &events[i]); err != nil {
				return err
			}
		}
		part.next = r.Offset + 1
		f.progress = true
		if f.st.cache.dirtyBytes >= f.cfg.flushBytes() {
			// FlushBytes of snapshots are dirty: written now, in the
			// middle of the poll (a poll of MaxPollRecords large records
			// would otherwise make one batch of them all). The batch's
			// checkpoints stop at this record (part.next), and it waits
			// for the one in flight, which paces the fold.
			if err := f.startFlush(); err != nil {
				return err
			}
			f.st.cache.evict()
		}
	}
	clear(events) // drop references to payloads
	return nil
}

func (f *folder) fold(ctx context.Context, part *partState, r *kgo.Record, e *fsm.Event) error {
	en := f.st.cache.get(part.id, e.SessionID)
	if en == nil { // process reads every missing session first; never fold without the stored one
		snaps, tombs, err := getMany(ctx, f.store, f.log, []string{e.SessionID})
		if err != nil {
			return err
		}
		en = f.st.cache.add(part, e.SessionID, snaps[0])
		en.tomb = tombs[0]
	}
	f.st.cache.touch(en)
	if en.tomb != nil && !en.snap.Exists() && e.Type != fsm.SessionReplaced {
		f.foldTombstoned(r, e, en.tomb)
		return nil
	}
	o, folded := en.snap.Fold(&f.reducer, e, snapshot.Position{Partition: r.Partition, Offset: r.Offset})
	if !folded {
		// Already reflected: a replay from the checkpoint. The batch that
		// stored the snapshot may have crashed before its deadlines were
		// written, so the snapshot goes in the next batch again (its put
		// is fenced, a no-op), which arms its deadline.
		f.st.cache.markDirty(en, 0)
		f.obs.Skipped(r)
		f.st.derived.skipped(r, e, &en.snap)
		return nil
	}
	if o.Result == fsm.Orphan {
		if e.Type == fsm.SessionReplaced { // the successor hears of it (reactions.go)
			f.st.derived.add(r, e, &en.snap, o)
			return nil
		}
		f.dlq.send(r, ReasonUnknownSession, "no SessionCreated for session "+e.SessionID)
		return nil
	}
	f.st.cache.markDirty(en, len(r.Value))
	f.obs.Folded(r, e, &en.snap, o)
	f.st.derived.add(r, e, &en.snap, o)
	return nil
}

// dropArchived drops from the cache the sessions the archive sweep
// removed from Redis (sweeper.take), so that a later event finds no
// session, as the store does; and the copies of the sessions the
// verifier repaired (verifier.takeRepaired), so that a later event is
// folded on the repaired snapshot, not over it on the wrong copy the
// repair replaced. Called by the fold goroutine between polls.
func (f *folder) dropArchived() {
	removed, untombed := f.sweep.take()
	for _, a := range removed {
		f.st.cache.forget(a.Position.Partition, a.SessionID, a.Position)
	}
	for _, t := range untombed {
		f.st.cache.forgetTombstone(t.Partition, t.SessionID)
	}
	if f.verify != nil {
		for _, r := range f.verify.Load().takeRepaired() {
			f.st.cache.forgetStored(r.partition, r.id)
		}
	}
}

// foldTombstoned folds an event of an archived session (docs/retention.md,
// "An archived id stays archived"): its
// tombstone says it ended, so the event is rejected as for a terminal
// session, SessionCreated duplicate_create and any other event
// after_terminal, with the same change record, metric and span; nothing
// is written (no snapshot reappears, and the archive is not touched). A
// SessionReplaced of an archived predecessor keeps the path of an unknown
// one (the successor hears of it, reactions.go).
func (f *folder) foldTombstoned(r *kgo.Record, e *fsm.Event, t *projstore.Tombstone) {
	o := fsm.Outcome{Result: fsm.Rejected, Reason: fsm.ReasonAfterTerminal, From: t.State, To: t.State}
	if e.Type == fsm.SessionCreated {
		o.Reason = fsm.ReasonDuplicateCreate
	}
	var s snapshot.Snapshot
	s.ID, s.State, s.Version = t.SessionID, t.State, t.Version
	s.Position = snapshot.Position{Partition: r.Partition, Offset: r.Offset}
	f.obs.Folded(r, e, &s, o)
	f.st.derived.add(r, e, &s, o)
}

// getMany reads snapshots, and the tombstones of the sessions that have
// none, retrying while Redis is unreachable; a corrupt snapshot is not
// retried.
func getMany(ctx context.Context, store Store, log *slog.Logger, ids []string) (snaps []*snapshot.Snapshot, tombs []*projstore.Tombstone, err error) {
	err = retry(ctx, log, "reading snapshots", func(ctx context.Context) (err error) {
		if snaps, err = store.GetMany(ctx, ids); errors.Is(err, snapshot.ErrCorrupt) {
			return final(err)
		} else if err != nil {
			return err
		}
		var gone []string
		for i, s := range snaps {
			if s == nil {
				gone = append(gone, ids[i])
			}
		}
		tombs = make([]*projstore.Tombstone, len(ids))
		if len(gone) == 0 {
			return nil
		}
		ts, err := store.Tombstones(ctx, gone)
		if errors.Is(err, snapshot.ErrCorrupt) {
			return final(err)
		} else if err != nil {
			return err
		}
		for i, j := 0, 0; i < len(ids); i++ {
			if snaps[i] == nil {
				tombs[i], j = ts[j], j+1
			}
		}
		return nil
	})
	return snaps, tombs, err
}
