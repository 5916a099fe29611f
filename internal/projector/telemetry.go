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
// session.event span per rejected event (correxotel.RecordTransition,
// RecordRejection), continuing the trace the record's headers carry, with
// IDs derived from the session so that a replay after a crash re-emits the
// same spans; and one projector.flush span per batch, linked to the
// transitions it persists (at most linkLimit), parent of the Redis calls.
// Duplicates and skipped records make no span.
//
// Counters are atomics read by observable instruments at collection time, so
// folding an event costs no OpenTelemetry call; histograms are recorded only
// for the transitions that end what they measure.
//
// Spans are created off the fold path: Folded enqueues a small value and one
// emitter goroutine extracts the record's trace context and creates the
// span, so the work runs on a spare core when there is one (see
// BenchmarkTracingOverhead). When the queue (spanQueue) is full the fold
// waits: no span is lost; correx.projector.spans.waits counts the waits.
// Close drains the queue.
type Telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	queue   chan spanJob
	pending atomic.Int64
	dropped atomic.Int64 // waits on a full queue
	done    chan struct{}
	closing sync.Once

	consumed    atomic.Int64
	applied     atomic.Int64
	duplicates  atomic.Int64
	skipped     atomic.Int64
	rejected    [8]atomic.Int64 // by fsm.Reason
	deadLetters [len(dlqReasons)]atomic.Int64
	refusedDLQ  [len(dlqReasons)]atomic.Int64 // dead letters the broker refused
	rebuilds    atomic.Int64                  // partitions rebuilt after Redis lost or rolled back their read model
	transitions [fsm.NumStates][fsm.NumStates]atomic.Int64

	sessionDuration, approvalWait, cancellation, recovery, paused metric.Float64Histogram
	flushSize                                                     metric.Int64Histogram
	flushDuration                                                 metric.Float64Histogram

	timeouts timeoutMetrics // telemetry_timeouts.go

	mu    sync.Mutex
	lag   map[int32]int64
	links []trace.Link
}

var dlqReasons = [...]string{ReasonUndecodable, ReasonUnsupportedVersion, ReasonUnknownEventType,
	ReasonInvalidEvent, ReasonKeyMismatch, ReasonUnknownSession, ReasonWrongPartition}

const (
	linkLimit = 128
	spanQueue = 1 << 16
	drainWait = 100 * time.Millisecond
)

// spanJob is a span to emit: a transition, or a rejection when rejected is set.
type spanJob struct {
	rec        *kgo.Record
	rejected   bool
	session    string
	corr       string
	from, to   fsm.State
	reason     fsm.Reason
	eventType  fsm.EventType
	eventID    fsm.EventID
	version    uint64 // for a rejection: events seen
	occurredAt time.Time
	inFrom     time.Duration
}

// NewTelemetry builds the observer from a meter and tracer provider.
func NewTelemetry(t *correxotel.Telemetry, topic, group string) (*Telemetry, error) {
	o := &Telemetry{tracer: t.Tracer("github.com/correx/sessions/projector"), prop: t.Propagator, lag: map[int32]int64{},
		queue: make(chan spanJob, spanQueue), done: make(chan struct{})}
	m := t.Meter("github.com/correx/sessions/projector")
	var err error
	hist := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.01, 0.1, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400))
		err = errors.Join(err, e)
		return h
	}
	o.sessionDuration = hist("correx.session.duration", "Time from SessionCreated to a terminal state, by terminal state.")
	o.approvalWait = hist("correx.session.approval.wait", "Time an approval was pending, from ApprovalRequested to its end.")
	o.cancellation = hist("correx.session.cancellation.duration", "Time from cancellation requested to CANCELLED.")
	o.recovery = hist("correx.session.recovery.duration", "Time spent in RECOVERING per recovery.")
	o.paused = hist("correx.session.paused.duration", "Time suspended in PAUSED per pause.")
	var e1, e2 error
	o.flushSize, e1 = m.Int64Histogram("correx.projector.flush.size", metric.WithUnit("{snapshot}"),
		metric.WithDescription("Snapshots written per flush."),
		metric.WithExplicitBucketBoundaries(1, 10, 100, 1000, 5000, 20000, 50000))
	o.flushDuration, e2 = m.Float64Histogram("correx.projector.flush.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to write a flush: snapshots, dead letters, checkpoints."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	err = errors.Join(err, e1, e2, o.timeouts.init(m))

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
		metric.WithDescription("High watermark minus checkpoint per partition, when the checkpoint was written."))
	dropped, e8 := m.Int64ObservableCounter("correx.projector.spans.waits", metric.WithUnit("{span}"),
		metric.WithDescription("Lifecycle spans the fold had to wait to queue, because the emitter was behind."))
	refusedDLQ, e9 := m.Int64ObservableCounter("correx.projector.dead_letters.refused", metric.WithUnit("{message}"),
		metric.WithDescription("Records set aside whose dead letter the broker refused (too large, invalid), by reason: skipped without a dead letter."))
	rebuilds, e10 := m.Int64ObservableCounter("correx.projector.rebuilds", metric.WithUnit("{partition}"),
		metric.WithDescription("Partitions rebuilt from the log because Redis lost their checkpoint or went back in time (emptied, a lagging replica promoted, a restart from an older file)."))
	err = errors.Join(err, e3, e4, e5, e6, e7, e8, e9, e10)
	if err != nil {
		return nil, err
	}
	outcome := func(v string) attribute.KeyValue { return attribute.String("correx.outcome", v) }
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(consumed, o.consumed.Load(), msgAttrs)
		obs.ObserveInt64(dropped, o.dropped.Load())
		obs.ObserveInt64(rebuilds, o.rebuilds.Load())
		obs.ObserveInt64(events, o.applied.Load(), metric.WithAttributes(outcome("applied")))
		obs.ObserveInt64(events, o.duplicates.Load(), metric.WithAttributes(outcome("duplicate")))
		obs.ObserveInt64(events, o.skipped.Load(), metric.WithAttributes(outcome("skipped")))
		for r := fsm.ReasonAfterTerminal; r <= fsm.ReasonDuplicateCreate; r++ {
			obs.ObserveInt64(events, o.rejected[r].Load(), metric.WithAttributes(outcome("rejected"), attribute.String("correx.reason", r.String())))
		}
		for i, reason := range dlqReasons {
			if n := o.deadLetters[i].Load(); n > 0 {
				obs.ObserveInt64(dlq, n, metric.WithAttributes(attribute.String("correx.reason", reason)))
			}
			if n := o.refusedDLQ[i].Load(); n > 0 {
				obs.ObserveInt64(refusedDLQ, n, metric.WithAttributes(attribute.String("correx.reason", reason)))
			}
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
		o.mu.Lock()
		defer o.mu.Unlock()
		for p, l := range o.lag {
			obs.ObserveInt64(lag, l, metric.WithAttributes(correxotel.AttrPartition.Int(int(p))))
		}
		return nil
	}, consumed, events, trans, dlq, lag, dropped, refusedDLQ, rebuilds)
	if err != nil {
		return nil, err
	}
	go o.emit()
	return o, nil
}

// enqueue hands a span to the emitter. A full queue blocks the fold rather
// than losing spans: tracing that drops most transitions under load would be
// worse than a slower projector. BlockingSends counts how often it waited.
func (o *Telemetry) enqueue(j spanJob) {
	o.pending.Add(1)
	select {
	case o.queue <- j:
	default:
		o.dropped.Add(1) // counted as a wait, not a loss
		o.queue <- j
	}
}

// emit creates the queued spans.
func (o *Telemetry) emit() {
	defer close(o.done)
	for j := range o.queue {
		ctx := correxotel.ExtractRecord(ctxBackground, o.prop, j.rec)
		if j.rejected {
			correxotel.RecordRejection(ctx, o.tracer, correxotel.Rejection{
				SessionID: j.session, CorrelationID: j.corr, EventType: j.eventType.String(), EventID: j.eventID.String(),
				State: j.from.String(), Reason: j.reason.String(), Seen: j.version, OccurredAt: j.occurredAt,
				Partition: j.rec.Partition, Offset: j.rec.Offset})
		} else {
			from := ""
			if j.from != fsm.StateNone {
				from = j.from.String()
			}
			sc := correxotel.RecordTransition(ctx, o.tracer, correxotel.Transition{
				SessionID: j.session, CorrelationID: j.corr, From: from, To: j.to.String(),
				EventType: j.eventType.String(), EventID: j.eventID.String(), Version: j.version,
				OccurredAt: j.occurredAt, InFrom: j.inFrom, Partition: j.rec.Partition, Offset: j.rec.Offset})
			if sc.IsSampled() {
				o.mu.Lock()
				if len(o.links) < linkLimit {
					o.links = append(o.links, trace.Link{SpanContext: sc})
				}
				o.mu.Unlock()
			}
		}
		o.pending.Add(-1)
	}
}

// Drain waits until every queued span is emitted (tests, and before a flush
// span is started, so it links what it persists).
func (o *Telemetry) Drain() {
	for o.pending.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// Close emits what is queued and stops the emitter; the observer must not
// be used after.
func (o *Telemetry) Close() {
	o.closing.Do(func() {
		close(o.queue)
		<-o.done
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
		o.enqueue(spanJob{rec: rec, rejected: true, session: s.ID, corr: e.CorrelationID, from: out.From,
			reason: out.Reason, eventType: e.Type, eventID: e.ID, version: s.Counters.Events, occurredAt: e.OccurredAt})
		return
	}
	if !out.Transitioned() {
		return
	}
	o.transitions[out.From][out.To].Add(1)
	o.enqueue(spanJob{rec: rec, session: s.ID, corr: s.CorrelationID, from: out.From, to: out.To,
		eventType: e.Type, eventID: e.ID, version: s.Version, occurredAt: e.OccurredAt, inFrom: out.Closed})
	at := e.OccurredAt.UnixNano()
	if out.To.Terminal() {
		o.sessionDuration.Record(ctxBackground, seconds(at-s.CreatedAt), metric.WithAttributes(correxotel.AttrSessionState.String(out.To.String())))
	}
	if out.ApprovalWait > 0 || (out.From == fsm.StateAwaitingApproval && out.To != fsm.StateRecovering) {
		o.approvalWait.Record(ctxBackground, out.ApprovalWait.Seconds())
	}
	if out.To == fsm.StateCancelled {
		c := s.Cancellation
		o.cancellation.Record(ctxBackground, seconds(c.CompletedAt-c.RequestedAt), metric.WithAttributes(attribute.Bool("correx.forced", c.Forced)))
	}
	switch out.From {
	case fsm.StateRecovering:
		o.recovery.Record(ctxBackground, out.Closed.Seconds())
	case fsm.StatePaused:
		o.paused.Record(ctxBackground, out.Closed.Seconds())
	}
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

// FlushStarted implements Observer: it starts the projector.flush span,
// linked to the transitions folded since the previous flush. It first gives
// the emitter up to drainWait to create the spans queued so far, so that the
// flush links what it persists; under heavy load some links then fall to the
// next flush rather than holding the fold back.
func (o *Telemetry) FlushStarted(snapshots, checkpoints int) context.Context {
	for deadline := time.Now().Add(drainWait); o.pending.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	o.mu.Lock()
	links := o.links
	o.links = nil
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
	o.mu.Lock()
	o.lag[cp.Partition] = max(0, cp.HighWatermark-cp.Offset)
	o.mu.Unlock()
}

// Rebuilt counts a partition rebuilt from the log (recovery.go).
func (o *Telemetry) Rebuilt(int32) { o.rebuilds.Add(1) }
