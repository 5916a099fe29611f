package sessionlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cursor reads one partition forward, call after call, with one client: a
// reader that folds a partition a little at a time (the projector's
// background verifier, which follows the partition's checkpoint session by
// session) connects once for the whole pass, not once for each read. The
// records a fetch brought past what a call asked for are kept for the next
// call: at most one fetch (FetchBytes) beyond it.
//
// A Cursor is not safe for concurrent use. Close it when done.
type Cursor struct {
	topic  string
	p      int32
	cl     *kafka.Client
	decode func(*kgo.Record, *fsm.Event) error
	next   int64         // the next offset to hand out
	hw     int64         // the high watermark as last read: the log reaches at least this far
	ahead  []*kgo.Record // fetched past the last call's end, in order
	err    error         // what broke the cursor: records may have been lost with it
	e      fsm.Event
}

// Cursor returns a cursor over partition p from offset from.
func (r *Reader) Cursor(p int32, from int64) (*Cursor, error) {
	opts := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.Topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxBytes(FetchBytes), kgo.FetchMaxPartitionBytes(FetchBytes), kgo.MaxConcurrentFetches(1)}, r.Opts...)
	cl, err := kafka.NewClient(r.Kafka, opts...)
	if err != nil {
		return nil, err
	}
	decode := r.Decode
	if decode == nil {
		decode = kafka.DecodeEvent
	}
	return &Cursor{topic: r.Topic, p: p, cl: cl, decode: decode, next: from}, nil
}

// Close lets the cursor's client go.
func (c *Cursor) Close() { c.cl.Close() }

// Next is the offset the next ReadTo starts at.
func (c *Cursor) Next() int64 { return c.next }

// HighWatermark reads the partition's high watermark (the offset the next
// record will take) with the cursor's client.
func (c *Cursor) HighWatermark(ctx context.Context) (int64, error) {
	hw, err := highWatermark(ctx, c.cl.Client, c.topic, c.p)
	if err != nil {
		return 0, c.cl.Explain(err)
	}
	c.hw = max(c.hw, hw)
	return hw, nil
}

// ReadTo calls fn with every record from the cursor's position to offset
// end (included), in order, decoded as Reader.Read decodes them, and moves
// the cursor past end. fn returns false to stop early: the cursor then
// stands after the record fn stopped at. A range that ends at or past the
// partition's high watermark is ErrBeyondLog, read as far as the log goes
// (the cursor stands at the log's end): ReadTo never waits for records
// that are not there. The high watermark is read only when end is past
// the one last read.
//
// Any other error breaks the cursor (a fetch stopped by ctx may have
// taken records that were not handed out): every later call returns it.
func (c *Cursor) ReadTo(ctx context.Context, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	if c.err != nil {
		return c.err
	}
	if c.next > end {
		return nil
	}
	err := c.readTo(ctx, end, fn)
	if err != nil && !errors.Is(err, ErrBeyondLog) {
		c.err = fmt.Errorf("the cursor over partition %d broke at offset %d: %w", c.p, c.next, err)
		return c.err
	}
	return err
}

func (c *Cursor) readTo(ctx context.Context, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	var beyond error
	if end >= c.hw {
		hw, err := c.HighWatermark(ctx)
		if err != nil {
			return err
		}
		if end >= hw {
			beyond = fmt.Errorf("%w: offset %d of partition %d, and the log ends at %d", ErrBeyondLog, end, c.p, hw-1)
			if end = hw - 1; c.next > end {
				return beyond
			}
		}
	}
	// hand gives rec to fn; done says that the read reached end or fn
	// stopped it.
	hand := func(rec *kgo.Record) (done bool) {
		if rec.Offset < c.next {
			return false // before the cursor (fetched again after a retry)
		}
		c.next = rec.Offset + 1
		if c.decode(rec, &c.e) != nil || string(rec.Key) != c.e.SessionID {
			return rec.Offset >= end // a record the projector set aside
		}
		if !fn(&c.e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset}) {
			return true
		}
		return rec.Offset >= end
	}
	for len(c.ahead) > 0 {
		rec := c.ahead[0]
		if rec.Offset > end {
			return beyond
		}
		c.ahead[0] = nil
		c.ahead = c.ahead[1:]
		if hand(rec) {
			return beyond
		}
	}
	c.ahead = nil
	for {
		fetches := c.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading the log stopped before offset %d: %w", end, c.cl.Explain(err))
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return c.cl.Explain(ferr)
		}
		recs := fetches.Records()
		for i, rec := range recs {
			if rec.Offset > end {
				// Kept for the next call: records are handed out once, in order.
				c.ahead = recs[i:]
				return beyond
			}
			if hand(rec) {
				c.ahead = recs[i+1:]
				return beyond
			}
		}
	}
}
