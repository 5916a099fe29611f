package projector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Restoring a lost partition from the snapshot changelog (DESIGN 12.2):
// wherever the projector would fold a partition from offset 0 (rebuild,
// a partition with no checkpoint, a rebuild resumed at 0), it reads the
// partition's changelog to its end instead, keeps the latest record of
// each key (changelog.Latest), writes the snapshots back (fenced, in
// chunks), arms their deadlines and links the children to their parents,
// stores the changelog's checkpoint as the partition's, and folds the
// events topic from there.
//
// Why that equals an uninterrupted fold: every snapshot in the changelog
// was produced after the records of its batch (change feed, derived
// events, dead letters) were acknowledged, and only for a partition whose
// read model Redis still held (flusher.produceChangelog); a checkpoint
// record was produced only after every snapshot it covers was
// acknowledged. So the kept snapshot of each session reflects at least
// every event of it below the checkpoint, and whatever it reflects beyond
// was fully written out: the fold from the checkpoint skips those events
// (the skip rule) and folds the rest, as the uninterrupted fold did. The
// outbox, gone with Redis, is not needed for what is skipped, since its
// records were acknowledged.
//
// Durability: a restore runs only with the partition's checkpoint reset to
// 0 with the rebuild mark and its snapshots deleted (the rebuild's order,
// ResetCheckpoint first), so a crash anywhere in it (crashRestoreWritten:
// after the snapshots, deadlines and children are written, before the
// checkpoint) leaves checkpoint 0 with the mark: the next owner deletes
// the partition again and restores again. The checkpoint is written
// expecting the reset (a Redis lost meanwhile refuses it, and the restore
// starts over) and read back; once it is stored (crashRestoreCheckpoint),
// a restart folds from it like from any checkpoint, the mark staying
// until the fold reaches the log's end as it was when the rebuild began.

// restoreChunk is how many snapshots a restore writes per PutBatch.
const restoreChunk = 1000

// restorePlan is what a partition's changelog allows.
type restorePlan struct {
	latest     changelog.Latest
	records    int   // changelog records read
	eventStart int64 // the events partition's log start offset
	eventEnd   int64 // its end offset
	// stall, when set, says why the changelog cannot be used and the
	// partition must wait for an operator (its checkpoint is beyond the
	// events log: it belongs to another log).
	stall string
	// gap, when set, is the alert of a changelog checkpoint older than the
	// events log's start: the restore proceeds, but events were lost.
	gap string
	// read is how long reading the changelog took.
	read time.Duration
}

// usable reports whether the plan restores (a changelog checkpoint to
// fold from, within the events log).
func (pl *restorePlan) usable() bool {
	return pl != nil && pl.stall == "" && pl.latest.HasCheckpoint && pl.latest.Checkpoint.Offset > 0
}

// restoreBounds is what a restore plan needs from Kafka besides the
// changelog's records: the events topic's start and end offsets and the
// changelog's end offsets, listed once for all the partitions a start
// restores.
type restoreBounds struct {
	starts, ends kadm.ListedOffsets
}

// listRestoreBounds lists the offsets planRestore reads (two requests,
// whatever the number of partitions).
func (p *Projector) listRestoreBounds(ctx context.Context) (restoreBounds, error) {
	var b restoreBounds
	var err error
	if b.starts, err = p.adm.ListStartOffsets(ctx, p.cfg.Topic); err != nil {
		return b, err
	}
	b.ends, err = p.adm.ListEndOffsets(ctx, p.cfg.Topic, p.flush.changelog)
	return b, err
}

// planRestore reads partition id's changelog to its end (as it was when
// the bounds were listed) and takes the events partition's bounds from b.
// It returns nil when the changelog is off or unusable (a record it cannot
// read: the restore then folds from 0 as without a changelog, which is
// always correct).
func (p *Projector) planRestore(ctx context.Context, id int32, b restoreBounds) (*restorePlan, error) {
	if p.flush.changelog == "" {
		return nil, nil
	}
	topic := p.flush.changelog
	starts, ends := b.starts, b.ends
	pl := &restorePlan{}
	if s, ok := starts.Lookup(p.cfg.Topic, id); ok && s.Err == nil {
		pl.eventStart = s.Offset
	}
	e, ok := ends.Lookup(p.cfg.Topic, id)
	if !ok || e.Err != nil {
		return nil, fmt.Errorf("the events topic's end offset of partition %d: %v", id, e.Err)
	}
	pl.eventEnd = e.Offset
	ce, ok := ends.Lookup(topic, id)
	if !ok || ce.Err != nil {
		return nil, fmt.Errorf("the changelog's end offset of partition %d: %v", id, ce.Err)
	}
	if ce.Offset > 0 {
		start := time.Now()
		defer func() { pl.read = time.Since(start) }()
		if err := p.readChangelog(ctx, id, ce.Offset, pl); err != nil {
			var bad badChangelog
			if errors.As(err, &bad) {
				p.log.Error("the changelog cannot be read: folding the partition from the start of the log instead", "partition", id, "err", err)
				return nil, nil
			}
			return nil, err
		}
	}
	if !pl.latest.HasCheckpoint {
		return pl, nil
	}
	cp := pl.latest.Checkpoint.Offset
	switch {
	case cp > pl.eventEnd:
		pl.stall = fmt.Sprintf("the changelog's checkpoint %d is beyond the end of the log (%d): the topic was recreated or truncated, so the changelog belongs to another log; delete topic %s (the projector creates it again) or set CORREX_CHANGELOG=false, then restart",
			cp, pl.eventEnd, topic)
	case cp < pl.eventStart:
		pl.gap = fmt.Sprintf("restored from the changelog's checkpoint %d, older than the log's start %d: events %d to %d are gone (retention), and what they did is missing from the read model",
			cp, pl.eventStart, cp, pl.eventStart-1)
	}
	return pl, nil
}

// badChangelog is a changelog record a restore cannot use.
type badChangelog struct{ err error }

func (b badChangelog) Error() string { return b.err.Error() }
func (b badChangelog) Unwrap() error { return b.err }

// readChangelog reads partition id of the changelog from its start up to
// end into pl.latest, with a client of its own.
func (p *Projector) readChangelog(ctx context.Context, id int32, end int64, pl *restorePlan) error {
	topic := p.flush.changelog
	cl, err := kgo.NewClient(append(p.cfg.Kafka.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {id: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxPartitionBytes(16<<20),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	next, idle := int64(0), 0
	for next < end {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var bad error
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end || bad != nil {
				return
			}
			n++
			next = r.Offset + 1
			rec, err := changelog.DecodeRecord(r)
			if err != nil {
				bad = badChangelog{fmt.Errorf("offset %d: %w", r.Offset, err)}
				return
			}
			pl.records++
			pl.latest.Add(rec)
		})
		if bad != nil {
			return bad
		}
		if n == 0 {
			if idle++; idle == 30 {
				return fmt.Errorf("reading the changelog's partition %d: nothing past offset %d of %d in 30s", id, next, end)
			}
			continue
		}
		idle = 0
	}
	return nil
}

// writeRestore writes the plan's snapshots (fenced, restoreChunk at a
// time), arms their deadlines, and links each open child to its parent
// in the children index (a cascade then reaches it, as after its
// SessionCreated: cascade.go's familyOf), then reports how many it wrote.
func (p *Projector) writeRestore(ctx context.Context, id int32, pl *restorePlan) (int, error) {
	ids := make([]string, 0, len(pl.latest.Snapshots))
	for sid := range pl.latest.Snapshots {
		ids = append(ids, sid)
	}
	sort.Strings(ids)
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), restoreChunk)]
		ids = ids[len(chunk):]
		entries := make([]snapshot.Entry, len(chunk))
		armed := make([]projstore.ArmedDeadline, 0, len(chunk))
		var links []projstore.ChildLink
		var s snapshot.Snapshot
		for i, sid := range chunk {
			rec := pl.latest.Snapshots[sid]
			entries[i] = snapshot.Entry{SessionID: sid, Data: rec.Snapshot}
			s = snapshot.Snapshot{}
			if err := snapshot.Decode(rec.Snapshot, &s); err != nil {
				return 0, final(fmt.Errorf("the changelog's snapshot of %s: %w", sid, err)) // DecodeRecord read it
			}
			armed = append(armed, armedOf(&s, p.cfg.Timeouts, p.cfg.ForcedGrace))
			if par := s.ParentSessionID; par != "" && par != s.ID && fsm.ValidSessionID(par) && !s.Terminal() {
				links = append(links, projstore.ChildLink{Parent: par, Child: s.ID})
			}
		}
		if err := retry(ctx, p.log, "writing the restored snapshots", func(ctx context.Context) error {
			_, err := p.store.PutBatch(ctx, entries)
			return err
		}, "partition", id); err != nil {
			return 0, err
		}
		if err := retry(ctx, p.log, "arming the restored snapshots' deadlines", func(ctx context.Context) error {
			_, err := p.store.ArmDeadlines(ctx, p.cfg.Topic, map[int32][]projstore.ArmedDeadline{id: armed})
			return err
		}, "partition", id); err != nil {
			return 0, err
		}
		if err := retry(ctx, p.log, "linking the restored children to their parents", func(ctx context.Context) error {
			return p.store.AddChildren(ctx, links)
		}, "partition", id); err != nil {
			return 0, err
		}
	}
	return len(pl.latest.Snapshots), nil
}

// restoreAfterReset restores partition id from pl once its checkpoint is
// reset to 0 with the rebuild mark and its snapshots are deleted: it
// writes the snapshots, then stores the changelog's checkpoint and reads
// it back. again is set when Redis lost the reset meanwhile: the caller
// starts over from the reset. A simulated crash returns errCrashed.
func (p *Projector) restoreAfterReset(ctx context.Context, id int32, pl *restorePlan) (cp snapshot.Checkpoint, again bool, err error) {
	start := time.Now()
	n, err := p.writeRestore(ctx, id, pl)
	if err != nil {
		return cp, false, err
	}
	if p.crash.at(crashRestoreWritten) {
		return cp, false, errCrashed
	}
	want := snapshot.Checkpoint{Partition: id, Offset: pl.latest.Checkpoint.Offset, HighWatermark: pl.latest.Checkpoint.HighWatermark, Expected: true}
	err = retry(ctx, p.log, "storing the restored partition's checkpoint", func(ctx context.Context) error {
		prev, err := p.store.SaveCheckpoints(ctx, p.cfg.Topic, []snapshot.Checkpoint{want}, time.Now())
		if err != nil {
			return err
		}
		if len(prev) == 1 && prev[0].Lost(want) {
			again = true
			return nil
		}
		cps, err := p.store.Checkpoints(ctx, p.cfg.Topic)
		if err != nil {
			return err
		}
		got, ok := cps[id]
		if !ok || got.Offset != want.Offset {
			again = true // emptied, or another checkpoint won: start over
			return nil
		}
		cp = got
		return nil
	})
	if err != nil || again {
		return cp, again, err
	}
	defer func() {
		if p.crash.at(crashRestoreCheckpoint) {
			cp, err = snapshot.Checkpoint{}, errCrashed
		}
	}()
	p.log.Info("restored the partition from the changelog", "partition", id, "sessions", n, "records", pl.records,
		"checkpoint", cp.Offset, "read", pl.read, "written", time.Since(start))
	if r, ok := p.obs.(interface {
		Restored(partition int32, sessions int, gap bool)
	}); ok {
		r.Restored(id, n, pl.gap != "")
	}
	p.restores.Add(1)
	return cp, false, nil
}

// restoreNote is what a restore on assignment leaves for adjustOffsets to
// report: a stall (a changelog beyond the events log) or the gap alert.
type restoreNote struct{ stall, gap string }

// restoreOnStart restores from the changelog each assigned partition whose
// stored checkpoint is 0 (startCheckpoints stored it for one without, or a
// rebuild was resumed and its deletes are done), when the changelog has a
// checkpoint for it, and updates cps with the restored checkpoints. A
// partition that had none is first reset with the rebuild mark (the
// events log's end), its snapshots deleted and the reset read back, as a
// rebuild does, so that a crash in the restore restarts it. An error makes
// the caller read the start again.
func (p *Projector) restoreOnStart(ctx context.Context, ids []int32, cps map[int32]snapshot.Checkpoint) (map[int32]restoreNote, error) {
	if p.flush.changelog == "" {
		return nil, nil
	}
	type result struct {
		id   int32
		cp   snapshot.Checkpoint
		note restoreNote
		ok   bool
		err  error
	}
	var todo []int32
	for _, id := range ids {
		if cps[id].Offset == 0 {
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	bounds, err := p.listRestoreBounds(ctx)
	if err != nil {
		return nil, err
	}
	// The partitions are restored side by side (restoreParallel at a
	// time): each is mostly round trips to Kafka and Redis.
	results := make(chan result, len(todo))
	sem := make(chan struct{}, restoreParallel)
	for _, id := range todo {
		go func(id int32, cp snapshot.Checkpoint) {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := result{id: id}
			pl, err := p.planRestore(ctx, id, bounds)
			switch {
			case err != nil:
				r.err = err
			case pl != nil && pl.stall != "":
				r.note = restoreNote{stall: pl.stall}
			case pl.usable():
				p.mu.Lock()
				p.stalls.restore(id, fmt.Sprintf("%d sessions, to checkpoint %d", len(pl.latest.Snapshots), pl.latest.Checkpoint.Offset))
				p.mu.Unlock()
				r.cp, r.err = p.restoreStarted(ctx, id, cp, pl)
				r.ok = r.err == nil
				r.note.gap = pl.gap
				p.mu.Lock()
				p.stalls.restored(id)
				p.mu.Unlock()
			}
			results <- r
		}(id, cps[id])
	}
	var notes map[int32]restoreNote
	var errs []error
	for range todo {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		if r.ok {
			cps[r.id] = r.cp
		}
		if r.note != (restoreNote{}) {
			if notes == nil {
				notes = map[int32]restoreNote{}
			}
			notes[r.id] = r.note
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, e := range errs {
			if errors.Is(e, errCrashed) {
				return nil, final(errCrashed)
			}
		}
		return nil, err
	}
	return notes, nil
}

// restoreParallel is how many partitions a start restores at once.
const restoreParallel = 8

// restoreStarted restores partition id, whose stored checkpoint is cp (0),
// from pl, after resetting it with the rebuild mark if it has none.
func (p *Projector) restoreStarted(ctx context.Context, id int32, cp snapshot.Checkpoint, pl *restorePlan) (snapshot.Checkpoint, error) {
	if cp.RebuildUntil == 0 {
		until := max(pl.eventEnd, 1)
		if err := p.store.ResetCheckpoint(ctx, p.cfg.Topic, id, until, time.Now()); err != nil {
			return cp, err
		}
		if p.crash.at(crashRebuildReset) {
			return cp, final(errCrashed)
		}
		if _, err := p.store.DeletePartition(ctx, id); err != nil {
			return cp, err
		}
		if err := p.store.DeleteDeadlines(ctx, p.cfg.Topic, id); err != nil {
			return cp, err
		}
		if p.crash.at(crashRebuildDeleted) {
			return cp, final(errCrashed)
		}
		now, err := p.store.Checkpoints(ctx, p.cfg.Topic)
		if err != nil {
			return cp, err
		}
		if got, ok := now[id]; !ok || got.Offset != 0 || got.RebuildUntil != until {
			return cp, fmt.Errorf("the checkpoint of partition %d changed while its snapshots were deleted before its restore: reading it again", id)
		}
	}
	restored, again, err := p.restoreAfterReset(ctx, id, pl)
	if errors.Is(err, errCrashed) {
		return cp, final(err)
	}
	if err != nil {
		return cp, err
	}
	if again {
		return cp, fmt.Errorf("the checkpoint of partition %d changed during its restore (Redis emptied or gone back in time): reading it again", id)
	}
	return restored, nil
}
