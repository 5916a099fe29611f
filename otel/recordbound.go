package correxotel

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Bounds of the trace context a Kafka record carries. An HTTP request may
// bring up to 8 KB of baggage and as much tracestate, and a request of 1000
// events would repeat them in every record: the topic, the projector and
// the change feed would carry megabytes of a client's headers. Records
// therefore carry the traceparent whole, and baggage and tracestate only up
// to these sizes (the encoded header values).
const (
	// MaxRecordBaggageBytes bounds a record's baggage header. Members are
	// kept whole, in key order, while they fit; members that do not fit are
	// dropped, never cut.
	MaxRecordBaggageBytes = 512
	// MaxRecordTraceStateBytes bounds a record's tracestate header, which
	// is trimmed as W3C Trace Context advises: entries over 128 bytes go
	// first, then entries from the end of the list.
	MaxRecordTraceStateBytes = 512
)

// recordPropagator injects what inner injects, with the baggage and
// tracestate bounded as above. Extraction is inner's: a record written by
// another producer is read as it is, and bounded again if it is forwarded.
type recordPropagator struct{ inner propagation.TextMapPropagator }

func (p recordPropagator) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	p.inner.Inject(boundTraceContext(ctx), c)
}

func (p recordPropagator) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return p.inner.Extract(ctx, c)
}

func (p recordPropagator) Fields() []string { return p.inner.Fields() }

// boundTraceContext returns ctx with its baggage and its span context's
// tracestate bounded for a record. The result serves injection only: a span
// in ctx is replaced by its span context when the tracestate is trimmed.
func boundTraceContext(ctx context.Context) context.Context {
	if b := baggage.FromContext(ctx); len(b.String()) > MaxRecordBaggageBytes {
		ctx = baggage.ContextWithBaggage(ctx, boundBaggage(b))
	}
	sc := trace.SpanContextFromContext(ctx)
	if ts := sc.TraceState(); len(ts.String()) > MaxRecordTraceStateBytes {
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(boundTraceState(ts)))
	}
	return ctx
}

// boundBaggage keeps whole members of b, in key order, while the encoded
// baggage stays within MaxRecordBaggageBytes.
func boundBaggage(b baggage.Baggage) baggage.Baggage {
	members := b.Members()
	slices.SortFunc(members, func(x, y baggage.Member) int { return strings.Compare(x.Key(), y.Key()) })
	var kept []baggage.Member
	size := 0
	for _, m := range members {
		n := len(m.String())
		if size > 0 {
			n++ // the comma
		}
		if size+n > MaxRecordBaggageBytes {
			continue
		}
		kept = append(kept, m)
		size += n
	}
	out, err := baggage.New(kept...)
	if err != nil {
		return baggage.Baggage{} // unreachable: the members came from a valid baggage
	}
	return out
}

// boundTraceState trims ts to MaxRecordTraceStateBytes as W3C Trace Context
// (section 3.3.1.5) advises: entries longer than 128 bytes are removed
// first, then entries from the end.
func boundTraceState(ts trace.TraceState) trace.TraceState {
	type entry struct{ key, value string }
	var entries []entry
	ts.Walk(func(k, v string) bool {
		entries = append(entries, entry{k, v})
		return true
	})
	for _, e := range entries {
		if len(ts.String()) <= MaxRecordTraceStateBytes {
			return ts
		}
		if len(e.key)+1+len(e.value) > 128 {
			ts = ts.Delete(e.key)
		}
	}
	for i := len(entries) - 1; i >= 0 && len(ts.String()) > MaxRecordTraceStateBytes; i-- {
		ts = ts.Delete(entries[i].key)
	}
	return ts
}
