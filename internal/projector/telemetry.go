package projector

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Telemetry is the Observer that turns what the projector does into
// OpenTelemetry spans and metrics.
//
// Spans: one session.transition span per applied transition and one
// session.event span per rejected event, continuing the trace the record's
// headers carry, with IDs derived from the session so that a replay after
// a crash re-emits the same spans; and one projector.flush span per batch,
// linked to the transitions it persists (the first linkLimit folded since
// the previous flush, as sampled), parent of the Redis calls. Duplicates
// and skipped records make no span.
//
// Lifecycle spans are built as finished records and exported in batches
// (correxotel.LifecycleSpans), not started and ended one by one through the
// SDK: Folded appends a small value to the current chunk, and each full
// chunk, and at each flush the rest, goes through a bounded queue to one
// goroutine that extracts the records' trace context (copied from their
// headers: a queued span keeps no record), builds the spans and hands them
// to the exporters. The fold never waits for an exporter for
// long: when the queue is full it waits up to maxSpanWait for room
// (correx.projector.spans.waits counts the waits), which paces it to an
// exporter that is merely slower than the fold; if none comes (the exporter
// is stuck: a collector down), the chunk is dropped and counted in
// correx.projector.spans.dropped, and later chunks are dropped without
// waiting until the exporter finishes an export again. See doc.go.
//
// Counters are atomics read by observable instruments at collection time, so
// folding an event costs no OpenTelemetry call. Histograms are recorded only
// for the transitions that end what they measure, with attribute sets built
// once, and by the exporter goroutine: the measurements travel with the
// chunk, and are recorded even when its spans are dropped.
type Telemetry struct {
	tracer trace.Tracer // projector.flush and session.timeout spans
	spans  *correxotel.LifecycleSpans
	prop   propagation.TextMapPropagator

	mu        sync.Mutex // guards cur, links and linkTried
	cur       spanChunk  // folded since the last hand-over
	links     []trace.Link
	linkTried int // transitions considered for links since the last flush

	queue   chan spanChunk
	free    chan spanChunk // chunks the exporter is done with
	stalled atomic.Bool    // a hand-over timed out and the exporter has not finished an export since
	waits   atomic.Int64   // hand-overs that waited for room
	dropped atomic.Int64   // spans not exported: no room in time, a failed export, or Close's deadline
	// exportCtx bounds the exports; Close cancels it when closeWait runs
	// out.
	exportCtx    context.Context
	cancelExport context.CancelFunc
	done         chan struct{}
	closing      sync.Once
	// closeWait is the longest Close waits for queued spans to be exported
	// (closeTimeout; tests shorten it).
	closeWait time.Duration
	idBuf     []byte       // the exporter's, reused
	carrier   traceCarrier // the exporter's, reused

	consumed    atomic.Int64
	applied     atomic.Int64
	duplicates  atomic.Int64
	skipped     atomic.Int64
	rejected    [fsm.NumReasons]atomic.Int64 // by fsm.Reason
	deadLetters [len(dlqReasons)]atomic.Int64
	refusedDLQ  [len(dlqReasons)]atomic.Int64 // dead letters the broker refused
	rebuilds    atomic.Int64                  // partitions rebuilt after Redis lost or rolled back their read model
	restores    atomic.Int64                  // partitions restored from the changelog
	restoreGaps atomic.Int64                  // restores from a changelog checkpoint older than the log's start
	transitions [fsm.NumStates][fsm.NumStates]atomic.Int64
	failures    [fsm.NumFailureCategories]atomic.Int64 // transitions to FAILED, by category

	sessionDuration, approvalWait, cancellation, recovery, paused metric.Float64Histogram
	suspension, propagation                                       metric.Float64Histogram
	flushSize                                                     metric.Int64Histogram
	flushDuration                                                 metric.Float64Histogram
	// Attributes of the histograms, by terminal state, by forced, by
	// approval decision and by cascade reason, built once rather than per
	// record.
	terminalOpts [fsm.NumStates][]metric.RecordOption
	forcedOpts   [2][]metric.RecordOption
	decisionOpts [len(approvalDecisions)][]metric.RecordOption
	cascadeOpts  [len(cascadeReasons)][]metric.RecordOption

	// propagated counts the children a parent's close reached (their
	// CANCELLING by a cascade), by cascadeReasons.
	propagated [len(cascadeReasons)]atomic.Int64
	// now is the wall clock of correx.session.cancellation.propagation
	// (tests set it).
	now func() time.Time

	timeouts timeoutMetrics // telemetry_timeouts.go
	archive  archiveMetrics // telemetry_archive.go
	verify   verifyMetrics  // telemetry_verify.go

	lagMu sync.Mutex
	lag   map[int32]int64 // of the partitions owned, as of their last checkpoint

	// stalls are the projector's (watchStalls), read by the
	// correx.projector.stalled gauge; nil until a projector is built with
	// this observer.
	stalls atomic.Pointer[stalls]
}

// approvalDecisions are the values of correx.decision on
// correx.session.approval.wait, the ways a pending approval ends: by the
// event that ends it (approvalDecision).
var approvalDecisions = [...]string{"granted", "denied", "expired", "cancelled"}

// approvalDecision returns the index in approvalDecisions of the decision
// e made on a pending approval.
func approvalDecision(e *fsm.Event) int {
	switch e.Type {
	case fsm.ApprovalGranted:
		return 0
	case fsm.ApprovalDenied:
		return 1
	case fsm.TimeoutExpired:
		return 2
	}
	return 3
}

// cascadeReasons are the values of correx.reason on the cancellation
// propagation metrics: the reasons of a cascade's CancellationRequested.
var cascadeReasons = [...]string{ReasonParentCancelled, ReasonParentCompleted, ReasonParentClosed}

// cascaded returns the index in cascadeReasons of e, a CancellationRequested
// a parent's close produced, or -1 when e is not one: the system's (its id
// is in the reserved space, which only the system's records carry:
// kafka.DecodeEvent) with a cascade's reason. (The decoder does not keep
// the payload's parentSessionId.)
func cascaded(e *fsm.Event) int {
	if e.Type != fsm.CancellationRequested || !e.ID.Reserved() {
		return -1
	}
	for i, r := range cascadeReasons {
		if e.Fields.Reason == r {
			return i
		}
	}
	return -1
}

var dlqReasons = [...]string{ReasonUndecodable, ReasonUnsupportedVersion, ReasonUnknownEventType,
	ReasonInvalidEvent, ReasonKeyMismatch, ReasonUnknownSession, ReasonWrongPartition, ReasonReservedEventID,
	ReasonForgedSystemEvent}

const (
	linkLimit = 128
	// chunkSpans is how many spans the fold hands over at a time, and the
	// exporter builds and exports together.
	chunkSpans = 1024
	// queueChunks bounds the chunks waiting for the exporter: with the
	// chunk being filled and the one being exported, at most
	// (queueChunks+2)*chunkSpans spans (and their records) are held.
	queueChunks = 64
	// maxSpanWait is the longest a hand-over waits for room in a full queue
	// before the chunk is dropped.
	maxSpanWait = 250 * time.Millisecond
	// closeTimeout is the longest Close waits for queued spans to be
	// exported.
	closeTimeout = 5 * time.Second
)

// spanJob is a span to build: a transition, or a rejection when rejected is
// set.
type spanJob struct {
	// traceparent and tracestate are where the record's trace context
	// headers were copied in the chunk's arena: the job must not keep the
	// record, which keeps its whole fetched batch.
	traceparent, tracestate headerRange
	partition               int32
	offset                  int64
	rejected                bool
	from, to                fsm.State
	reason                  fsm.Reason
	eventType               string // the event's type name (a custom type's own)
	session                 string
	corr                    string
	eventID                 fsm.EventID
	version                 uint64 // for a rejection: events seen
	occurredAt              time.Time
	inFrom                  time.Duration
	// failed marks a transition to FAILED, with the failure's category and
	// code.
	failed      bool
	category    fsm.FailureCategory
	failureCode string
}

// spanChunk is what the queue carries: spans to build and export, the
// bytes of their records' trace context headers, the histogram
// measurements folded with them, and, for Drain, a channel to close once
// everything queued before it is exported.
type spanChunk struct {
	jobs     []spanJob
	arena    []byte
	measures []measure
	barrier  chan struct{}
}

// headerRange locates bytes in a chunk's arena; the zero range is empty.
type headerRange struct{ start, end int32 }

// maxTraceHeader bounds each trace context header copied from a record: a
// traceparent is 55 bytes, and a tracestate longer than records carry
// (correxotel.MaxRecordTraceStateBytes) is not kept, so a record from
// another producer cannot make a chunk hold more than a few hundred KB.
const maxTraceHeader = correxotel.MaxRecordTraceStateBytes

// copyHeader copies the value of r's header key into the arena.
func (c *spanChunk) copyHeader(r *kgo.Record, key string) headerRange {
	for _, h := range r.Headers {
		if h.Key == key && len(h.Value) <= maxTraceHeader {
			start := int32(len(c.arena))
			c.arena = append(c.arena, h.Value...)
			return headerRange{start, int32(len(c.arena))}
		}
	}
	return headerRange{}
}

// traceCarrier presents the trace context headers copied in a chunk's
// arena to the propagator; the exporter goroutine reuses one.
type traceCarrier struct{ traceparent, tracestate string }

func (c *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.traceparent
	case "tracestate":
		return c.tracestate
	}
	return ""
}

func (c *traceCarrier) Set(string, string) {}

func (c *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// measure is a histogram measurement: recorded by the exporter goroutine,
// not the fold (a Record costs more than the rest of Folded), and recorded
// even when the chunk's spans are dropped.
type measure struct {
	h    metric.Float64Histogram
	v    float64
	opts []metric.RecordOption
}

func (c *spanChunk) record() {
	for _, m := range c.measures {
		m.h.Record(ctxBackground, m.v, m.opts...)
	}
}

// NewTelemetry builds the observer from a meter and tracer provider.
func NewTelemetry(t *correxotel.Telemetry, topic, group string) (*Telemetry, error) {
	const scope = "github.com/correx/sessions/projector"
	o := &Telemetry{tracer: t.Tracer(scope), spans: t.LifecycleSpans(scope), prop: t.Propagator, lag: map[int32]int64{},
		queue: make(chan spanChunk, queueChunks), free: make(chan spanChunk, queueChunks+2), done: make(chan struct{}), closeWait: closeTimeout,
		now: time.Now}
	o.exportCtx, o.cancelExport = context.WithCancel(context.Background())
	for st := range fsm.NumStates {
		o.terminalOpts[st] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(correxotel.AttrSessionState.String(fsm.State(st).String())))}
	}
	for i, forced := range []bool{false, true} {
		o.forcedOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.Bool("correx.forced", forced)))}
	}
	for i, d := range approvalDecisions {
		o.decisionOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("correx.decision", d)))}
	}
	for i, r := range cascadeReasons {
		o.cascadeOpts[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("correx.reason", r)))}
	}
	m := t.Meter(scope)
	var err error
	hist := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.01, 0.1, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400))
		err = errors.Join(err, e)
		return h
	}
	o.sessionDuration = hist("correx.session.duration", "Time from SessionCreated to a terminal state, by terminal state.")
	o.approvalWait = hist("correx.session.approval.wait",
		"Time an approval was pending, from ApprovalRequested to its end, by decision (granted, denied, expired, cancelled).")
	o.cancellation = hist("correx.session.cancellation.duration", "Time from cancellation requested to CANCELLED.")
	o.recovery = hist("correx.session.recovery.duration", "Time spent in RECOVERING per recovery.")
	o.paused = hist("correx.session.paused.duration", "Time suspended in PAUSED per pause.")
	o.suspension = hist("correx.session.suspension.duration",
		"Time a session spent suspended (PAUSED and AWAITING_APPROVAL), at its close, by terminal state.")
	o.propagation = hist("correx.session.cancellation.propagation",
		"Time from a parent's close to its child's CANCELLING (the projector's clock when it folds the child's cancellation, minus the parent's close), by reason.")
	var e1, e2 error
	o.flushSize, e1 = m.Int64Histogram("correx.projector.flush.size", metric.WithUnit("{snapshot}"),
		metric.WithDescription("Snapshots written per flush."),
		metric.WithExplicitBucketBoundaries(1, 10, 100, 1000, 5000, 20000, 50000))
	o.flushDuration, e2 = m.Float64Histogram("correx.projector.flush.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to write a flush: snapshots, dead letters, checkpoints."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	err = errors.Join(err, e1, e2, o.timeouts.init(m), o.archive.init(m), o.verify.init(m))

	msgAttrs := metric.WithAttributes(attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", topic), attribute.String("messaging.consumer.group.name", group))
	consumed, e3 := m.Int64ObservableCounter("messaging.client.consumed.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Records the projector consumed."))
	events, e4 := m.Int64ObservableCounter("correx.projector.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events by outcome: applied, rejected (with reason), duplicate, skipped (already reflected)."))
	trans, e5 := m.Int64ObservableCounter("correx.session.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Applied transitions by from and to state."))
	dlq, e6 := m.Int64ObservableCounter("correx.projector.dead_letters", metric.WithUnit("{message}"),
		metric.WithDescription("Records sent to the dead-letter topic, by reason."))
	lag, e7 := m.Int64ObservableGauge("correx.projector.lag", metric.WithUnit("{message}"),
		metric.WithDescription("High watermark minus checkpoint per partition this projector owns, when the checkpoint was written."))
	waits, e8 := m.Int64ObservableCounter("correx.projector.spans.waits", metric.WithUnit("{chunk}"),
		metric.WithDescription("Chunks of lifecycle spans the fold had to wait to queue, because the exporter was behind."))
	dropped, e11 := m.Int64ObservableCounter("correx.projector.spans.dropped", metric.WithUnit("{span}"),
		metric.WithDescription("Lifecycle spans not exported: the exporter was stuck (no room in the queue in time), an export failed, or the exporter was still behind when the projector stopped."))
	refusedDLQ, e9 := m.Int64ObservableCounter("correx.projector.dead_letters.refused", metric.WithUnit("{message}"),
		metric.WithDescription("Records set aside whose dead letter the broker refused (too large, invalid), by reason: skipped without a dead letter."))
	propagated, e12 := m.Int64ObservableCounter("correx.session.cancellations.propagated", metric.WithUnit("{session}"),
		metric.WithDescription("Children a parent's close reached: sessions that entered CANCELLING by a cancellation their parent's close produced, by reason (parent_cancelled, parent_completed, parent_closed: created after the parent had closed)."))
	failures, e13 := m.Int64ObservableCounter("correx.session.failures", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions that failed, by failure category (correx.failure.category)."))
	rebuilds, e10 := m.Int64ObservableCounter("correx.projector.rebuilds", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions rebuilt from the log because Redis lost their checkpoint or went back in time (emptied, a lagging replica promoted, a restart from an older file)."))
	restores, e14 := m.Int64ObservableCounter("correx.projector.restores", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions restored from the snapshot changelog instead of folded from the start of the log, after Redis lost their read model."))
	restoreGaps, e15 := m.Int64ObservableCounter("correx.projector.restore_gaps", metric.WithUnit("{partition}"),
		metric.WithDescription("Restores from a changelog checkpoint older than the events log's start (finite retention): the events in between are gone, an alert (/readyz names the partition)."))
	stalled, e16 := m.Int64ObservableGauge("correx.projector.stalled", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions this projector holds paused until an operator acts (a checkpoint beyond the end of the log, a changelog it cannot restore from): /readyz names each with its reason."))
	err = errors.Join(err, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15, e16)
	if err != nil {
		return nil, err
	}
	outcome := func(v string) attribute.KeyValue { return attribute.String("correx.outcome", v) }
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(consumed, o.consumed.Load(), msgAttrs)
		obs.ObserveInt64(waits, o.waits.Load())
		obs.ObserveInt64(dropped, o.dropped.Load())
		obs.ObserveInt64(rebuilds, o.rebuilds.Load())
		obs.ObserveInt64(restores, o.restores.Load())
		obs.ObserveInt64(restoreGaps, o.restoreGaps.Load())
		var held int64
		if s := o.stalls.Load(); s != nil {
			held = s.held.Load()
		}
		obs.ObserveInt64(stalled, held)
		for i, r := range cascadeReasons {
			obs.ObserveInt64(propagated, o.propagated[i].Load(), metric.WithAttributes(attribute.String("correx.reason", r)))
		}
		for c := range fsm.FailureCategory(fsm.NumFailureCategories) {
			if n := o.failures[c].Load(); n > 0 {
				obs.ObserveInt64(failures, n, metric.WithAttributes(attribute.String("correx.failure.category", c.String())))
			}
		}
		obs.ObserveInt64(events, o.applied.Load(), metric.WithAttributes(outcome("applied")))
		obs.ObserveInt64(events, o.duplicates.Load(), metric.WithAttributes(outcome("duplicate")))
		obs.ObserveInt64(events, o.skipped.Load(), metric.WithAttributes(outcome("skipped")))
		for r := range fsm.Rejections() {
			obs.ObserveInt64(events, o.rejected[r].Load(), metric.WithAttributes(outcome("rejected"), attribute.String("correx.reason", r.String())))
		}
		// Every reason from the start, at 0 until its first dead letter: a
		// series that appears at 1 has no earlier sample for increase() or
		// rate() to compare with, so an alert on them would miss it.
		for i, reason := range dlqReasons {
			obs.ObserveInt64(dlq, o.deadLetters[i].Load(), metric.WithAttributes(attribute.String("correx.reason", reason)))
			obs.ObserveInt64(refusedDLQ, o.refusedDLQ[i].Load(), metric.WithAttributes(attribute.String("correx.reason", reason)))
		}
		for from := range fsm.NumStates {
			for to := range fsm.NumStates {
				if n := o.transitions[from][to].Load(); n > 0 {
					attrs := []attribute.KeyValue{correxotel.AttrStateTo.String(fsm.State(to).String())}
					if from != int(fsm.StateNone) {
						attrs = append(attrs, correxotel.AttrStateFrom.String(fsm.State(from).String()))
					}
					obs.ObserveInt64(trans, n, metric.WithAttributes(attrs...))
				}
			}
		}
		o.lagMu.Lock()
		defer o.lagMu.Unlock()
		for p, l := range o.lag {
			obs.ObserveInt64(lag, l, metric.WithAttributes(correxotel.AttrPartition.Int(int(p))))
		}
		return nil
	}, consumed, events, trans, dlq, lag, waits, dropped, refusedDLQ, rebuilds, restores, restoreGaps, propagated, failures, stalled)
	if err != nil {
		return nil, err
	}
	go o.export()
	return o, nil
}

// add appends a span, and the measurements folded with it, to the current
// chunk, handing the chunk over when it is full. The first linkLimit
// transitions since the previous flush get their span context now, for the
// flush span's links: at most linkLimit derivations per flush on the fold
// path.
func (o *Telemetry) add(rec *kgo.Record, j spanJob, ms ...measure) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !j.rejected && o.linkTried < linkLimit {
		o.linkTried++
		ctx := correxotel.ExtractRecord(ctxBackground, o.prop, rec)
		if sc := o.spans.TransitionSpanContext(ctx, j.session, j.version); sc.IsSampled() {
			o.links = append(o.links, trace.Link{SpanContext: sc})
		}
	}
	if o.cur.jobs == nil {
		o.cur = o.newChunk()
	}
	if len(rec.Headers) > 0 {
		j.traceparent = o.cur.copyHeader(rec, "traceparent")
		j.tracestate = o.cur.copyHeader(rec, "tracestate")
	}
	o.cur.jobs = append(o.cur.jobs, j)
	o.cur.measures = append(o.cur.measures, ms...)
	if len(o.cur.jobs) == chunkSpans {
		o.handOverLocked()
	}
}

func (o *Telemetry) newChunk() spanChunk {
	select {
	case c := <-o.free:
		return c
	default:
		return spanChunk{jobs: make([]spanJob, 0, chunkSpans), arena: make([]byte, 0, 64*chunkSpans),
			measures: make([]measure, 0, chunkSpans/2)}
	}
}

// handOverLocked queues the current chunk. A full queue makes it wait up to
// maxSpanWait, unless an earlier wait already ran out and the exporter has
// not finished an export since: then the chunk is dropped at once, so that
// a stuck exporter costs the fold one wait per export, not one per chunk.
func (o *Telemetry) handOverLocked() {
	if len(o.cur.jobs) == 0 {
		return
	}
	c := o.cur
	o.cur = spanChunk{}
	select {
	case o.queue <- c:
		return
	default:
	}
	if !o.stalled.Load() {
		o.waits.Add(1)
		t := time.NewTimer(maxSpanWait)
		defer t.Stop()
		select {
		case o.queue <- c:
			return
		case <-t.C:
			o.stalled.Store(true)
		}
	}
	c.record()
	o.dropped.Add(int64(len(c.jobs)))
	o.recycle(c)
}

func (o *Telemetry) recycle(c spanChunk) {
	clear(c.jobs) // release the records
	clear(c.measures)
	select {
	case o.free <- spanChunk{jobs: c.jobs[:0], arena: c.arena[:0], measures: c.measures[:0]}:
	default:
	}
}

// export is the exporter goroutine: it builds and exports the queued spans,
// one batch per chunk.
func (o *Telemetry) export() {
	defer close(o.done)
	for c := range o.queue {
		if len(c.jobs) > 0 {
			c.record()
			o.exportChunk(c.jobs, c.arena)
			o.stalled.Store(false)
			o.recycle(c)
		}
		if c.barrier != nil {
			close(c.barrier)
		}
	}
}

func (o *Telemetry) exportChunk(jobs []spanJob, arena []byte) {
	if o.exportCtx.Err() != nil { // Close gave up waiting
		o.dropped.Add(int64(len(jobs)))
		return
	}
	// The event IDs of the chunk in one string, sliced per span: one
	// allocation per chunk rather than one per span.
	const idLen = len("01234567-89ab-cdef-0123-456789abcdef")
	o.idBuf = o.idBuf[:0]
	for i := range jobs {
		o.idBuf = jobs[i].eventID.AppendText(o.idBuf)
	}
	ids := string(o.idBuf)
	headers := string(arena) // a tracestate becomes part of a span: copied once
	b := o.spans.NewBatch(len(jobs))
	for i := range jobs {
		j := &jobs[i]
		o.carrier = traceCarrier{headers[j.traceparent.start:j.traceparent.end], headers[j.tracestate.start:j.tracestate.end]}
		ctx := o.prop.Extract(ctxBackground, &o.carrier)
		id := ids[i*idLen : (i+1)*idLen]
		if j.rejected {
			b.AddRejection(ctx, &correxotel.Rejection{
				SessionID: j.session, CorrelationID: j.corr, EventType: j.eventType, EventID: id,
				State: j.from.String(), Reason: j.reason.String(), Seen: j.version, OccurredAt: j.occurredAt,
				Partition: j.partition, Offset: j.offset})
			continue
		}
		from := ""
		if j.from != fsm.StateNone {
			from = j.from.String()
		}
		tr := correxotel.Transition{
			SessionID: j.session, CorrelationID: j.corr, From: from, To: j.to.String(),
			EventType: j.eventType, EventID: id, Version: j.version,
			OccurredAt: j.occurredAt, InFrom: j.inFrom, Partition: j.partition, Offset: j.offset}
		if j.failed {
			tr.FailureCategory, tr.FailureCode = j.category.String(), j.failureCode
		}
		b.AddTransition(ctx, &tr)
	}
	failed, err := o.spans.Export(o.exportCtx, b)
	if err != nil {
		otel.Handle(err) // as the SDK's batch span processor reports a failed export
	}
	o.dropped.Add(int64(failed))
}

// Drain waits until every span folded so far is exported (tests and
// benchmarks).
func (o *Telemetry) Drain() {
	o.mu.Lock()
	o.handOverLocked()
	o.mu.Unlock()
	barrier := make(chan struct{})
	o.queue <- spanChunk{barrier: barrier}
	<-barrier
}

// Close exports what is queued, waiting at most closeTimeout (spans still
// unexported then are dropped and counted), and stops the exporter
// goroutine; the observer must not be used after.
func (o *Telemetry) Close() {
	o.closing.Do(func() {
		o.mu.Lock()
		o.handOverLocked()
		o.mu.Unlock()
		close(o.queue)
		t := time.NewTimer(o.closeWait)
		defer t.Stop()
		select {
		case <-o.done:
		case <-t.C:
			o.cancelExport() // the export in progress returns, the rest is dropped
			<-o.done
		}
		o.cancelExport()
	})
}

var ctxBackground = context.Background()

func seconds(ns int64) float64 { return float64(max(ns, 0)) / float64(time.Second) }

// Folded implements Observer.
func (o *Telemetry) Folded(rec *kgo.Record, e *fsm.Event, s *snapshot.Snapshot, out fsm.Outcome) {
	o.consumed.Add(1)
	o.timeouts.count(out)
	switch out.Result {
	case fsm.Applied:
		o.applied.Add(1)
	case fsm.Duplicate:
		o.duplicates.Add(1)
		return
	case fsm.Rejected:
		if int(out.Reason) < len(o.rejected) {
			o.rejected[out.Reason].Add(1)
		}
		o.add(rec, spanJob{partition: rec.Partition, offset: rec.Offset, rejected: true, session: s.ID, corr: e.CorrelationID, from: out.From,
			reason: out.Reason, eventType: e.TypeName(), eventID: e.ID, version: s.Counters.Events, occurredAt: e.OccurredAt})
		return
	}
	if !out.Transitioned() {
		return
	}
	o.transitions[out.From][out.To].Add(1)
	var buf [6]measure
	ms := buf[:0]
	at := e.OccurredAt.UnixNano()
	if out.To.Terminal() {
		ms = append(ms, measure{o.sessionDuration, seconds(at - s.CreatedAt), o.terminalOpts[out.To]},
			measure{o.suspension, seconds(s.Durations[fsm.StatePaused] + s.Durations[fsm.StateAwaitingApproval]), o.terminalOpts[out.To]})
	}
	if out.ApprovalWait > 0 || (out.From == fsm.StateAwaitingApproval && out.To != fsm.StateRecovering) {
		ms = append(ms, measure{o.approvalWait, out.ApprovalWait.Seconds(), o.decisionOpts[approvalDecision(e)]})
	}
	if out.To == fsm.StateCancelling && !out.Escalated { // an escalation was CANCELLING already
		if i := cascaded(e); i >= 0 {
			o.propagated[i].Add(1)
			ms = append(ms, measure{o.propagation, seconds(o.now().UnixNano() - at), o.cascadeOpts[i]})
		}
	}
	if out.To == fsm.StateCancelled {
		c := s.Cancellation
		forced := 0
		if c.Forced {
			forced = 1
		}
		ms = append(ms, measure{o.cancellation, seconds(c.CompletedAt - c.RequestedAt), o.forcedOpts[forced]})
	}
	switch out.From {
	case fsm.StateRecovering:
		ms = append(ms, measure{o.recovery, out.Closed.Seconds(), nil})
	case fsm.StatePaused:
		ms = append(ms, measure{o.paused, out.Closed.Seconds(), nil})
	}
	j := spanJob{partition: rec.Partition, offset: rec.Offset, session: s.ID, corr: s.CorrelationID, from: out.From, to: out.To,
		eventType: e.TypeName(), eventID: e.ID, version: s.Version, occurredAt: e.OccurredAt, inFrom: out.Closed}
	if out.To == fsm.StateFailed {
		if c := s.Failure.Category; int(c) < len(o.failures) {
			o.failures[c].Add(1)
		}
		j.failed, j.category, j.failureCode = true, s.Failure.Category, s.Failure.Code
	}
	o.add(rec, j, ms...)
}

// Skipped implements Observer.
func (o *Telemetry) Skipped(*kgo.Record) {
	o.consumed.Add(1)
	o.skipped.Add(1)
}

// DeadLettered implements Observer.
func (o *Telemetry) DeadLettered(_ *kgo.Record, reason string) {
	o.consumed.Add(1)
	for i, r := range dlqReasons {
		if r == reason {
			o.deadLetters[i].Add(1)
		}
	}
}

// DeadLetterFailed implements Observer.
func (o *Telemetry) DeadLetterFailed(_ *kgo.Record, reason string, _ error) {
	for i, r := range dlqReasons {
		if r == reason {
			o.refusedDLQ[i].Add(1)
		}
	}
}

// FlushStarted implements Observer: it hands the spans folded since the
// previous flush to the exporter and starts the projector.flush span,
// linked to the first of those transitions.
func (o *Telemetry) FlushStarted(snapshots, checkpoints int) context.Context {
	o.mu.Lock()
	o.handOverLocked()
	links := o.links
	o.links, o.linkTried = nil, 0
	o.mu.Unlock()
	ctx, _ := o.tracer.Start(ctxBackground, "projector.flush", trace.WithLinks(links...), trace.WithAttributes(
		attribute.Int("correx.flush.snapshots", snapshots), attribute.Int("correx.flush.checkpoints", checkpoints)))
	return ctx
}

// Flushed implements Observer: it ends the flush span.
func (o *Telemetry) Flushed(ctx context.Context, res snapshot.PutResult, d time.Duration, err error) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.Int("correx.flush.written", res.Written), attribute.Int("correx.flush.fenced", res.Fenced))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if res.Written+res.Fenced > 0 {
		o.flushSize.Record(ctxBackground, int64(res.Written+res.Fenced))
	}
	o.flushDuration.Record(ctxBackground, d.Seconds())
}

// Checkpointed implements Observer.
func (o *Telemetry) Checkpointed(cp snapshot.Checkpoint) {
	if cp.HighWatermark < 0 {
		return
	}
	o.lagMu.Lock()
	o.lag[cp.Partition] = max(0, cp.HighWatermark-cp.Offset)
	o.lagMu.Unlock()
}

// partitionLeft forgets the lag of a partition the projector no longer
// owns (revoked or lost): its new owner reports it, and the value kept here
// would stay what it was when the partition left, for as long as this
// process lives.
func (o *Telemetry) partitionLeft(id int32) {
	o.lagMu.Lock()
	delete(o.lag, id)
	o.lagMu.Unlock()
}

// watchStalls gives the correx.projector.stalled gauge the projector's
// stalls (New).
func (o *Telemetry) watchStalls(s *stalls) { o.stalls.Store(s) }

// Rebuilt counts a partition rebuilt from the log (recovery.go).
func (o *Telemetry) Rebuilt(int32) { o.rebuilds.Add(1) }

// Restored counts a partition restored from the changelog (restore.go),
// and a restore over a gap in the events log.
func (o *Telemetry) Restored(_ int32, _ int, gap bool) {
	o.restores.Add(1)
	if gap {
		o.restoreGaps.Add(1)
	}
}
