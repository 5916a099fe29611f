package projector

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// onAssigned creates the state of newly assigned partitions. Offsets are set
// by adjustOffsets, which franz-go calls right after. A partition beyond the
// known count means the topic grew: the next record off its key's partition
// reads the count again at once.
func (p *Projector) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range assigned[p.cfg.Topic] {
		if id >= p.pt.n {
			p.pt.refreshed = time.Time{} // the topic grew: read the count at the next doubt
		}
		if p.parts[id] == nil {
			p.parts[id] = &partState{id: id, sessions: map[string]*entry{}, next: -1, hw: -1, lastHW: -1}
		}
	}
	p.assigned.Store(int32(len(p.parts)))
	p.log.Info("partitions assigned", "partitions", assigned[p.cfg.Topic], "owned", len(p.parts))
}

// adjustOffsets starts every assigned partition at its Redis checkpoint (the
// next offset to fold), or at the earliest offset when it has none. A
// checkpoint beyond the end of the log means the read model belongs to
// another log (the topic was deleted and recreated, or truncated): folding
// from there would silently skip events, so the partition is paused and
// /readyz reports it until an operator runs `projector reset`.
func (p *Projector) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := offsets[p.cfg.Topic]
	if len(parts) == 0 {
		return offsets, nil
	}
	select {
	case <-p.clientsSet:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var ids []int32
	for id := range parts {
		ids = append(ids, id)
	}
	for attempt := 0; ; attempt++ {
		cps, err := p.store.Checkpoints(ctx, p.cfg.Topic)
		if err == nil {
			ends, eerr := p.adm.ListEndOffsets(ctx, p.cfg.Topic)
			if eerr == nil {
				p.mu.Lock()
				defer p.mu.Unlock()
				var stall []int32
				for _, id := range ids {
					part := p.parts[id]
					cp, ok := cps[id]
					if !ok {
						parts[id] = kgo.NewOffset().AtStart()
						continue
					}
					parts[id] = kgo.NewOffset().At(cp.Offset).WithEpoch(-1)
					if part != nil {
						part.ckptKnown, part.lastCkpt, part.next = true, cp.Offset, cp.Offset
						part.lastHW, part.hw = cp.HighWatermark, cp.HighWatermark
					}
					if end, ok := ends.Lookup(p.cfg.Topic, id); ok && end.Err == nil && cp.Offset > end.Offset {
						msg := fmt.Sprintf("checkpoint %d is beyond the end of the log (%d): the topic was recreated or truncated, so the read model belongs to another log; run `projector reset` to clear it and rebuild", cp.Offset, end.Offset)
						p.stalled[id] = msg
						stall = append(stall, id)
						p.log.Error("partition stalled", "partition", id, "reason", msg)
					} else {
						delete(p.stalled, id)
					}
				}
				if len(stall) > 0 {
					p.cl.PauseFetchPartitions(map[string][]int32{p.cfg.Topic: stall})
				}
				return offsets, nil
			}
			err = eerr
		}
		p.log.Warn("reading checkpoints for assigned partitions", "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// onRevoked writes what the revoked partitions folded, their checkpoints and
// Kafka offsets, then drops their state. It runs between polls
// (BlockRebalanceOnPoll), so no fold is in progress.
func (p *Projector) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ids := revoked[p.cfg.Topic]
	if len(ids) == 0 || p.crashed.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.collect(true); err != nil {
		p.log.Error("flush before revoke", "err", err)
		p.drop(ids)
		return
	}
	only := map[int32]bool{}
	for _, id := range ids {
		only[id] = true
	}
	job := p.buildJob(only)
	fctx, cancel := context.WithTimeout(p.flushCtx, 10*time.Second)
	defer cancel()
	if err := p.runJob(fctx, job); err != nil {
		// Not fatal: the next owner replays from the last checkpoint.
		p.log.Error("flush of revoked partitions", "partitions", ids, "err", err)
	} else {
		p.finish(job)
		offsets := map[int32]kgo.EpochOffset{}
		for _, cp := range job.checkpoints {
			offsets[cp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp.Offset}
		}
		if len(offsets) > 0 {
			cl.CommitOffsetsSync(fctx, map[string]map[int32]kgo.EpochOffset{p.cfg.Topic: offsets}, nil)
		}
	}
	p.drop(ids)
	p.log.Info("partitions revoked", "partitions", ids, "owned", len(p.parts))
}

// onLost drops partitions without writing: another member may own them, and
// its writes win anyway (fencing); ours would only be fenced.
func (p *Projector) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ids := lost[p.cfg.Topic]
	if len(ids) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.collect(true)
	p.drop(ids)
	p.log.Warn("partitions lost", "partitions", ids, "owned", len(p.parts))
}

func (p *Projector) drop(ids []int32) {
	for _, id := range ids {
		if part := p.parts[id]; part != nil {
			p.dropSessions(part)
			delete(p.parts, id)
			delete(p.stalled, id)
		}
	}
	p.assigned.Store(int32(len(p.parts)))
}
