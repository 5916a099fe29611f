package projector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stalls holds the partitions paused until an operator acts, with the
// reason of each. The map belongs to whoever holds Projector.mu; readiness
// reads err, an atomic snapshot replaced whenever the set changes, so that
// /readyz never waits for the fold or a flush.
type stalls struct {
	byPartition map[int32]string
	msg         atomic.Pointer[string] // nil when none is stalled
}

func (s *stalls) stall(id int32, reason string) {
	s.byPartition[id] = reason
	s.publish()
}

func (s *stalls) clear(id int32) {
	if _, ok := s.byPartition[id]; ok {
		delete(s.byPartition, id)
		s.publish()
	}
}

func (s *stalls) stalled(id int32) bool { return s.byPartition[id] != "" }

// publish replaces the snapshot err reads.
func (s *stalls) publish() {
	if len(s.byPartition) == 0 {
		s.msg.Store(nil)
		return
	}
	msgs := make([]string, 0, len(s.byPartition))
	for id, msg := range s.byPartition {
		msgs = append(msgs, fmt.Sprintf("partition %d: %s", id, msg))
	}
	sort.Strings(msgs)
	m := strings.Join(msgs, "; ")
	s.msg.Store(&m)
}

// err describes every stalled partition, or is nil. Safe for concurrent use.
func (s *stalls) err() error {
	if m := s.msg.Load(); m != nil {
		return errors.New(*m)
	}
	return nil
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
			var ob outboxRead
			if eerr == nil {
				ob, eerr = p.derived.read(ctx, p.store, p.cfg.Topic, replayStarts(ids, cps, ends, p.cfg.Topic))
			}
			if eerr == nil {
				p.mu.Lock()
				defer p.mu.Unlock()
				p.derived.load(ob)
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
						part.loaded(cp)
					}
					if end, ok := ends.Lookup(p.cfg.Topic, id); ok && end.Err == nil && cp.Offset > end.Offset {
						msg := fmt.Sprintf("checkpoint %d is beyond the end of the log (%d): the topic was recreated or truncated, so the read model belongs to another log; run `projector reset` to clear it and rebuild", cp.Offset, end.Offset)
						p.stalls.stall(id, msg)
						stall = append(stall, id)
						p.log.Error("partition stalled", "partition", id, "reason", msg)
					} else {
						p.stalls.clear(id)
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

// replayStarts returns, for the change feed's outbox, where each assigned
// partition starts folding: its checkpoint, or 0 without one. A partition
// whose checkpoint is beyond the log's end (stalled below) has none.
func replayStarts(ids []int32, cps map[int32]snapshot.Checkpoint, ends kadm.ListedOffsets, topic string) map[int32]int64 {
	starts := make(map[int32]int64, len(ids))
	for _, id := range ids {
		cp, ok := cps[id]
		if end, eok := ends.Lookup(topic, id); ok && eok && end.Err == nil && cp.Offset > end.Offset {
			continue
		}
		starts[id] = cp.Offset
	}
	return starts
}

// checkCheckpoints notices a read model that vanished while the projector had
// nothing to write (Redis emptied, or replaced by an empty one): a flush notices
// that when it writes a checkpoint, but an idle partition writes none, so
// its sessions would stay missing until its next event. Every owned partition
// whose stored checkpoint is gone is rebuilt from the earliest offset. A
// stalled partition is left alone: its remedy is `projector reset` and a
// restart. Called between polls with no batch in flight.
func (p *Projector) checkCheckpoints(ctx context.Context) {
	p.lastCheck = time.Now()
	known := false
	for _, part := range p.parts {
		known = known || part.ckptKnown
	}
	if !known {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second) // the fold waits meanwhile
	defer cancel()
	cps, err := p.store.Checkpoints(cctx, p.cfg.Topic)
	if err != nil {
		p.log.Warn("checking checkpoints", "err", err) // the next check retries
		return
	}
	for id, part := range p.parts {
		if _, ok := cps[id]; part.ckptKnown && !ok && !p.stalls.stalled(id) {
			p.rebuild(part)
		}
	}
}

// rebuild folds a partition again from the earliest offset after Redis lost
// its checkpoint. It drops the partition's cached state and deletes the
// partition's snapshots from Redis first: after the loss, some may have been
// folded without the history Redis lost (a session evicted from the cache,
// then a duplicate SessionCreated), and the skip rule would otherwise protect
// such a snapshot from the rebuild. Records of the partition already polled
// are not folded (see rebuiltNow); the replay delivers them again.
func (p *Projector) rebuild(part *partState) {
	p.log.Warn("the partition's checkpoint vanished from Redis: rebuilding it from the earliest offset",
		"partition", part.id)
	p.cache.dropPartition(part.id)
	p.cache.addPartition(part.id)
	p.derived.drop(part.id)
	for attempt := 0; ; attempt++ {
		n, err := p.store.DeletePartition(p.flush.ctx, part.id)
		if err == nil {
			p.log.Info("deleted the partition's snapshots before the rebuild", "partition", part.id, "snapshots", n)
			break
		}
		p.log.Warn("deleting the partition's snapshots", "partition", part.id, "err", err, "attempt", attempt)
		if sleep(p.flush.ctx, backoff(attempt)) != nil {
			return
		}
	}
	part.restart()
	p.rebuiltNow[part.id] = true
	p.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.cfg.Topic: {part.id: {Epoch: -1, Offset: 0}}})
}
