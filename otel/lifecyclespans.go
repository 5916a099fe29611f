package correxotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Export settings of lifecycle spans: the batch span processor's defaults
// (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, OTEL_BSP_EXPORT_TIMEOUT), so that a
// collector sees requests of the same size from both paths.
const (
	maxExportBatch = 512
	exportTimeout  = 30 * time.Second
)

// LifecycleSpans builds lifecycle spans (session.transition, session.event)
// as finished, read-only span records and hands them to the Telemetry's
// span exporters in batches, without the SDK's per-span machinery: no
// tracer.Start, no recording span, no span processor queue. A lifecycle
// span is a deterministic record, known whole when its event is folded (IDs
// from DeriveSpanID and DeriveTraceID, times from the event), so there is
// nothing for a live span to do but cost allocations.
//
// The records are the spans RecordTransition and RecordRejection make
// through the SDK, field for field (TestLifecycleSpansMatchTheSDK): the same
// name, IDs, parent, kind, times, attributes, events, resource and
// instrumentation scope. They are sampled by the provider's own sampler
// (OTEL_TRACES_SAMPLER): a span the sampler drops is neither built nor
// exported. They are not subject to OTEL_SPAN_*_LIMIT: they have at most
// eight attributes and one event.
//
// Its methods are safe for concurrent use; a SpanBatch is not.
type LifecycleSpans struct {
	scope   instrumentation.Scope
	res     *resource.Resource
	sampler sdktrace.Sampler
	sinks   []sdktrace.SpanExporter
}

// LifecycleSpans returns the builder of lifecycle spans whose
// instrumentation scope is name (as for Tracer), exporting to the same
// exporters as t's TracerProvider (for NewForTest, its SpanRecorder).
func (t *Telemetry) LifecycleSpans(name string) *LifecycleSpans {
	return &LifecycleSpans{scope: instrumentation.Scope{Name: name}, res: t.resource, sampler: t.sampler, sinks: t.spanSinks}
}

// NewBatch returns an empty batch with room for n spans.
func (l *LifecycleSpans) NewBatch(n int) *SpanBatch {
	return &SpanBatch{l: l, records: make([]spanRecord, 0, n), attrs: make([]attribute.KeyValue, 0, n*spanAttrs),
		spans: make([]sdktrace.ReadOnlySpan, 0, n)}
}

// Export hands the spans of b to every exporter, at most 512 at a time, each
// call bounded by 30 seconds and by ctx, as the batch span processor does.
// It returns how many spans some exporter failed to take, and the
// exporters' errors joined. The exporters may keep the spans: b must not be
// used afterwards.
func (l *LifecycleSpans) Export(ctx context.Context, b *SpanBatch) (failed int, err error) {
	var errs []error
	for spans := b.spans; len(spans) > 0; {
		n := min(len(spans), maxExportBatch)
		ok := true
		for _, exp := range l.sinks {
			ectx, cancel := context.WithTimeout(ctx, exportTimeout)
			if err := exp.ExportSpans(ectx, spans[:n:n]); err != nil {
				errs, ok = append(errs, err), false
			}
			cancel()
		}
		if !ok {
			failed += n
		}
		spans = spans[n:]
	}
	b.spans = nil
	return failed, errors.Join(errs...)
}

// TransitionSpanContext returns the span context of the session.transition
// span AddTransition(ctx, &Transition{SessionID: sessionID, Version:
// version}) would build: with the same parent, IDs and sampling decision.
// It builds nothing; a flush span links to it.
func (l *LifecycleSpans) TransitionSpanContext(ctx context.Context, sessionID string, version uint64) trace.SpanContext {
	sc, _, _ := l.start(ctx, SpanTransition, sessionID, "", version)
	return sc
}

// start decides a lifecycle span's identity as RecordTransition and
// RecordRejection do through the SDK (tracer.newSpan): the parent is the
// span context in ctx; the trace is the parent's, else the session's own
// (DeriveTraceID); the span ID is derived from the session (plus suffix)
// and version; the sampler decides, and the flags and trace state follow
// its result. It reports whether the span is to be exported (sampled).
func (l *LifecycleSpans) start(ctx context.Context, name, sessionID, suffix string, version uint64) (trace.SpanContext, sdktrace.SamplingResult, bool) {
	psc := trace.SpanContextFromContext(ctx)
	tid := psc.TraceID()
	if !tid.IsValid() {
		tid = DeriveTraceID(sessionID)
	}
	res := l.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name,
		Kind: trace.SpanKindInternal})
	sampled := res.Decision == sdktrace.RecordAndSample
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if sampled {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: deriveSpanID(sessionID, suffix, version),
		TraceFlags: flags, TraceState: res.Tracestate})
	return sc, res, sampled
}

// spanAttrs is the most attributes a lifecycle span has, its events'
// included: a rejection has seven and two on its event.
const spanAttrs = 9

// SpanBatch is lifecycle spans being built for one export. Its records
// share a few large allocations instead of a dozen small ones per span.
// It is not safe for concurrent use.
type SpanBatch struct {
	l       *LifecycleSpans
	records []spanRecord
	attrs   []attribute.KeyValue
	events  []sdktrace.Event
	spans   []sdktrace.ReadOnlySpan
}

// Len is the number of spans in b.
func (b *SpanBatch) Len() int { return len(b.spans) }

// Spans returns the spans of b, for tests; they must not be modified.
func (b *SpanBatch) Spans() []sdktrace.ReadOnlySpan { return b.spans }

// AddTransition adds the session.transition span of tr, the one
// RecordTransition(ctx, tracer, *tr) would emit, and returns its span
// context. A span the sampler drops is not added; its span context says so
// (IsSampled is false).
func (b *SpanBatch) AddTransition(ctx context.Context, tr *Transition) trace.SpanContext {
	sc, res, sampled := b.l.start(ctx, SpanTransition, tr.SessionID, "", tr.Version)
	if !sampled {
		return sc
	}
	first := len(b.attrs)
	b.attrs = append(b.attrs, res.Attributes...)
	b.attrs = append(b.attrs,
		AttrSessionID.String(tr.SessionID), AttrStateTo.String(tr.To), AttrEventType.String(tr.EventType),
		AttrEventID.String(tr.EventID), AttrCorrelationID.String(tr.CorrelationID),
		AttrPartition.Int(int(tr.Partition)), AttrOffset.Int64(tr.Offset))
	if tr.From != "" {
		b.attrs = append(b.attrs, AttrStateFrom.String(tr.From))
	}
	b.attrs = tr.failureAttrs(b.attrs)
	b.add(spanRecord{name: SpanTransition, sc: sc, parent: trace.SpanContextFromContext(ctx),
		start: tr.OccurredAt.Add(-tr.InFrom), end: tr.OccurredAt, attrs: b.attrs[first:len(b.attrs):len(b.attrs)]})
	return sc
}

// AddRejection adds the session.event span of r, the one RecordRejection(ctx,
// tracer, *r) would emit, unless the sampler drops it.
func (b *SpanBatch) AddRejection(ctx context.Context, r *Rejection) {
	sc, res, sampled := b.l.start(ctx, SpanRejected, r.SessionID, rejectedSuffix, r.Seen)
	if !sampled {
		return
	}
	first := len(b.attrs)
	b.attrs = append(b.attrs, res.Attributes...)
	b.attrs = append(b.attrs,
		AttrSessionID.String(r.SessionID), AttrEventType.String(r.EventType), AttrEventID.String(r.EventID),
		AttrCorrelationID.String(r.CorrelationID), AttrSessionState.String(r.State),
		AttrPartition.Int(int(r.Partition)), AttrOffset.Int64(r.Offset))
	attrs := b.attrs[first:len(b.attrs):len(b.attrs)]
	first = len(b.attrs)
	b.attrs = append(b.attrs, AttrReason.String(r.Reason), AttrSessionState.String(r.State))
	b.events = append(b.events, sdktrace.Event{Name: EventRejected, Time: r.OccurredAt,
		Attributes: b.attrs[first:len(b.attrs):len(b.attrs)]})
	b.add(spanRecord{name: SpanRejected, sc: sc, parent: trace.SpanContextFromContext(ctx),
		start: r.OccurredAt, end: r.OccurredAt, attrs: attrs, events: b.events[len(b.events)-1 : len(b.events) : len(b.events)]})
}

// rejectedSuffix makes a rejection's span ID differ from the transition
// spans of the same session: DeriveSpanID(session+rejectedSuffix, seen).
const rejectedSuffix = "\x00rejected"

// add appends a record. Growing the slabs leaves records already added in
// the old arrays, which stay valid: records are never changed once added.
func (b *SpanBatch) add(r spanRecord) {
	r.l = b.l
	// The SDK times a span that has none (a zero occurredAt) at its start
	// and end.
	if r.start.IsZero() || r.end.IsZero() {
		now := time.Now()
		if r.start.IsZero() {
			r.start = now
		}
		if r.end.IsZero() {
			r.end = now
		}
	}
	b.records = append(b.records, r)
	b.spans = append(b.spans, &b.records[len(b.records)-1])
}

// spanRecord is a finished lifecycle span, read by exporters through
// sdktrace.ReadOnlySpan. That interface has an unexported method so that
// only the SDK implements it; embedding it (nil) provides that method, as
// the SDK's own tracetest.SpanStub snapshots do. Every exported method is
// implemented here (TestSpanRecordImplementsReadOnlySpan), so the nil
// embedded value is never called.
type spanRecord struct {
	sdktrace.ReadOnlySpan

	l          *LifecycleSpans
	name       string
	sc, parent trace.SpanContext
	start, end time.Time
	attrs      []attribute.KeyValue
	events     []sdktrace.Event
}

func (r *spanRecord) Name() string                     { return r.name }
func (r *spanRecord) SpanContext() trace.SpanContext   { return r.sc }
func (r *spanRecord) Parent() trace.SpanContext        { return r.parent }
func (r *spanRecord) SpanKind() trace.SpanKind         { return trace.SpanKindInternal }
func (r *spanRecord) StartTime() time.Time             { return r.start }
func (r *spanRecord) EndTime() time.Time               { return r.end }
func (r *spanRecord) Attributes() []attribute.KeyValue { return r.attrs }
func (r *spanRecord) Links() []sdktrace.Link           { return nil }
func (r *spanRecord) Events() []sdktrace.Event         { return r.events }
func (r *spanRecord) Status() sdktrace.Status          { return sdktrace.Status{} }
func (r *spanRecord) DroppedAttributes() int           { return 0 }
func (r *spanRecord) DroppedLinks() int                { return 0 }
func (r *spanRecord) DroppedEvents() int               { return 0 }
func (r *spanRecord) ChildSpanCount() int              { return 0 }
func (r *spanRecord) Resource() *resource.Resource     { return r.l.res }
func (r *spanRecord) InstrumentationScope() instrumentation.Scope {
	return r.l.scope
}

// InstrumentationLibrary is the deprecated name of InstrumentationScope,
// still part of sdktrace.ReadOnlySpan.
//
//lint:ignore SA1019 the interface requires it
func (r *spanRecord) InstrumentationLibrary() instrumentation.Library {
	return r.l.scope
}
