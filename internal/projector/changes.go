package projector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"

	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// changeFeed builds and produces the change feed (DESIGN §10.4): one record
// per applied transition, per rejection and per applied custom event, on
// the topic feed.Topic(events topic), keyed by session id, on the source
// record's partition, its value feed.Change.AppendJSON and its headers the
// source record's trace context.
//
// Every part of a record is a function of the source record and the
// session's state before it, which the fold makes deterministic, so a
// record written again after a crash is byte-identical. Baggage is not
// carried: it is not trace context, and its encoding does not keep an
// order. The projector's Kafka client must not inject trace context into
// produced records (no kotel producer hooks), or the headers would differ.
//
// How a record is written at least once through a crash: records are built
// during the fold (add) and kept per partition until a batch takes them
// (take); flusher.write stores the batch's records in the topic's outbox in
// Redis before the snapshots (persist), produces them after the snapshots
// (produce), and the checkpoint waits for the produce. A crash after the
// snapshots were stored makes a replay skip the events they reflect, so it
// cannot build those records again: the outbox has them, and when a
// partition is assigned its outbox records at or after the checkpoint are
// produced again (replay) before anything newer.
//
// The fold goroutine owns pending (add, take, drop, under Projector.mu);
// persist and produce run in whoever writes the batch; err is set from the
// Kafka client's produce callback. A nil *changeFeed is the feed turned
// off (CORREX_CHANGE_FEED=false): every method does nothing.
type changeFeed struct {
	topic   string
	log     *slog.Logger
	crash   *crashPoints
	pending map[int32][]change
	// err is the first produce error of a change record: the next write
	// fails before its checkpoints, so a restart produces the record again.
	err atomic.Pointer[error]
}

// change is a built record and the offset of its source record.
type change struct {
	source int64
	rec    *kgo.Record
}

func newChangeFeed(cfg Config, log *slog.Logger, crash *crashPoints) *changeFeed {
	if !cfg.ChangeFeed {
		return nil
	}
	return &changeFeed{topic: feed.Topic(cfg.Topic), log: log, crash: crash, pending: map[int32][]change{}}
}

// traceContext is the propagator of the feed's headers: W3C traceparent and
// tracestate (bounded by correxotel.InjectRecord), nothing else.
var traceContext = propagation.TraceContext{}

// add builds the change record of e, folded from r into s with outcome o,
// if the feed has one for it.
func (c *changeFeed) add(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, o fsm.Outcome) {
	if c == nil {
		return
	}
	ch := feed.Change{
		SessionID:       s.ID,
		Version:         s.Version,
		Position:        feed.Position{Partition: r.Partition, Offset: r.Offset},
		EventID:         e.ID.String(),
		Type:            e.TypeName(),
		OccurredAt:      e.OccurredAt,
		To:              o.To.String(),
		Terminal:        s.State.Terminal(),
		ParentSessionID: s.ParentSessionID,
		CorrelationID:   s.CorrelationID,
	}
	switch {
	case o.Result == fsm.Rejected:
		ch.Outcome, ch.Reason = feed.Rejected, o.Reason.String()
	case o.Result == fsm.Applied && (o.Transitioned() || e.Type == fsm.EventCustom):
		ch.Outcome = feed.Applied
	default:
		return
	}
	if o.From != fsm.StateNone {
		ch.From = o.From.String()
	}
	if len(s.Labels) > 0 {
		ch.Labels = make(map[string]string, len(s.Labels))
		for _, l := range s.Labels {
			ch.Labels[l.Key] = l.Value
		}
	}
	rec := &kgo.Record{Topic: c.topic, Partition: r.Partition, Key: []byte(s.ID), Value: ch.AppendJSON(nil),
		Headers: traceHeaders(r)}
	c.pending[r.Partition] = append(c.pending[r.Partition], change{source: r.Offset, rec: rec})
}

// traceHeaders returns the trace context of src as record headers, or nil.
func traceHeaders(src *kgo.Record) []kgo.RecordHeader {
	if len(src.Headers) == 0 {
		return nil
	}
	ctx := correxotel.ExtractRecord(context.Background(), traceContext, src)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	var rec kgo.Record
	correxotel.InjectRecord(ctx, traceContext, &rec)
	return rec.Headers
}

// take moves the pending records of the given partitions (all when only is
// nil) into job: the records in fold order per partition, and per
// partition an outbox batch, which drops the batches the partition's stored
// checkpoint has passed.
func (c *changeFeed) take(job *flushJob, parts map[int32]*partState, only map[int32]bool) {
	if c == nil {
		return
	}
	ids := make([]int32, 0, len(c.pending))
	for id := range c.pending {
		if only == nil || only[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		changes := c.pending[id]
		delete(c.pending, id)
		b := snapshot.OutboxBatch{Partition: id, Last: changes[len(changes)-1].source}
		if part := parts[id]; part != nil && part.ckptKnown {
			b.Below = part.lastCkpt
		}
		for _, ch := range changes {
			b.Data = appendChange(b.Data, ch)
			job.records = append(job.records, ch.rec)
		}
		job.outbox = append(job.outbox, b)
	}
}

// drop forgets the pending records of a partition given up (revoked, lost)
// or rebuilt: whoever folds it next builds them again.
func (c *changeFeed) drop(id int32) {
	if c != nil {
		delete(c.pending, id)
	}
}

// persist stores the batch's records in the outbox, retrying until ctx
// ends. It runs before the batch's snapshots are stored.
func (c *changeFeed) persist(ctx context.Context, store *snapshot.Store, topic string, job *flushJob) error {
	if c == nil || len(job.outbox) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		err := store.PutOutbox(ctx, topic, job.outbox)
		if err == nil {
			return nil
		}
		c.log.Warn("writing the change feed's outbox", "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// produce hands the batch's records to the Kafka client. It does not wait:
// the flush before the checkpoints does, and checks c.err.
func (c *changeFeed) produce(ctx context.Context, cl *kgo.Client, records []*kgo.Record) {
	if c == nil {
		return
	}
	for _, rec := range records {
		cl.Produce(ctx, rec, c.produced)
	}
}

func (c *changeFeed) produced(_ *kgo.Record, err error) {
	if err != nil && !c.crash.crashed.Load() {
		c.err.CompareAndSwap(nil, &err)
	}
}

// failed returns the first produce error, or nil.
func (c *changeFeed) failed() error {
	if c == nil {
		return nil
	}
	if errp := c.err.Load(); errp != nil {
		return fmt.Errorf("projector: change feed produce: %w", *errp)
	}
	return nil
}

// replay produces again the outbox records of the given partitions at or
// after each one's start offset, in order, before the partitions fold
// anything: they may be the records of a batch whose snapshots were stored
// just before a crash, which the fold will skip. Called on assignment, with
// the client set.
func (c *changeFeed) replay(ctx context.Context, store *snapshot.Store, topic string, cl *kgo.Client, starts map[int32]int64) error {
	if c == nil || len(starts) == 0 {
		return nil
	}
	batches, err := store.Outbox(ctx, topic)
	if err != nil {
		return err
	}
	n := 0
	for _, b := range batches {
		start, ok := starts[b.Partition]
		if !ok || b.Last < start {
			continue
		}
		changes, err := decodeChanges(b.Data)
		if err != nil { // written by this code only; a torn value would be Redis's fault
			c.log.Error("skipping an undecodable outbox batch of the change feed", "partition", b.Partition, "last", b.Last, "err", err)
			continue
		}
		for _, ch := range changes {
			if ch.source >= start {
				ch.rec.Topic, ch.rec.Partition = c.topic, b.Partition
				cl.Produce(ctx, ch.rec, c.produced)
				n++
			}
		}
	}
	if n > 0 {
		c.log.Info("produced the change feed's outbox again", "records", n)
	}
	return nil
}

// appendChange encodes a pending record for the outbox: the source offset,
// the key, the value and the headers, each length-prefixed (uvarints).
func appendChange(dst []byte, ch change) []byte {
	dst = binary.AppendUvarint(dst, uint64(ch.source))
	dst = appendBytes(dst, ch.rec.Key)
	dst = appendBytes(dst, ch.rec.Value)
	dst = binary.AppendUvarint(dst, uint64(len(ch.rec.Headers)))
	for _, h := range ch.rec.Headers {
		dst = appendBytes(dst, []byte(h.Key))
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

func appendBytes(dst, b []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

var errOutbox = errors.New("truncated or malformed outbox batch")

// decodeChanges reads what appendChange wrote.
func decodeChanges(data []byte) ([]change, error) {
	var out []change
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(data)
		if n <= 0 {
			return 0, false
		}
		data = data[n:]
		return v, true
	}
	bytes := func() ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(data)) {
			return nil, false
		}
		b := data[:n:n]
		data = data[n:]
		return b, true
	}
	for len(data) > 0 {
		src, ok1 := uv()
		key, ok2 := bytes()
		value, ok3 := bytes()
		nh, ok4 := uv()
		if !ok1 || !ok2 || !ok3 || !ok4 || nh > uint64(len(data)) || src > 1<<62 {
			return nil, errOutbox
		}
		rec := &kgo.Record{Key: key, Value: value}
		for range nh {
			k, ok1 := bytes()
			v, ok2 := bytes()
			if !ok1 || !ok2 {
				return nil, errOutbox
			}
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(k), Value: v})
		}
		out = append(out, change{source: int64(src), rec: rec})
	}
	return out, nil
}
