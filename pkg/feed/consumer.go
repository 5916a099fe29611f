package feed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/wire"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// nextField is the checkpoint hash's field holding the next changes-topic
// offset to read; the other fields are session ids (which cannot start with
// '~') holding the last handled Position of the session, "partition:offset".
const nextField = "~next"

// saveScript writes a partition's checkpoint only forward: a member that
// lost the partition and still writes cannot move it back (KEYS[1] the
// partition's hash; ARGV next offset, then optionally session and position).
var saveScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], '` + nextField + `') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], '` + nextField + `', ARGV[1])
if ARGV[2] and ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
return 1`)

// Consumer reads the change feed with its own consumer group and hands each
// change to a handler, under the delivery contract of the package doc. Run
// it once at a time; NewConsumer holds no resources, Run creates and closes
// its Kafka client.
type Consumer struct {
	cfg     config
	topic   string
	running atomic.Bool

	mu    sync.Mutex
	parts map[int32]*partition // owned partitions, by changes-topic partition
	fatal error                // set by adjust (checkpoint ahead), returned by Run
	wake  context.CancelFunc   // ends the poll in progress when fatal is set
}

// partition is the state of an owned partition: the sessions whose last
// handled position is known (loaded from Redis when first seen).
type partition struct {
	key      string
	sessions map[string]Position // a zero Position with Offset -1: none handled
	pending  int64               // next offset not yet stored (dropped or filtered changes), or -1
}

// NewConsumer returns a consumer configured by opts; Redis and Group are
// required.
func NewConsumer(opts ...Option) (*Consumer, error) {
	cfg := defaults()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, topic: Topic(cfg.eventsTopic), parts: map[int32]*partition{}}, nil
}

// CheckpointKey returns the Redis key of a changes-topic partition's
// checkpoint.
func (c *Consumer) CheckpointKey(partition int32) string {
	return fmt.Sprintf("%s:feed:%s:%s:%d", c.cfg.prefix, c.cfg.group, c.topic, partition)
}

// Run joins the group and hands each change to handle until ctx ends (it
// then returns nil, having left the group) or handle returns an error (a
// *HandlerError). handle gets Run's context; it is called from one
// goroutine, one change at a time.
func (c *Consumer) Run(ctx context.Context, handle func(context.Context, Change) error) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	pollCtx, wake := context.WithCancel(ctx)
	defer wake()
	c.mu.Lock()
	c.parts, c.fatal, c.wake = map[int32]*partition{}, nil, wake
	c.mu.Unlock()

	// The group is joined as soon as the client exists, so adjust may run
	// before adm is set: it waits for clientSet.
	var adm *kadm.Client
	clientSet := make(chan struct{})
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.cfg.brokers...),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumerGroup(c.cfg.group),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsRevoked(c.forget),
		kgo.OnPartitionsLost(c.forget),
		kgo.AdjustFetchOffsetsFn(func(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			select {
			case <-clientSet:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return c.adjust(ctx, adm, offs)
		}),
	}
	cl, err := kgo.NewClient(append(opts, c.cfg.kafkaOpts...)...)
	if err != nil {
		return fmt.Errorf("feed: kafka client: %w", err)
	}
	adm = kadm.NewClient(cl)
	close(clientSet)
	defer cl.Close() // leaves the group; commits the marked offsets
	// Before Close: a poll that ended with ctx still blocks the rebalance
	// that leaving the group runs.
	defer cl.AllowRebalance()

	for {
		fetches := cl.PollFetches(pollCtx)
		if err := c.fatalErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			c.cfg.log.Warn("feed: fetching", "topic", topic, "partition", p, "err", err)
		})
		var stop error
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if stop == nil && len(fp.Records) > 0 {
				stop = c.handlePartition(ctx, cl, fp.Partition, fp.Records, handle)
			}
		})
		cl.AllowRebalance()
		if stop != nil {
			if ctx.Err() != nil {
				return nil
			}
			return stop
		}
	}
}

func (c *Consumer) fatalErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// handlePartition hands one fetch of one partition to the handler.
func (c *Consumer) handlePartition(ctx context.Context, cl *kgo.Client, id int32, recs []*kgo.Record, handle func(context.Context, Change) error) error {
	c.mu.Lock()
	p := c.parts[id]
	c.mu.Unlock()
	if p == nil { // revoked while the fetch was buffered
		return nil
	}
	if err := c.loadSessions(ctx, p, recs); err != nil {
		return err
	}
	for _, r := range recs {
		var ch Change
		if err := Decode(r.Value, &ch); err != nil {
			// Not a change: nothing a handler could do with it, and
			// stopping would stop the feed for good.
			c.cfg.log.Warn("feed: skipping a record that is not a change", "partition", id, "offset", r.Offset, "err", err)
			p.pending = r.Offset + 1
			continue
		}
		last, seen := p.sessions[ch.SessionID]
		if seen && last.Partition == ch.Position.Partition && last.Offset >= ch.Position.Offset {
			p.pending = r.Offset + 1 // written again after a projector crash, or read again
			continue
		}
		if c.cfg.filter != nil && !c.cfg.filter(&ch) {
			p.pending = r.Offset + 1
			continue
		}
		if err := handle(ctx, ch); err != nil {
			return &HandlerError{Change: ch, Err: err}
		}
		if err := c.save(ctx, p, id, r.Offset+1, ch.SessionID, ch.Position); err != nil {
			return err
		}
		p.sessions[ch.SessionID] = ch.Position
		p.pending = -1
		cl.MarkCommitRecords(r)
	}
	if p.pending >= 0 {
		if err := c.save(ctx, p, id, p.pending, "", Position{}); err != nil {
			return err
		}
		p.pending = -1
		cl.MarkCommitRecords(recs[len(recs)-1])
	}
	return nil
}

// loadSessions reads the last handled position of the batch's sessions not
// yet known, in one round trip.
func (c *Consumer) loadSessions(ctx context.Context, p *partition, recs []*kgo.Record) error {
	var ids []string
	want := map[string]bool{}
	for _, r := range recs {
		s := string(r.Key)
		if _, ok := p.sessions[s]; !ok && !want[s] && s != "" {
			want[s] = true
			ids = append(ids, s)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return c.retry(ctx, "read", p.key, func(ctx context.Context) error {
		vals, err := c.cfg.rdb.HMGet(ctx, p.key, ids...).Result()
		if err != nil {
			return err
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue // never handled: not noted, so a later batch reads it again
			}
			pos, err := wire.ParsePosition(s)
			if err != nil {
				return fmt.Errorf("session %q: %w", ids[i], err)
			}
			p.sessions[ids[i]] = pos
		}
		return nil
	})
}

// save writes the checkpoint of partition id: next, and the session's last
// handled position when session is not empty. It outlives Run's context (a
// change handled before a shutdown must not be handed out again), retrying
// while ctx lasts and once more, for at most 5 s, after it ends.
func (c *Consumer) save(ctx context.Context, p *partition, id int32, next int64, session string, pos Position) error {
	return c.retry(ctx, "write", p.key, func(ctx context.Context) error {
		ok, err := saveScript.Run(ctx, c.cfg.rdb, []string{p.key}, next, session, pos.String()).Int()
		if err == nil && ok == 0 {
			c.cfg.log.Warn("feed: the checkpoint is ahead of this member: another member owns the partition", "partition", id)
		}
		return err
	})
}

// retry runs op until it succeeds; after ctx ends, once more with 5 s.
func (c *Consumer) retry(ctx context.Context, op, key string, fn func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return &CheckpointError{Op: op, Key: key, Err: err}
		}
		c.cfg.log.Warn("feed: checkpoint", "op", op, "key", key, "attempt", attempt, "err", err)
		_ = backoff.Sleep(ctx, retryWait.Wait(attempt)) // ctx ended: the next attempt is the last
	}
}

// retryWait is the wait after a failed attempt: 100 ms doubled per
// attempt, at most 5 s.
var retryWait = backoff.Exponential{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// adjust starts every assigned partition at its checkpoint (not at the
// Kafka committed offset), or, with none, at the earliest offset or at the
// end (stored at once). It retries while the group session lasts.
func (c *Consumer) adjust(ctx context.Context, adm *kadm.Client, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := offs[c.topic]
	if len(parts) == 0 {
		return offs, nil
	}
	for attempt := 0; ; attempt++ {
		err := c.seek(ctx, adm, parts)
		if err == nil {
			return offs, nil
		}
		c.cfg.log.Warn("feed: reading checkpoints of assigned partitions", "attempt", attempt, "err", err)
		if err := backoff.Sleep(ctx, retryWait.Wait(attempt)); err != nil {
			return nil, err
		}
	}
}

func (c *Consumer) seek(ctx context.Context, adm *kadm.Client, parts map[int32]kgo.Offset) error {
	ends, err := adm.ListEndOffsets(ctx, c.topic)
	if err != nil {
		return err
	}
	if err := ends.Error(); err != nil {
		return err
	}
	pipe := c.cfg.rdb.Pipeline()
	cmds := map[int32]*redis.StringCmd{}
	for id := range parts {
		cmds[id] = pipe.HGet(ctx, c.CheckpointKey(id), nextField)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	newParts := map[int32]*partition{}
	var fatal error
	for id := range parts {
		key := c.CheckpointKey(id)
		end, ok := ends.Lookup(c.topic, id)
		if !ok {
			return fmt.Errorf("no end offset for partition %d", id)
		}
		next, err := cmds[id].Int64()
		switch {
		case errors.Is(err, redis.Nil) && c.cfg.start == Latest:
			next = end.Offset
			if _, err := saveScript.Run(ctx, c.cfg.rdb, []string{key}, next, "", "").Result(); err != nil {
				return err
			}
			parts[id] = kgo.NewOffset().At(next).WithEpoch(-1)
		case errors.Is(err, redis.Nil):
			parts[id] = kgo.NewOffset().AtStart()
		case err != nil:
			return &CheckpointError{Op: "read", Key: key, Partition: id, Err: err}
		case next > end.Offset:
			fatal = errors.Join(fatal, &CheckpointError{Op: "seek", Key: key, Partition: id,
				Err: fmt.Errorf("%w: next offset %d, end %d", ErrCheckpointAhead, next, end.Offset)})
			parts[id] = kgo.NewOffset().At(next).WithEpoch(-1)
		default:
			parts[id] = kgo.NewOffset().At(next).WithEpoch(-1)
		}
		newParts[id] = &partition{key: key, sessions: map[string]Position{}, pending: -1}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, p := range newParts {
		c.parts[id] = p
	}
	if fatal != nil && c.fatal == nil {
		c.fatal = fatal
		c.wake()
	}
	c.cfg.log.Info("feed: partitions assigned", "topic", c.topic, "partitions", len(newParts))
	return nil
}

// forget drops the state of partitions given up. With BlockRebalanceOnPoll
// it runs between polls, when no change is being handled.
func (c *Consumer) forget(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range gone[c.topic] {
		delete(c.parts, id)
	}
}
