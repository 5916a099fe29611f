package correxotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of lifecycle spans (README, "Telemetry").
const (
	AttrSessionID     = attribute.Key("session.id")
	AttrStateFrom     = attribute.Key("session.state.from")
	AttrStateTo       = attribute.Key("session.state.to")
	AttrSessionState  = attribute.Key("session.state")
	AttrEventType     = attribute.Key("event.type")
	AttrEventID       = attribute.Key("event.id")
	AttrCorrelationID = attribute.Key("correlation.id")
	AttrReason        = attribute.Key("session.rejection.reason")
	// AttrFailureCategory and AttrFailureCode are set on the transition
	// to FAILED (docs/lifecycle.md, "Structured failures").
	AttrFailureCategory = attribute.Key("session.failure.category")
	AttrFailureCode     = attribute.Key("session.failure.code")
	AttrPartition       = attribute.Key("messaging.destination.partition.id")
	AttrOffset          = attribute.Key("messaging.kafka.offset")
)

// Span names of the lifecycle.
const (
	SpanTransition = "session.transition"
	SpanRejected   = "session.event"
	EventRejected  = "session.rejected"
)

// Transition describes one applied state change of a session.
type Transition struct {
	SessionID, CorrelationID string
	From, To                 string // From is "" for the creation
	EventType, EventID       string
	Version                  uint64 // the session's version after the event
	OccurredAt               time.Time
	// InFrom is how long the session was in From: the span starts when the
	// session entered From and ends at the event, so a session's transition
	// spans tile its life.
	InFrom    time.Duration
	Partition int32
	Offset    int64
	// FailureCategory and FailureCode are the failure's, for a transition
	// to FAILED ("" otherwise, and FailureCode "" when the failure named
	// no code).
	FailureCategory, FailureCode string
}

// failureAttrs appends the failure attributes of tr, if any.
func (tr *Transition) failureAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	if tr.FailureCategory != "" {
		attrs = append(attrs, AttrFailureCategory.String(tr.FailureCategory))
	}
	if tr.FailureCode != "" {
		attrs = append(attrs, AttrFailureCode.String(tr.FailureCode))
	}
	return attrs
}

// RecordTransition emits the session.transition span of tr and returns its
// span context. The parent is the span in ctx (the producer's span carried
// in the record's headers), or, when ctx has none, a root in the session's
// own trace (DeriveTraceID). The span ID is DeriveSpanID(session, version)
// and the times come from the event, so emitting it again while replaying
// after a crash yields the same span, not a second one. LifecycleSpans
// builds the same span at a fraction of the cost, for many at once.
func RecordTransition(ctx context.Context, tracer trace.Tracer, tr Transition) trace.SpanContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = WithTraceID(ctx, DeriveTraceID(tr.SessionID))
	}
	ctx = WithSpanID(ctx, DeriveSpanID(tr.SessionID, tr.Version))
	attrs := []attribute.KeyValue{
		AttrSessionID.String(tr.SessionID), AttrStateTo.String(tr.To), AttrEventType.String(tr.EventType),
		AttrEventID.String(tr.EventID), AttrCorrelationID.String(tr.CorrelationID),
		AttrPartition.Int(int(tr.Partition)), AttrOffset.Int64(tr.Offset),
	}
	if tr.From != "" {
		attrs = append(attrs, AttrStateFrom.String(tr.From))
	}
	attrs = tr.failureAttrs(attrs)
	_, span := tracer.Start(ctx, SpanTransition, trace.WithTimestamp(tr.OccurredAt.Add(-tr.InFrom)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	sc := span.SpanContext()
	span.End(trace.WithTimestamp(tr.OccurredAt))
	return sc
}

// Rejection describes an event the lifecycle did not allow.
type Rejection struct {
	SessionID, CorrelationID string
	EventType, EventID       string
	State, Reason            string
	// Seen is the session's count of events seen after this one: with the
	// session id it names the event, for a deterministic span ID.
	Seen       uint64
	OccurredAt time.Time
	Partition  int32
	Offset     int64
}

// RecordRejection emits a zero-length session.event span for a rejected
// event, in the trace of the request that sent it, with a session.rejected
// span event carrying the reason. Its span ID is derived from the session
// and Seen, so a replay re-emits the same span.
func RecordRejection(ctx context.Context, tracer trace.Tracer, r Rejection) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = WithTraceID(ctx, DeriveTraceID(r.SessionID))
	}
	ctx = WithSpanID(ctx, DeriveSpanID(r.SessionID+"\x00rejected", r.Seen))
	_, span := tracer.Start(ctx, SpanRejected, trace.WithTimestamp(r.OccurredAt), trace.WithAttributes(
		AttrSessionID.String(r.SessionID), AttrEventType.String(r.EventType), AttrEventID.String(r.EventID),
		AttrCorrelationID.String(r.CorrelationID), AttrSessionState.String(r.State),
		AttrPartition.Int(int(r.Partition)), AttrOffset.Int64(r.Offset)))
	span.AddEvent(EventRejected, trace.WithTimestamp(r.OccurredAt), trace.WithAttributes(
		AttrReason.String(r.Reason), AttrSessionState.String(r.State)))
	span.End(trace.WithTimestamp(r.OccurredAt))
}
