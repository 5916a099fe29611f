package projector

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// timeoutMetrics are the firer's instruments:
// correx.timeouts.fired by kind, correx.timeouts.superseded (stale
// timeouts the fold set aside), and correx.timeouts.lag, how long after its
// deadline each fired.
type timeoutMetrics struct {
	fired      [fsm.NumTimeoutKinds]atomic.Int64 // by fsm.TimeoutKind
	superseded atomic.Int64
	lag        metric.Float64Histogram
}

func (m *timeoutMetrics) init(meter metric.Meter) error {
	var err error
	m.lag, err = meter.Float64Histogram("correx.timeouts.lag", metric.WithUnit("s"),
		metric.WithDescription("How long after its deadline a timeout fired (produced)."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60))
	fired, e1 := meter.Int64ObservableCounter("correx.timeouts.fired", metric.WithUnit("{timeout}"),
		metric.WithDescription("TimeoutExpired events produced by the firer, by kind (a re-fire after a crash counts again)."))
	superseded, e2 := meter.Int64ObservableCounter("correx.timeouts.superseded", metric.WithUnit("{timeout}"),
		metric.WithDescription("TimeoutExpired events the fold superseded: armed at a version the session had moved past."))
	if err = errors.Join(err, e1, e2); err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for _, k := range fsm.TimeoutKinds() {
			obs.ObserveInt64(fired, m.fired[k].Load(), metric.WithAttributes(attribute.String("correx.timeout", k.String())))
		}
		obs.ObserveInt64(superseded, m.superseded.Load())
		return nil
	}, fired, superseded)
	return err
}

// TimeoutFired implements the firer's observer: it counts the firing,
// records its lag, and starts a session.timeout span in the session's
// lifecycle trace (correxotel.DeriveTraceID), linked to the span of the
// transition that armed the deadline; the record's headers carry it, so
// the transition it causes continues the same trace.
func (o *Telemetry) TimeoutFired(d projstore.ArmedDeadline, lag time.Duration, rec *kgo.Record) func(error) {
	if int(d.Kind) < len(o.timeouts.fired) {
		o.timeouts.fired[d.Kind].Add(1)
	}
	o.timeouts.lag.Record(ctxBackground, max(lag, 0).Seconds())
	tid := correxotel.DeriveTraceID(d.SessionID)
	armed := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: correxotel.DeriveSpanID(d.SessionID, d.Version),
		TraceFlags: trace.FlagsSampled})
	ctx, span := o.tracer.Start(correxotel.WithTraceID(ctxBackground, tid), "session.timeout", trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: armed}), trace.WithAttributes(
			correxotel.AttrSessionID.String(d.SessionID), attribute.String("correx.timeout", d.Kind.String()),
			attribute.Int64("correx.armed_version", int64(d.Version)), attribute.String("correx.deadline", d.Due().Format(time.RFC3339Nano)),
			attribute.Float64("correx.timeout.lag_seconds", max(lag, 0).Seconds())))
	correxotel.InjectRecord(ctx, o.prop, rec)
	return func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// count counts a superseded outcome of Folded.
func (m *timeoutMetrics) count(out fsm.Outcome) {
	if out.Result == fsm.Superseded {
		m.superseded.Add(1)
	}
}
