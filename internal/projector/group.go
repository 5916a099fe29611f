package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// group is the consumer group's side of the projector: franz-go's
// callbacks (onAssigned, onRevoked, onLost, adjustOffsets), which start
// and stop what each owned partition runs (its firer, its archive sweep,
// its verification) and add, flush and drop its state. It is built by New,
// since the callbacks are given to the client before it exists; what the
// client makes is set by Run (connect) before clientsSet is closed, and
// the callbacks that need it wait for that. The partitions' state is the
// state's, under st.mu, which the callbacks take.
type group struct {
	cfg    Config
	log    *slog.Logger
	st     *state
	crash  *crashPoints
	verify *atomic.Pointer[verifier]
	// clientsSet is closed once the fields below are set (connect), and
	// topicsReady once Run has ensured the topics.
	clientsSet, topicsReady <-chan struct{}

	fire  *firer
	sweep *sweeper
	flush *flusher
	rec   *recovery
}

// onAssigned creates the state of newly assigned partitions and starts
// firing their deadlines. Offsets are set by adjustOffsets, which franz-go
// calls right after. A partition beyond the known count means the topic
// grew: the next record off its key's partition reads the count again at
// once. It waits until Run has built the firer (clientsSet); the revoke
// and loss callbacks come after an assignment, so after that.
func (g *group) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	select {
	case <-g.clientsSet:
	case <-ctx.Done():
		return // the client is closing
	}
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	for _, id := range assigned[g.cfg.Topic] {
		if id >= g.st.pt.n {
			g.st.pt.refreshed = time.Time{} // the topic grew: read the count at the next doubt
		}
		g.st.addPartition(id)
		g.fire.start(id)
		g.sweep.start(id)
		g.verify.Load().own(id)
	}
	g.st.assigned.Store(int32(len(g.st.parts)))
	g.log.Info("partitions assigned", "partitions", assigned[g.cfg.Topic], "owned", len(g.st.parts))
}

// adjustOffsets starts the assigned partitions at their checkpoints
// (recovery.adjustOffsets) once Run has built what it needs (clientsSet)
// and ensured the topics (topicsReady): the group can assign partitions
// before that, and a start that read the changelog's offsets before its
// topic existed would find it unknown, and keep finding it so in the
// client's metadata cache.
func (g *group) adjustOffsets(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if len(offsets[g.cfg.Topic]) == 0 {
		return offsets, nil
	}
	for _, ready := range []<-chan struct{}{g.clientsSet, g.topicsReady} {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.rec.adjustOffsets(ctx, offsets)
}

// onRevoked writes what the revoked partitions folded, their checkpoints and
// Kafka offsets, then drops their state. It runs between polls
// (BlockRebalanceOnPoll), so no fold is in progress.
func (g *group) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	ids := revoked[g.cfg.Topic]
	if len(ids) == 0 || g.crash.crashed.Load() {
		return
	}
	g.fire.stop(ids...)
	g.sweep.stop(ids...)
	g.verify.Load().disown(ids...)
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	if err := g.rec.collect(true); err != nil {
		g.log.Error("flush before revoke", "err", err)
		g.st.drop(ids)
		return
	}
	only := map[int32]bool{}
	for _, id := range ids {
		only[id] = true
	}
	job := g.flush.build(&g.st.cache, g.st.parts, only)
	fctx, cancel := context.WithTimeout(g.flush.ctx, 10*time.Second)
	defer cancel()
	if err := g.flush.write(fctx, job); err != nil {
		// Not fatal: the next owner replays from the last checkpoint.
		g.log.Error("flush of revoked partitions", "partitions", ids, "err", err)
	} else {
		g.rec.finish(job)
		offsets := map[int32]kgo.EpochOffset{}
		for _, cp := range job.checkpoints {
			offsets[cp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: cp.Offset}
		}
		if len(offsets) > 0 {
			cl.CommitOffsetsSync(fctx, map[string]map[int32]kgo.EpochOffset{g.cfg.Topic: offsets}, nil)
		}
	}
	g.st.drop(ids)
	g.log.Info("partitions revoked", "partitions", ids, "owned", len(g.st.parts))
}

// onLost drops partitions without writing: another member may own them, and
// its writes win anyway (fencing); ours would only be fenced.
func (g *group) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	ids := lost[g.cfg.Topic]
	if len(ids) == 0 {
		return
	}
	g.fire.stop(ids...)
	g.sweep.stop(ids...)
	g.verify.Load().disown(ids...)
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	_ = g.rec.collect(true)
	g.st.drop(ids)
	g.log.Warn("partitions lost", "partitions", ids, "owned", len(g.st.parts))
}

// leaveOnStop closes the group client cl and, for a static member told to
// leave on shutdown, leaves the group: on every graceful stop, the one
// while starting too, or the partitions the group assigned it stay with
// it until the session timeout.
func leaveOnStop(cfg Config, log *slog.Logger, cl *kgo.Client) {
	if cfg.InstanceID != "" && cfg.LeaveOnShutdown {
		cl.CloseAllowingRebalance()
		leave(cfg, log)
	}
}

// leave removes this replica's static membership, so the group rebalances
// now instead of after the session timeout. Closing a client with an
// instance id does not leave (KIP-345); this asks the coordinator directly.
func leave(cfg Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(cfg.Kafka.Opts()...)
	if err != nil {
		log.Warn("leaving the group", "err", err)
		return
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(cfg.Group).InstanceIDs(cfg.InstanceID).Reason("shutting down"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		log.Warn("leaving the group; partitions move after the session timeout", "err", err)
		return
	}
	log.Info("left the group", "instance", cfg.InstanceID)
}

// ensureTopics creates the events topic, the dead-letter topic and, when
// the change feed is on (feedTopic), the change feed's topic with the
// events topic's partition count, which it returns. A change feed topic
// with another count is an error that waiting does not cure: its records
// go to their source record's partition. So is, when the changelog is on
// (changelogTopic), a changelog topic with another count or not compacted
// (ensureChangelog).
func ensureTopics(ctx context.Context, adm *kadm.Client, cfg Config, feedTopic, changelogTopic string, log *slog.Logger) (int32, error) {
	for {
		n, err1 := kafka.EnsureTopicRetention(ctx, adm, cfg.Topic, int32(cfg.Partitions), cfg.EventsRetention)
		_, err2 := kafka.EnsureTopic(ctx, adm, kafka.DLQTopic(cfg.Topic), int32(cfg.Partitions))
		var err3 error
		if ft := feedTopic; ft != "" && err1 == nil {
			var m int32
			if m, err3 = kafka.EnsureTopic(ctx, adm, ft, n); err3 == nil && m != n {
				return 0, fmt.Errorf("projector: the change feed's topic %s has %d partitions and the events topic %s has %d: they must be equal (recreate %s, or set CORREX_CHANGE_FEED=false)",
					ft, m, cfg.Topic, n, ft)
			}
		}
		var err4 error
		if changelogTopic != "" && err1 == nil {
			var refuse error
			if refuse, err4 = ensureChangelog(ctx, adm, cfg.Topic, changelogTopic, n); refuse != nil {
				return 0, refuse
			}
		}
		if err := errors.Join(err1, err2, err3, err4); err == nil {
			return n, nil
		} else {
			log.Warn("waiting for Kafka", "err", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
