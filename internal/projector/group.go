package projector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// onAssigned creates the state of newly assigned partitions and starts
// firing their deadlines. Offsets are set by adjustOffsets, which franz-go
// calls right after. A partition beyond the known count means the topic
// grew: the next record off its key's partition reads the count again at
// once. It waits until Run has built the firer (clientsSet); the revoke
// and loss callbacks come after an assignment, so after that.
func (p *Projector) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	select {
	case <-p.clientsSet:
	case <-ctx.Done():
		return // the client is closing
	}
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	for _, id := range assigned[p.cfg.Topic] {
		if id >= p.st.pt.n {
			p.st.pt.refreshed = time.Time{} // the topic grew: read the count at the next doubt
		}
		p.st.addPartition(id)
		p.fire.start(id)
		p.sweep.start(id)
		p.verify.Load().own(id)
	}
	p.st.assigned.Store(int32(len(p.st.parts)))
	p.log.Info("partitions assigned", "partitions", assigned[p.cfg.Topic], "owned", len(p.st.parts))
}

// onRevoked writes what the revoked partitions folded, their checkpoints and
// Kafka offsets, then drops their state. It runs between polls
// (BlockRebalanceOnPoll), so no fold is in progress.
func (p *Projector) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ids := revoked[p.cfg.Topic]
	if len(ids) == 0 || p.crash.crashed.Load() {
		return
	}
	p.fire.stop(ids...)
	p.sweep.stop(ids...)
	p.verify.Load().disown(ids...)
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if err := p.rec.collect(true); err != nil {
		p.log.Error("flush before revoke", "err", err)
		p.st.drop(ids)
		return
	}
	only := map[int32]bool{}
	for _, id := range ids {
		only[id] = true
	}
	job := p.flush.build(&p.st.cache, p.st.parts, only)
	fctx, cancel := context.WithTimeout(p.flush.ctx, 10*time.Second)
	defer cancel()
	if err := p.flush.write(fctx, job); err != nil {
		// Not fatal: the next owner replays from the last checkpoint.
		p.log.Error("flush of revoked partitions", "partitions", ids, "err", err)
	} else {
		p.rec.finish(job)
		offsets := map[int32]kgo.EpochOffset{}
		for _, cp := range job.checkpoints {
			offsets[cp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp.Offset}
		}
		if len(offsets) > 0 {
			cl.CommitOffsetsSync(fctx, map[string]map[int32]kgo.EpochOffset{p.cfg.Topic: offsets}, nil)
		}
	}
	p.st.drop(ids)
	p.log.Info("partitions revoked", "partitions", ids, "owned", len(p.st.parts))
}

// onLost drops partitions without writing: another member may own them, and
// its writes win anyway (fencing); ours would only be fenced.
func (p *Projector) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ids := lost[p.cfg.Topic]
	if len(ids) == 0 {
		return
	}
	p.fire.stop(ids...)
	p.sweep.stop(ids...)
	p.verify.Load().disown(ids...)
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	_ = p.rec.collect(true)
	p.st.drop(ids)
	p.log.Warn("partitions lost", "partitions", ids, "owned", len(p.st.parts))
}

// leave removes this replica's static membership, so the group rebalances
// now instead of after the session timeout. Closing a client with an
// instance id does not leave (KIP-345); this asks the coordinator directly.
func (p *Projector) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(p.cfg.Kafka.Opts()...)
	if err != nil {
		p.log.Warn("leaving the group", "err", err)
		return
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(p.cfg.Group).InstanceIDs(p.cfg.InstanceID).Reason("shutting down"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		p.log.Warn("leaving the group; partitions move after the session timeout", "err", err)
		return
	}
	p.log.Info("left the group", "instance", p.cfg.InstanceID)
}

// ensureTopics creates the events topic, the dead-letter topic and, when
// the change feed is on, the change feed's topic with the events topic's
// partition count. A change feed topic with another count is an error that
// waiting does not cure: its records go to their source record's partition.
// So is, when the changelog is on, a changelog topic with another count or
// not compacted (ensureChangelog).
func (p *Projector) ensureTopics(ctx context.Context) error {
	for {
		n, err1 := kafka.EnsureTopicRetention(ctx, p.adm, p.cfg.Topic, int32(p.cfg.Partitions), p.cfg.EventsRetention)
		_, err2 := kafka.EnsureTopic(ctx, p.adm, kafka.DLQTopic(p.cfg.Topic), int32(p.cfg.Partitions))
		var err3 error
		if ft := p.st.derived.feedTopic; ft != "" && err1 == nil {
			var m int32
			if m, err3 = kafka.EnsureTopic(ctx, p.adm, ft, n); err3 == nil && m != n {
				return fmt.Errorf("projector: the change feed's topic %s has %d partitions and the events topic %s has %d: they must be equal (recreate %s, or set CORREX_CHANGE_FEED=false)",
					ft, m, p.cfg.Topic, n, ft)
			}
		}
		var err4 error
		if p.flush.changelog != "" && err1 == nil {
			var refuse error
			if refuse, err4 = p.ensureChangelog(ctx, n); refuse != nil {
				return refuse
			}
		}
		if err := errors.Join(err1, err2, err3, err4); err == nil {
			p.st.setPartitions(n)
			return nil
		} else {
			p.log.Warn("waiting for Kafka", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
