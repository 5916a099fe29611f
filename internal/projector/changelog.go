package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The snapshot changelog (docs/exactly-once.md): each batch's
// snapshots are produced to changelog.Topic(Topic) on their events
// partition, after every record of the batch is acknowledged and before
// its checkpoints, and each partition's checkpoint record after its
// checkpoint is stored. Restoring from it is restore.go's.

// produceChangelog produces the batch's snapshots to the changelog and
// waits for their acknowledgement (the changelog step of writeSteps). It
// runs after the acknowledged step, so a snapshot in the changelog implies
// that the change feed records, derived events and dead letters of
// what it reflects are acknowledged: a restore loses the outbox with Redis,
// and its fold skips what the restored snapshots reflect.
//
// A snapshot folded after Redis lost the read model (and before the loss
// was noticed) may lack the history Redis lost, and must never reach the
// changelog, where a restore would take it as the latest: the partitions'
// stored checkpoints are read first, and a partition whose checkpoint is
// gone or lower than the one this projector knows (what
// snapshot.PriorCheckpoint.Lost tells at the checkpoint write) has nothing
// produced; its checkpoint is not written either, and the partition is
// rebuilt (flusher.finish). Any such snapshot was folded after the loss,
// so before this read.
func (f *flusher) produceChangelog(ctx context.Context, w *batchWrite) error {
	job := w.job
	if len(job.entries) == 0 {
		return nil
	}
	if err := f.checkHeld(ctx, job); err != nil {
		return err
	}
	keys, err := f.auth.wait(ctx)
	if err != nil {
		return err
	}
	var failed atomic.Pointer[error]
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	n := 0
	for i, e := range job.entries {
		part := job.positions[i].Partition
		if job.lost[part] || job.stale[part] || job.tombstoned[e.SessionID] {
			continue
		}
		rec := changelog.SnapshotRecord(f.changelog, part, e.SessionID, e.Data)
		keys.Sign(rec)
		f.cl.Produce(ctx, rec, done)
		n++
	}
	if n == 0 {
		return nil
	}
	if err := f.cl.Flush(ctx); err != nil {
		return fmt.Errorf("projector: changelog produce: %w", err)
	}
	if errp := failed.Load(); errp != nil {
		return fmt.Errorf("projector: changelog produce: %w", *errp)
	}
	return nil
}

// checkHeld adds to job.lost the partitions of the batch whose stored
// checkpoint Redis lost (see produceRecords and produceChangelog). A
// batch with no checkpoint known to be stored has nothing to find lost,
// and reads nothing.
func (f *flusher) checkHeld(ctx context.Context, job *flushJob) error {
	if !slices.ContainsFunc(job.checkpoints, func(cp snapshot.Checkpoint) bool { return cp.Expected }) {
		return nil
	}
	return retry(ctx, f.log, "reading checkpoints before producing the batch's records", func(ctx context.Context) error {
		stored, err := f.store.Checkpoints(ctx, f.topic)
		if err != nil {
			return err
		}
		// A partition found lost stays lost for the batch: its records
		// were not produced (produceRecords), so neither may its
		// checkpoint be written.
		for _, cp := range job.checkpoints {
			got, ok := stored[cp.Partition]
			if cp.Expected && (!ok || got.Offset < cp.Known) {
				if job.lost == nil {
					job.lost = map[int32]bool{}
				}
				job.lost[cp.Partition] = true
			}
		}
		return nil
	})
}

// produceChangelogCheckpoints produces one checkpoint record per partition
// whose checkpoint the batch stored, after the batch's snapshots were
// acknowledged (produceChangelog), so a changelog checkpoint never runs
// ahead of its snapshots. It does not wait: the next batch's acknowledged
// step does, and the record follows its snapshots on their partition (the
// client is idempotent). A record that fails leaves the changelog's
// checkpoint behind, which is safe: a restore folds a little more.
func (f *flusher) produceChangelogCheckpoints(ctx context.Context, w *batchWrite) error {
	job := w.job
	for i, cp := range job.checkpoints {
		if job.lost[cp.Partition] || job.stale[cp.Partition] || (i < len(job.prev) && job.prev[i].Lost(cp)) {
			continue
		}
		rec := changelog.CheckpointRecord(f.changelog, cp.Partition, changelog.Checkpoint{Offset: cp.Offset, HighWatermark: cp.HighWatermark})
		keys, err := f.auth.wait(ctx) // loaded before anything is folded: at once
		if err != nil {
			return err
		}
		keys.Sign(rec)
		f.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				f.log.Warn("producing a changelog checkpoint (the changelog's checkpoint stays behind)", "partition", r.Partition, "err", err)
			}
		})
	}
	return nil
}

// ensureChangelog creates the changelog's topic t of the events topic: compacted, with
// delete.retention.ms far above the longest restore
// (changelog.DeleteRetention), and the events topic's n partitions. An
// existing one with another count, or whose cleanup.policy is not
// compact, is refused (the first result): its records go to their
// session's events partition, and without compaction a restore reads the
// whole history. The second result is an error worth waiting out.
func ensureChangelog(ctx context.Context, adm *kadm.Client, topic, t string, n int32) (refuse, err error) {
	compact, retention := "compact", changelog.DeleteRetention
	m, err := kafka.EnsureTopicConfigs(ctx, adm, t, n, map[string]*string{"cleanup.policy": &compact, "delete.retention.ms": &retention})
	if err != nil {
		return nil, err
	}
	fix := fmt.Sprintf("delete topic %s (the projector creates it again) or set CORREX_CHANGELOG=false", t)
	if m != n {
		return fmt.Errorf("projector: the changelog's topic %s has %d partitions and the events topic %s has %d: they must be equal (%s)",
			t, m, topic, n, fix), nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("describe topic %s: %w", t, err)
	}
	rc, err := rcs.On(t, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, fmt.Errorf("describe topic %s: %w", t, err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			policy = c.MaybeValue()
		}
	}
	if !strings.Contains(policy, "compact") {
		return fmt.Errorf("projector: the changelog's topic %s has cleanup.policy=%q, not compact: a restore would read its whole history, and retention would drop snapshots it needs (%s)",
			t, policy, fix), nil
	}
	return nil, nil
}
