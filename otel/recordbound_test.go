package correxotel

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// TestInjectRecordBounds: a record gets the traceparent whole, baggage
// members whole while they fit, and a tracestate trimmed the W3C way (long
// entries first, then from the end).
func TestInjectRecordBounds(t *testing.T) {
	tel, _, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	var entries []string
	for i := range 30 {
		v := strings.Repeat("s", 20)
		if i == 1 {
			v = strings.Repeat("L", 200) // over 128 bytes: removed first
		}
		entries = append(entries, fmt.Sprintf("v%02d=%s", i, v))
	}
	ts, err := trace.ParseTraceState(strings.Join(entries, ","))
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	var members []baggage.Member
	for i := range 12 {
		m, err := baggage.NewMember(fmt.Sprintf("m%02d", i), strings.Repeat("b", 100))
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	b, err := baggage.New(members...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), b)

	r := &kgo.Record{}
	InjectRecord(ctx, tel.Propagator, r)
	got := map[string]string{}
	for _, h := range r.Headers {
		got[h.Key] = string(h.Value)
	}
	if want := "00-01000000000000000000000000000000-0200000000000000-01"; got["traceparent"] != want {
		t.Errorf("traceparent %q, want %q", got["traceparent"], want)
	}
	if n := len(got["tracestate"]); n > MaxRecordTraceStateBytes || n == 0 {
		t.Errorf("tracestate of %d bytes, want 1-%d", n, MaxRecordTraceStateBytes)
	}
	if !strings.HasPrefix(got["tracestate"], entries[0]+","+entries[2]+",") || strings.Contains(got["tracestate"], "LLL") {
		t.Errorf("tracestate %q: want the long entry gone and the list kept from its start", got["tracestate"])
	}
	kept, err := baggage.Parse(got["baggage"])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got["baggage"]); n > MaxRecordBaggageBytes || kept.Len() != 4 {
		t.Errorf("baggage of %d bytes with %d members, want at most %d bytes and 4 whole members", n, kept.Len(), MaxRecordBaggageBytes)
	}
	for i := range 4 {
		if v := kept.Member(fmt.Sprintf("m%02d", i)).Value(); v != strings.Repeat("b", 100) {
			t.Errorf("member m%02d = %q, want it whole", i, v)
		}
	}

	// Small values travel unchanged.
	small := baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(trace.TraceState{})), kept)
	r = &kgo.Record{}
	InjectRecord(small, tel.Propagator, r)
	again, _ := baggage.Parse(recordCarrier{r}.Get("baggage"))
	if again.Len() != kept.Len() {
		t.Errorf("baggage within the bound changed: %q, want %q", again, kept)
	}
	for _, m := range kept.Members() {
		if again.Member(m.Key()).Value() != m.Value() {
			t.Errorf("baggage within the bound changed: %q, want %q", again, kept)
		}
	}
}
