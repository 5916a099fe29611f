package projector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// derived builds and produces what the fold derives beyond snapshots: the
// change feed and the derived events of replacement linking (reactions.go);
// docs/exactly-once.md, "The change feed and derived events".
//
// The change feed has one record per applied transition, per rejection and
// per applied custom event, on the topic feed.Topic(events topic), keyed by
// session id, on the source record's partition, its value
// feed.Change.AppendJSON (written by change.appendJSON) and its headers the
// source record's trace context. A derived event is an event record on the
// events topic, keyed by the session it is for, as ingest writes one.
//
// Every byte of both is a function of the source record and of what the
// fold did with it (the outcome, the states, the version after it, and the
// session's labels, parent and correlation id, which never change after the
// creation), so a record written again after a crash is byte-identical, and
// a derived event written again is a duplicate of the first by its event
// id. Baggage is not carried: it is not trace context, and its encoding
// does not keep an order. The projector's Kafka client must not inject
// trace context into produced records (no kotel producer hooks), or the
// headers would differ.
//
// How they are written at least once through a crash: the fold notes what
// it did (add), per partition, until a batch takes the notes (take).
// flusher.write stores the batch's outcomes in the topic's outbox in Redis
// before the snapshots (persist: a few bytes per record, see
// appendOutcome), then, after the snapshots, encodes and produces the
// records (encode, produce); the checkpoint waits for the produce. A crash
// before the snapshots are stored replays the events, and the fold notes
// the same things again. A crash after it makes the replay skip the events
// the stored snapshots reflect, so the fold cannot say what they did: on
// assignment the partition's outbox outcomes at or after its checkpoint are
// loaded (read, load), and a skipped record with an outcome there is noted
// again from it (skipped), in its place in the fold order.
//
// The fold goroutine owns pending and outbox (add, skipped, take, drop,
// load, under state.mu); persist, encode and produce run in whoever
// writes the batch, on the job only; err is set from the Kafka client's
// produce callback. With the change feed off (CORREX_CHANGE_FEED=false)
// feedTopic is empty and only derived events are noted.
type derived struct {
	feedTopic   string // "" when the change feed is off
	eventsTopic string
	log         *slog.Logger
	crash       *crashPoints
	pending     map[int32][]change
	// sizes holds each partition's last batch length, the capacity its
	// next pending slice starts with (bounded by maxSizeHint), so that a
	// large batch is gathered without growing its slice step by step.
	sizes map[int32]int
	// outbox holds, per partition, the outcomes loaded on assignment, by
	// source offset; an entry is used once.
	outbox map[int32]map[int64]outcome
	// err is the first produce error: the next write fails before its
	// checkpoints, so a restart produces the record again.
	err atomic.Pointer[error]
	// pageRead, when set by tests (before Run), is called with the number
	// of children whose snapshots one read of a cascade asks for.
	pageRead func(children int)
}

// maxSizeHint bounds the capacity a partition's pending changes start with.
const maxSizeHint = 1 << 16

// outcome is what the fold did with one record, as the outbox keeps it.
type outcome struct {
	rejected bool
	orphan   bool // no session: only a derived event can come of it
	feed     bool // the change feed has a record for it
	terminal bool
	reason   fsm.Reason
	from, to fsm.State
	version  uint64
	// digest is the session's digest after the record, kept for an applied
	// SessionReplaced (its ReplacementLinked carries it), and goal the
	// session's goal, which the ReplacementLinked carries too.
	digest    [32]byte
	hasDigest bool
	goal      string
	// refusal is, for a SessionReplaced the predecessor refused, the
	// first condition that failed (fsm.ReplacementRefusal): the reason of
	// the successor's ReplacementRefused.
	refusal string
	// failure, for a transition to FAILED, is the failure's category and
	// code, which its change record carries.
	failure     bool
	category    fsm.FailureCategory
	failureCode string
}

// change is one noted record before it is encoded (encoding waits for the
// flush goroutine): the source record's offset, what the fold did, the
// event's id, type and time, the session's ids and labels (the labels
// slice is the session's, never changed after the creation), and the
// derived event, if any.
type change struct {
	source                       int64
	out                          outcome
	id                           fsm.EventID
	typ                          string
	at                           time.Time
	session, parent, correlation string
	labels                       []fsm.Label
	headers                      []kgo.RecordHeader
	feed                         bool      // a change feed record is produced
	react                        *reaction // the derived event, if any (rare: kept out of line)
	fam                          *family   // what it means for parents and children, if anything
}

// feedChange returns the change as a feed.Change of a record on partition,
// without its labels: appendJSON gives them as the session keeps them.
func (ch *change) feedChange(partition int32) feed.Change {
	var id [36]byte
	c := feed.Change{
		SessionID:       ch.session,
		Version:         ch.out.version,
		Position:        feed.Position{Partition: partition, Offset: ch.source},
		EventID:         string(ch.id.AppendText(id[:0])), // one allocation, not String's two
		Type:            ch.typ,
		OccurredAt:      ch.at,
		Outcome:         feed.Applied,
		To:              ch.out.to.String(),
		Terminal:        ch.out.terminal,
		ParentSessionID: ch.parent,
		CorrelationID:   ch.correlation,
	}
	if ch.out.failure {
		c.FailureCategory, c.FailureCode = ch.out.category.String(), ch.out.failureCode
	}
	if ch.out.rejected {
		c.Outcome, c.Reason = feed.Rejected, ch.out.reason.String()
	}
	if ch.out.from != fsm.StateNone {
		c.From = ch.out.from.String()
	}
	return c
}

// appendJSON appends the change feed's record value of ch on partition:
// feed.Change.AppendJSON of the change with the session's labels, written
// from the session's sorted label list rather than a map.
func (ch *change) appendJSON(dst []byte, partition int32) []byte {
	c := ch.feedChange(partition)
	return c.AppendJSONWithLabels(dst, len(ch.labels), func(i int) (string, string) { return ch.labels[i].Key, ch.labels[i].Value })
}

// feedBatch is the part of a flush that belongs to the derived records:
// per partition, its changes in fold order, and the outbox batches below
// which the partition's stored checkpoint has passed.
type feedBatch struct {
	partition int32
	below     int64
	changes   []change
}

func newDerived(cfg Config, log *slog.Logger, crash *crashPoints) *derived {
	d := &derived{eventsTopic: cfg.Topic, log: log, crash: crash,
		pending: map[int32][]change{}, sizes: map[int32]int{}, outbox: map[int32]map[int64]outcome{}}
	if cfg.ChangeFeed {
		d.feedTopic = feed.Topic(cfg.Topic)
	}
	return d
}

// traceContext is the propagator of the feed's headers: W3C traceparent and
// tracestate (bounded by correxotel.InjectRecord), nothing else.
var traceContext = propagation.TraceContext{}

// add notes what the fold did with e, folded from r into s with outcome
// o, if the change feed has a record for it or an event derives from it.
func (d *derived) add(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, o fsm.Outcome) {
	var out outcome
	switch o.Result {
	case fsm.Rejected:
		out.rejected, out.reason, out.feed, out.refusal = true, o.Reason, true, o.Refusal
	case fsm.Applied:
		out.feed = o.Transitioned() || e.Type == fsm.EventCustom
		if e.Type == fsm.SessionReplaced {
			out.digest, out.hasDigest, out.goal = s.Digest, true, s.Goal
		}
		if o.Transitioned() && o.To == fsm.StateFailed {
			out.failure, out.category, out.failureCode = true, s.Failure.Category, s.Failure.Code
		}
	case fsm.Orphan:
		out.orphan = true
	default:
		return
	}
	out.from, out.to, out.terminal, out.version = o.From, o.To, s.State.Terminal(), s.Version
	d.note(r, e, s, out)
}

// skipped notes again what the fold did with a record it skipped (its
// session is already past it) if the outbox has it.
func (d *derived) skipped(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot) {
	if len(d.outbox[r.Partition]) == 0 {
		return
	}
	out, ok := d.outbox[r.Partition][r.Offset]
	if !ok {
		return
	}
	delete(d.outbox[r.Partition], r.Offset)
	d.note(r, e, s, out)
}

func (d *derived) note(r *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, out outcome) {
	react, fam := reactionOf(e, out), familyOf(e, s, out)
	feedRec := out.feed && d.feedTopic != ""
	if !feedRec && react == nil && fam == nil {
		return
	}
	pend := d.pending[r.Partition]
	if pend == nil {
		pend = make([]change, 0, max(16, d.sizes[r.Partition]))
	}
	d.pending[r.Partition] = append(pend, change{source: r.Offset, out: out, id: e.ID, typ: e.TypeName(),
		at: e.OccurredAt, session: e.SessionID, parent: s.ParentSessionID, correlation: s.CorrelationID, labels: s.Labels,
		headers: traceHeaders(r), feed: feedRec, react: react, fam: fam})
}

// traceHeaders returns the trace context of src as record headers, or nil.
// A record whose trace context is one traceparent in the form ingest
// writes, and no tracestate, gets a copy of it: extracting and injecting
// it again would write the same bytes (canonicalTraceparent), and this is
// done for most folded records. Any other goes through the propagator,
// which validates and normalizes.
func traceHeaders(src *kgo.Record) []kgo.RecordHeader {
	if len(src.Headers) == 0 {
		return nil
	}
	if tp, ok := canonicalTraceparent(src.Headers); ok {
		return []kgo.RecordHeader{{Key: "traceparent", Value: bytes.Clone(tp)}}
	}
	return propagatedTraceHeaders(src)
}

// canonicalTraceparent returns the value of the only traceparent among
// headers when it is exactly what the W3C propagator writes (version 00,
// lowercase hex, trace and span ids not all zero, flags 00 or 01) and no
// tracestate is there.
func canonicalTraceparent(headers []kgo.RecordHeader) ([]byte, bool) {
	var tp []byte
	n := 0
	for _, h := range headers {
		switch h.Key {
		case "tracestate":
			return nil, false
		case "traceparent":
			tp, n = h.Value, n+1
		}
	}
	if n != 1 || len(tp) != 55 || string(tp[:3]) != "00-" || tp[35] != '-' || tp[52] != '-' ||
		tp[53] != '0' || (tp[54] != '0' && tp[54] != '1') {
		return nil, false
	}
	return tp, lowerHexNotZero(tp[3:35]) && lowerHexNotZero(tp[36:52])
}

// lowerHexNotZero reports whether b is lowercase hex digits, not all zero.
func lowerHexNotZero(b []byte) bool {
	zero := true
	for _, c := range b {
		switch {
		case c == '0':
		case (c >= '1' && c <= '9') || (c >= 'a' && c <= 'f'):
			zero = false
		default:
			return false
		}
	}
	return !zero
}

// propagatedTraceHeaders returns the trace context of src as the W3C
// propagator reads and writes it again, or nil.
func propagatedTraceHeaders(src *kgo.Record) []kgo.RecordHeader {
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
func (d *derived) take(job *flushJob, parts map[int32]*partState, only map[int32]bool) {
	ids := make([]int32, 0, len(d.pending))
	for id := range d.pending {
		if only == nil || only[id] {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		b := feedBatch{partition: id, changes: d.pending[id]}
		delete(d.pending, id)
		d.sizes[id] = min(len(b.changes), maxSizeHint)
		if part := parts[id]; part != nil && part.ckptKnown {
			b.below = part.lastCkpt
		}
		job.changes = append(job.changes, b)
	}
}

// drop forgets what was noted and loaded for a partition given up
// (revoked, lost) or rebuilt: whoever folds it next notes it again.
func (d *derived) drop(id int32) {
	delete(d.pending, id)
	delete(d.outbox, id)
}

// persist stores the batch's outcomes in the outbox, retrying until ctx
// ends. It runs before the batch's snapshots are stored. A partition a
// newer owner claimed is marked stale in the batch (flushJob.notOwned).
func (d *derived) persist(ctx context.Context, store Store, topic string, job *flushJob) error {
	if len(job.changes) == 0 {
		return nil
	}
	batches := make([]projstore.OutboxBatch, 0, len(job.changes))
	for _, fb := range job.changes {
		var data []byte
		for _, ch := range fb.changes {
			data = appendOutcome(data, ch.source, ch.out)
		}
		batches = append(batches, projstore.OutboxBatch{Partition: fb.partition, Last: fb.changes[len(fb.changes)-1].source,
			Data: data, Below: fb.below})
	}
	return retry(ctx, d.log, "writing the outbox of the change feed and derived events", func(ctx context.Context) error {
		err := store.PutOutbox(ctx, topic, batches)
		var no *projstore.NotOwnerError
		if errors.As(err, &no) {
			// Its snapshots are refused too (the claim raised their epoch
			// first), and its records are not produced (job.stale).
			d.log.Warn("a newer owner took partitions over: their outbox batches were not written", "partitions", no.Partitions)
			job.notOwned(no.Partitions)
			err = nil
		}
		return err
	})
}

// encode builds the batch's records in a goroutine of its own, so that the
// encoding overlaps the snapshots' write; the returned function waits for
// them, with the partition each record's source record is on. Called by
// whoever writes the batch, before the snapshots.
func (d *derived) encode(job *flushJob) (wait func() (recs []*kgo.Record, from []int32)) {
	if len(job.changes) == 0 {
		return func() ([]*kgo.Record, []int32) { return nil, nil }
	}
	type encoded struct {
		recs []*kgo.Record
		from []int32
	}
	done := make(chan encoded, 1)
	go func() {
		n := 0
		for _, fb := range job.changes {
			for i := range fb.changes {
				if fb.changes[i].feed {
					n++
				}
				if fb.changes[i].react != nil {
					n++
				}
			}
		}
		recs := make([]kgo.Record, n)
		out := make([]*kgo.Record, 0, n)
		from := make([]int32, 0, n)
		var buf []byte // feed values are cut from shared chunks: far fewer allocations
		for _, fb := range job.changes {
			for j := range fb.changes {
				ch := &fb.changes[j]
				if ch.feed {
					if cap(buf)-len(buf) < 1024 {
						buf = make([]byte, 0, 256<<10)
					}
					start := len(buf)
					buf = ch.appendJSON(buf, fb.partition)
					recs[len(out)] = feedRecord(d.feedTopic, fb.partition, ch, buf[start:len(buf):len(buf)])
					out, from = append(out, &recs[len(out)]), append(from, fb.partition)
				}
				if ch.react != nil {
					recs[len(out)] = ch.react.record(d.eventsTopic, ch)
					out, from = append(out, &recs[len(out)]), append(from, fb.partition)
				}
			}
		}
		done <- encoded{out, from}
	}()
	return func() ([]*kgo.Record, []int32) {
		e := <-done
		return e.recs, e.from
	}
}

// feedRecord returns the change feed's record of ch, whose source record
// is on partition, for topic (the change feed's): on the source record's
// partition, keyed by session, its value (appendChangeJSON) and its
// headers the source record's trace context.
func feedRecord(topic string, partition int32, ch *change, value []byte) kgo.Record {
	return kgo.Record{Topic: topic, Partition: partition, Key: []byte(ch.session), Value: value, Headers: ch.headers}
}

// produce hands the batch's records (from encode, in fold order per
// partition) to the Kafka client, after the batch's snapshots are stored.
// It does not wait for acknowledgements (the flush before the checkpoints
// does, and checks d.err, failed), only for room in the client's buffer
// when that is full.
func (d *derived) produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	for _, rec := range recs {
		cl.Produce(ctx, rec, d.produced)
	}
}

func (d *derived) produced(_ *kgo.Record, err error) {
	if err != nil && !d.crash.crashed.Load() {
		d.err.CompareAndSwap(nil, &err)
	}
}

// failed returns the first produce error, or nil.
func (d *derived) failed() error {
	if errp := d.err.Load(); errp != nil {
		return fmt.Errorf("projector: change feed or derived event produce: %w", *errp)
	}
	return nil
}

// outboxRead is the outbox of newly assigned partitions, read by read and
// installed by load.
type outboxRead map[int32]map[int64]outcome

// read returns the outbox outcomes of the given partitions at or after
// each one's start offset (its checkpoint). Called on assignment, before
// the partitions fold anything.
func (d *derived) read(ctx context.Context, store Store, topic string, starts map[int32]int64) (outboxRead, error) {
	if len(starts) == 0 {
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
			d.log.Error("skipping an undecodable outbox batch", "partition", b.Partition, "last", b.Last, "err", err)
		}
	}
	return out, nil
}

// load installs what read returned.
func (d *derived) load(ob outboxRead) {
	for id, m := range ob {
		d.outbox[id] = m
	}
}

// Flags of an outbox entry.
const (
	obRejected = 1 << iota
	obTerminal
	obOrphan
	obFeed
	obDigest
	obRefusal
	obFailure
	obGoal
	obFlags = 1<<iota - 1
)

// refusalReasons are the refusal reasons an outbox entry holds, by index.
var refusalReasons = [...]string{"", fsm.RefusalNotFailed, fsm.RefusalNotInfrastructure, fsm.RefusalChain, fsm.RefusalAlreadyReplaced}

// appendOutcome encodes one outbox entry: the source offset (uvarint), a
// flags byte, the reason, from and to states (a byte each), the version
// (uvarint); with obDigest, the 32-byte digest; with obGoal, the goal
// (uvarint length, bytes); with obRefusal, the refusal's index in refusalReasons (a byte);
// with obFailure, the failure's category (a byte) and code (uvarint
// length, bytes). An entry written before obRefusal, obFailure and obGoal
// existed reads as one without them.
func appendOutcome(dst []byte, source int64, o outcome) []byte {
	dst = binary.AppendUvarint(dst, uint64(source))
	var flags byte
	for _, f := range [...]struct {
		set  bool
		flag byte
	}{{o.rejected, obRejected}, {o.terminal, obTerminal}, {o.orphan, obOrphan}, {o.feed, obFeed}, {o.hasDigest, obDigest},
		{o.refusal != "", obRefusal}, {o.failure, obFailure}, {o.goal != "", obGoal}} {
		if f.set {
			flags |= f.flag
		}
	}
	dst = append(dst, flags, byte(o.reason), byte(o.from), byte(o.to))
	dst = binary.AppendUvarint(dst, o.version)
	if o.hasDigest {
		dst = append(dst, o.digest[:]...)
	}
	if o.goal != "" {
		dst = binary.AppendUvarint(dst, uint64(len(o.goal)))
		dst = append(dst, o.goal...)
	}
	if o.refusal != "" {
		i := 0
		for j, r := range refusalReasons {
			if r == o.refusal {
				i = j
			}
		}
		dst = append(dst, byte(i))
	}
	if o.failure {
		dst = append(dst, byte(o.category))
		dst = binary.AppendUvarint(dst, uint64(len(o.failureCode)))
		dst = append(dst, o.failureCode...)
	}
	return dst
}

// outboxString reads a uvarint length and that many bytes.
func outboxString(data []byte) (string, []byte, error) {
	n, m := binary.Uvarint(data)
	if m <= 0 || n > uint64(len(data)-m) {
		return "", nil, errOutbox
	}
	return string(data[m : m+int(n)]), data[m+int(n):], nil
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
		if m <= 0 || flags&^obFlags != 0 || (flags&obRejected != 0) != reason.Rejection() ||
			(from != fsm.StateNone && !from.Valid()) || (to != fsm.StateNone && !to.Valid()) {
			return errOutbox
		}
		data = data[m:]
		o := outcome{rejected: flags&obRejected != 0, terminal: flags&obTerminal != 0, orphan: flags&obOrphan != 0,
			feed: flags&obFeed != 0, reason: reason, from: from, to: to, version: version}
		if flags&obDigest != 0 {
			if len(data) < 32 {
				return errOutbox
			}
			o.hasDigest = true
			copy(o.digest[:], data)
			data = data[32:]
		}
		if flags&obGoal != 0 {
			var err error
			if o.goal, data, err = outboxString(data); err != nil {
				return err
			}
		}
		if flags&obRefusal != 0 {
			if len(data) < 1 || int(data[0]) == 0 || int(data[0]) >= len(refusalReasons) {
				return errOutbox
			}
			o.refusal, data = refusalReasons[data[0]], data[1:]
		}
		if flags&obFailure != 0 {
			if len(data) < 1 || int(data[0]) >= fsm.NumFailureCategories {
				return errOutbox
			}
			o.failure, o.category = true, fsm.FailureCategory(data[0])
			var err error
			if o.failureCode, data, err = outboxString(data[1:]); err != nil {
				return err
			}
		}
		fn(int64(src), o)
	}
	return nil
}
