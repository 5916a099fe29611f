package projector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

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
// Every part of a record is a function of the source record and of what
// the fold did with it (the outcome, the states, the version after it, and
// the session's labels, parent and correlation id, which never change after
// the creation), so a record written again after a crash is byte-identical.
// Baggage is not carried: it is not trace context, and its encoding does
// not keep an order. The projector's Kafka client must not inject trace
// context into produced records (no kotel producer hooks), or the headers
// would differ.
//
// How a record is written at least once through a crash: the fold notes
// what it did (add), per partition, until a batch takes the notes (take).
// flusher.write stores the batch's outcomes in the topic's outbox in Redis
// before the snapshots (persist: a few bytes per record, see appendOutcome),
// then, after the snapshots, encodes and produces the records (produce);
// the checkpoint waits for the produce. A crash before the snapshots are
// stored replays the events, and the fold notes the same changes again. A
// crash after it makes the replay skip the events the stored snapshots
// reflect, so the fold cannot say what they did: on assignment the
// partition's outbox outcomes at or after its checkpoint are loaded
// (load), and a skipped record with an outcome there is noted again from it
// (skipped), in its place in the fold order.
//
// The fold goroutine owns pending and outbox (add, skipped, take, drop,
// load, under Projector.mu); persist and produce run in whoever writes the
// batch, on the job only; err is set from the Kafka client's produce
// callback. A nil *changeFeed is the feed turned off
// (CORREX_CHANGE_FEED=false): every method does nothing.
type changeFeed struct {
	topic   string
	log     *slog.Logger
	crash   *crashPoints
	pending map[int32][]change
	// outbox holds, per partition, the outcomes loaded on assignment, by
	// source offset; an entry is used once.
	outbox map[int32]map[int64]outcome
	// err is the first produce error of a change record: the next write
	// fails before its checkpoints, so a restart produces the record again.
	err atomic.Pointer[error]
}

// outcome is what the fold did with one record, as the outbox keeps it.
type outcome struct {
	rejected bool
	terminal bool
	reason   fsm.Reason
	from, to fsm.State
	version  uint64
}

// change is one record of the feed before it is encoded (encoding waits
// for the flush goroutine): the source record's offset, what the fold did,
// the event's id, type and time, and the session's ids and labels (the
// labels slice is the session's, never changed after the creation).
type change struct {
	source                       int64
	out                          outcome
	id                           fsm.EventID
	typ                          string
	at                           time.Time
	session, parent, correlation string
	labels                       []fsm.Label
	headers                      []kgo.RecordHeader
}

// feedChange returns the change as a feed.Change of a record on partition.
func (ch *change) feedChange(partition int32) feed.Change {
	c := feed.Change{
		SessionID:       ch.session,
		Version:         ch.out.version,
		Position:        feed.Position{Partition: partition, Offset: ch.source},
		EventID:         ch.id.String(),
		Type:            ch.typ,
		OccurredAt:      ch.at,
		Outcome:         feed.Applied,
		To:              ch.out.to.String(),
		Terminal:        ch.out.terminal,
		ParentSessionID: ch.parent,
		CorrelationID:   ch.correlation,
	}
	if ch.out.rejected {
		c.Outcome, c.Reason = feed.Rejected, ch.out.reason.String()
	}
	if ch.out.from != fsm.StateNone {
		c.From = ch.out.from.String()
	}
	if len(ch.labels) > 0 {
		c.Labels = make(map[string]string, len(ch.labels))
		for _, l := range ch.labels {
			c.Labels[l.Key] = l.Value
		}
	}
	return c
}

// feedBatch is the part of a flush that belongs to the feed: per
// partition, its changes in fold order, and the outbox batches below
// which the partition's stored checkpoint has passed.
type feedBatch struct {
	partition int32
	below     int64
	changes   []change
}

func newChangeFeed(cfg Config, log *slog.Logger, crash *crashPoints) *changeFeed {
	if !cfg.ChangeFeed {
		return nil
	}
	return &changeFeed{topic: feed.Topic(cfg.Topic), log: log, crash: crash,
		pending: map[int32][]change{}, outbox: map[int32]map[int64]outcome{}}
}

// traceContext is the propagator of the feed's headers: W3C traceparent and
// tracestate (bounded by correxotel.InjectRecord), nothing else.
var traceContext = propagation.TraceContext{}

// add notes the change of e, folded from r into s with outcome o, if the
// feed has one for it.
func (c *changeFeed) add(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, o fsm.Outcome) {
	if c == nil {
		return
	}
	var out outcome
	switch {
	case o.Result == fsm.Rejected:
		out.rejected, out.reason = true, o.Reason
	case o.Result == fsm.Applied && (o.Transitioned() || e.Type == fsm.EventCustom):
	default:
		return
	}
	out.from, out.to, out.terminal, out.version = o.From, o.To, s.State.Terminal(), s.Version
	c.note(r, e, s, out)
}

// skipped notes again the change of a record the fold skipped (its session
// is already past it) if the outbox has what the fold did with it.
func (c *changeFeed) skipped(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot) {
	if c == nil || len(c.outbox[r.Partition]) == 0 {
		return
	}
	out, ok := c.outbox[r.Partition][r.Offset]
	if !ok {
		return
	}
	delete(c.outbox[r.Partition], r.Offset)
	c.note(r, e, s, out)
}

func (c *changeFeed) note(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, out outcome) {
	c.pending[r.Partition] = append(c.pending[r.Partition], change{source: r.Offset, out: out, id: e.ID, typ: e.TypeName(),
		at: e.OccurredAt, session: s.ID, parent: s.ParentSessionID, correlation: s.CorrelationID, labels: s.Labels,
		headers: traceHeaders(r)})
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

// take moves the changes noted for the given partitions (all when only is
// nil) into job, with each partition's stored checkpoint (the outbox drops
// the batches below it).
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
		b := feedBatch{partition: id, changes: c.pending[id]}
		delete(c.pending, id)
		if part := parts[id]; part != nil && part.ckptKnown {
			b.below = part.lastCkpt
		}
		job.changes = append(job.changes, b)
	}
}

// drop forgets what was noted and loaded for a partition given up
// (revoked, lost) or rebuilt: whoever folds it next notes it again.
func (c *changeFeed) drop(id int32) {
	if c != nil {
		delete(c.pending, id)
		delete(c.outbox, id)
	}
}

// persist stores the batch's outcomes in the outbox, retrying until ctx
// ends. It runs before the batch's snapshots are stored.
func (c *changeFeed) persist(ctx context.Context, store *snapshot.Store, topic string, job *flushJob) error {
	if c == nil || len(job.changes) == 0 {
		return nil
	}
	batches := make([]snapshot.OutboxBatch, 0, len(job.changes))
	for _, fb := range job.changes {
		var data []byte
		for _, ch := range fb.changes {
			data = appendOutcome(data, ch.source, ch.out)
		}
		batches = append(batches, snapshot.OutboxBatch{Partition: fb.partition, Last: fb.changes[len(fb.changes)-1].source,
			Data: data, Below: fb.below})
	}
	for attempt := 0; ; attempt++ {
		err := store.PutOutbox(ctx, topic, batches)
		if err == nil {
			return nil
		}
		c.log.Warn("writing the change feed's outbox", "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

// encode builds the batch's records in a goroutine of its own, so that the
// encoding overlaps the snapshots' write; the returned function waits for
// them. Called by whoever writes the batch, before the snapshots.
func (c *changeFeed) encode(job *flushJob) (wait func() []*kgo.Record) {
	if c == nil || len(job.changes) == 0 {
		return func() []*kgo.Record { return nil }
	}
	done := make(chan []*kgo.Record, 1)
	go func() {
		n := 0
		for _, fb := range job.changes {
			n += len(fb.changes)
		}
		recs := make([]kgo.Record, n)
		out := make([]*kgo.Record, n)
		var buf []byte // values are cut from shared chunks: far fewer allocations
		i := 0
		for _, fb := range job.changes {
			for j := range fb.changes {
				ch := &fb.changes[j]
				if cap(buf)-len(buf) < 1024 {
					buf = make([]byte, 0, 256<<10)
				}
				start := len(buf)
				buf = appendChangeJSON(buf, ch, fb.partition)
				recs[i] = kgo.Record{Topic: c.topic, Partition: fb.partition, Key: []byte(ch.session),
					Value: buf[start:len(buf):len(buf)], Headers: ch.headers}
				out[i] = &recs[i]
				i++
			}
		}
		done <- out
	}()
	return func() []*kgo.Record { return <-done }
}

// produce hands the batch's records (from encode), in fold order per
// partition, to the Kafka client. It does not wait: the flush before the
// checkpoints does, and checks c.err (failed).
func (c *changeFeed) produce(ctx context.Context, cl *kgo.Client, records []*kgo.Record) {
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

// outboxRead is the outbox of newly assigned partitions, read by read and
// installed by load.
type outboxRead map[int32]map[int64]outcome

// read returns the outbox outcomes of the given partitions at or after
// each one's start offset (its checkpoint). Called on assignment, before
// the partitions fold anything.
func (c *changeFeed) read(ctx context.Context, store *snapshot.Store, topic string, starts map[int32]int64) (outboxRead, error) {
	if c == nil || len(starts) == 0 {
		return nil, nil
	}
	batches, err := store.Outbox(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := outboxRead{}
	for _, b := range batches {
		start, ok := starts[b.Partition]
		if !ok || b.Last < start {
			continue
		}
		m := out[b.Partition]
		if m == nil {
			m = map[int64]outcome{}
			out[b.Partition] = m
		}
		if err := decodeOutcomes(b.Data, func(source int64, o outcome) {
			if source >= start {
				m[source] = o
			}
		}); err != nil { // written by this code only; a torn value would be Redis's fault
			c.log.Error("skipping an undecodable outbox batch of the change feed", "partition", b.Partition, "last", b.Last, "err", err)
		}
	}
	return out, nil
}

// load installs what read returned.
func (c *changeFeed) load(ob outboxRead) {
	if c == nil {
		return
	}
	for id, m := range ob {
		c.outbox[id] = m
	}
}

// appendOutcome encodes one outbox entry: the source offset (uvarint), a
// flags byte (1 rejected, 2 terminal), the reason, from and to states (a
// byte each) and the version (uvarint).
func appendOutcome(dst []byte, source int64, o outcome) []byte {
	dst = binary.AppendUvarint(dst, uint64(source))
	var flags byte
	if o.rejected {
		flags |= 1
	}
	if o.terminal {
		flags |= 2
	}
	dst = append(dst, flags, byte(o.reason), byte(o.from), byte(o.to))
	return binary.AppendUvarint(dst, o.version)
}

var errOutbox = errors.New("truncated or malformed outbox batch")

// decodeOutcomes reads what appendOutcome wrote, calling fn per entry.
func decodeOutcomes(data []byte, fn func(int64, outcome)) error {
	for len(data) > 0 {
		src, n := binary.Uvarint(data)
		if n <= 0 || src > 1<<62 || len(data) < n+4 {
			return errOutbox
		}
		flags, reason, from, to := data[n], fsm.Reason(data[n+1]), fsm.State(data[n+2]), fsm.State(data[n+3])
		data = data[n+4:]
		version, m := binary.Uvarint(data)
		if m <= 0 || flags > 3 || !to.Valid() || (from != fsm.StateNone && !from.Valid()) || (flags&1 != 0) != reason.Rejection() {
			return errOutbox
		}
		data = data[m:]
		fn(int64(src), outcome{rejected: flags&1 != 0, terminal: flags&2 != 0, reason: reason, from: from, to: to, version: version})
	}
	return nil
}
