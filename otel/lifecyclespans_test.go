package correxotel

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// remoteParent is a producer's span context as a record's headers carry it.
func remoteParent(sampled bool) context.Context {
	ts, _ := trace.ParseTraceState("vendor=abc")
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 1}, SpanID: trace.SpanID{0xb7, 0xad, 1}, TraceFlags: flags, TraceState: ts, Remote: true}))
}

var (
	at           = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	testCreation = Transition{SessionID: "s-1", CorrelationID: "c-1", To: "CREATED", EventType: "SessionCreated",
		EventID: "0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f", Version: 1, OccurredAt: at, Partition: 3, Offset: 41}
	testTransition = Transition{SessionID: "s-1", CorrelationID: "c-1", From: "ACTIVE", To: "PAUSED", EventType: "SessionPaused",
		EventID: "0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e10", Version: 3, OccurredAt: at.Add(time.Hour), InFrom: 59 * time.Minute,
		Partition: 3, Offset: 43}
	testRejection = Rejection{SessionID: "s-1", CorrelationID: "c-1", EventType: "SessionResumed",
		EventID: "0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e11", State: "ACTIVE", Reason: "invalid_transition", Seen: 4,
		OccurredAt: at.Add(2 * time.Hour), Partition: 3, Offset: 44}
)

// stub is a span as a comparable value: attributes in key order, so that
// the order each path adds them in does not matter.
func stub(s sdktrace.ReadOnlySpan) tracetest.SpanStub {
	st := tracetest.SpanStubFromReadOnlySpan(s)
	sortAttrs := func(kvs []attribute.KeyValue) []attribute.KeyValue {
		kvs = slices.Clone(kvs)
		slices.SortFunc(kvs, func(a, b attribute.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
		return kvs
	}
	st.Attributes = sortAttrs(st.Attributes)
	for i := range st.Events {
		st.Events[i].Attributes = sortAttrs(st.Events[i].Attributes)
	}
	if len(st.Events) == 0 {
		st.Events = nil
	}
	if len(st.Links) == 0 {
		st.Links = nil
	}
	return st
}

// TestLifecycleSpansMatchTheSDK builds each lifecycle span twice, through
// the SDK (RecordTransition, RecordRejection) and as a record
// (LifecycleSpans), and requires the two to be the same span in every
// field an exporter reads.
func TestLifecycleSpansMatchTheSDK(t *testing.T) {
	cases := []struct {
		name string
		ctx  context.Context
		add  func(context.Context, *SpanBatch, trace.Tracer)
	}{
		{"creation, no parent", context.Background(), func(ctx context.Context, b *SpanBatch, tr trace.Tracer) {
			if b != nil {
				b.AddTransition(ctx, &testCreation)
			} else {
				RecordTransition(ctx, tr, testCreation)
			}
		}},
		{"transition, remote parent", remoteParent(true), func(ctx context.Context, b *SpanBatch, tr trace.Tracer) {
			if b != nil {
				b.AddTransition(ctx, &testTransition)
			} else {
				RecordTransition(ctx, tr, testTransition)
			}
		}},
		{"rejection, no parent", context.Background(), func(ctx context.Context, b *SpanBatch, tr trace.Tracer) {
			if b != nil {
				b.AddRejection(ctx, &testRejection)
			} else {
				RecordRejection(ctx, tr, testRejection)
			}
		}},
		{"rejection, remote parent", remoteParent(true), func(ctx context.Context, b *SpanBatch, tr trace.Tracer) {
			if b != nil {
				b.AddRejection(ctx, &testRejection)
			} else {
				RecordRejection(ctx, tr, testRejection)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel, rec, _ := NewForTest()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			tc.add(tc.ctx, nil, tel.Tracer("projector"))
			spans := tel.LifecycleSpans("projector")
			b := spans.NewBatch(1)
			tc.add(tc.ctx, b, nil)
			if _, err := spans.Export(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			ended := rec.Ended()
			if len(ended) != 2 {
				t.Fatalf("%d spans recorded, want 2", len(ended))
			}
			sdk, record := stub(ended[0]), stub(ended[1])
			if !reflect.DeepEqual(sdk, record) {
				t.Errorf("record differs from the SDK's span:\nSDK:    %+v\nrecord: %+v", sdk, record)
			}
		})
	}
}

// TestSpanRecordImplementsReadOnlySpan calls every method of
// sdktrace.ReadOnlySpan on a record: one the SDK adds in a later release,
// which spanRecord would only inherit from its nil embedded interface,
// panics here rather than in an exporter.
func TestSpanRecordImplementsReadOnlySpan(t *testing.T) {
	tel, _, _ := NewForTest()
	b := tel.LifecycleSpans("projector").NewBatch(1)
	b.AddRejection(context.Background(), &testRejection)
	span := reflect.ValueOf(b.Spans()[0])
	iface := reflect.TypeFor[sdktrace.ReadOnlySpan]()
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		if !m.IsExported() {
			continue
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("ReadOnlySpan.%s is not implemented by spanRecord: %v", m.Name, r)
				}
			}()
			span.MethodByName(m.Name).Call(nil)
		}()
	}
}

// TestLifecycleSpansSampling: lifecycle spans follow the provider's
// sampler, parent-based decisions included, and a dropped span is not
// exported.
func TestLifecycleSpansSampling(t *testing.T) {
	cases := []struct {
		sampler, arg string
		parent       string // "", "sampled" or "unsampled"
		want         bool
	}{
		{"", "", "", true},
		{"", "", "sampled", true},
		{"", "", "unsampled", false},
		{"always_on", "", "unsampled", true},
		{"always_off", "", "sampled", false},
		{"traceidratio", "0", "", false},
		{"traceidratio", "0", "sampled", false},
		{"traceidratio", "1", "unsampled", true},
		{"parentbased_traceidratio", "0", "", false},
		{"parentbased_traceidratio", "0", "sampled", true},
		{"parentbased_always_off", "", "", false},
		{"parentbased_always_off", "", "sampled", true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.sampler, tc.arg, tc.parent), func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			exp := &countingSink{}
			tel := setup(t, Config{ServiceName: "projector", Getenv: envMap(nil), SpanExporter: exp})
			ctx := context.Background()
			if tc.parent != "" {
				ctx = remoteParent(tc.parent == "sampled")
			}
			// What the SDK decides for a span started the same way.
			_, span := tel.Tracer("projector").Start(ctx, "probe")
			span.End()
			if got := span.SpanContext().IsSampled(); got != tc.want {
				t.Fatalf("SDK span sampled = %v, want %v", got, tc.want)
			}
			spans := tel.LifecycleSpans("projector")
			b := spans.NewBatch(2)
			sc := b.AddTransition(ctx, &testTransition)
			b.AddRejection(ctx, &testRejection)
			if sc.IsSampled() != tc.want {
				t.Errorf("transition span context sampled = %v, want %v", sc.IsSampled(), tc.want)
			}
			if got := spans.TransitionSpanContext(ctx, testTransition.SessionID, testTransition.Version); !got.Equal(sc) {
				t.Errorf("TransitionSpanContext = %v, AddTransition gave %v", got, sc)
			}
			if _, err := spans.Export(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.want {
				want = 2
			}
			if got := int(exp.n.Load()); got != want {
				t.Errorf("%d lifecycle spans exported, want %d", got, want)
			}
		})
	}
}

// TestLifecycleSpansExportInBatches: a batch larger than the batch span
// processor's export size reaches every exporter whole, in requests of at
// most maxExportBatch spans.
func TestLifecycleSpansExportInBatches(t *testing.T) {
	exp := &countingSink{}
	tel := setup(t, Config{ServiceName: "projector", Getenv: envMap(map[string]string{envTracesExporter: "console"}),
		ConsoleWriter: &strings.Builder{}, SpanExporter: exp})
	spans := tel.LifecycleSpans("projector")
	const n = 2*maxExportBatch + 7
	b := spans.NewBatch(10) // grows
	for v := range uint64(n) {
		tr := testTransition
		tr.Version = v + 1
		b.AddTransition(context.Background(), &tr)
	}
	if failed, err := spans.Export(context.Background(), b); err != nil || failed != 0 {
		t.Fatal(failed, err)
	}
	if got := exp.n.Load(); got != n {
		t.Errorf("%d spans exported, want %d", got, n)
	}
	if got := exp.calls.Load(); got != 3 {
		t.Errorf("%d export calls, want 3", got)
	}
	if got := exp.largest.Load(); got != maxExportBatch {
		t.Errorf("largest export %d spans, want %d", got, maxExportBatch)
	}
	if len(spans.sinks) != 2 {
		t.Errorf("%d exporters, want the console one and the custom one", len(spans.sinks))
	}
}

// countingSink counts the spans and calls it receives.
type countingSink struct{ n, calls, largest atomic.Int64 }

func (c *countingSink) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		if s.Name() == SpanTransition || s.Name() == SpanRejected {
			c.n.Add(1)
		}
	}
	c.calls.Add(1)
	if int64(len(spans)) > c.largest.Load() {
		c.largest.Store(int64(len(spans)))
	}
	return nil
}

func (c *countingSink) Shutdown(context.Context) error { return nil }

// TestParseSamplerMatchesTheSDK compares, for each value of the sampler
// variables, the decisions of parseSampler's sampler with those of the
// SDK's own, built from the same environment.
func TestParseSamplerMatchesTheSDK(t *testing.T) {
	values := [][2]string{
		{"", ""}, {"always_on", ""}, {" ALWAYS_OFF ", ""}, {"traceidratio", ""}, {"traceidratio", "0.5"},
		{"traceidratio", "-1"}, {"traceidratio", "2"}, {"traceidratio", "half"}, {"parentbased_always_on", ""},
		{"parentbased_always_off", ""}, {"parentbased_traceidratio", "0"}, {"parentbased_traceidratio", "0.5"},
		{"parentbased_traceidratio", "x"}, {"jaeger_remote", ""}, {"xray", "1"},
	}
	parents := map[string]context.Context{"none": context.Background(), "sampled": remoteParent(true), "unsampled": remoteParent(false)}
	// Trace IDs either side of a ratio of 0.5.
	traces := []trace.TraceID{{0, 0, 0, 0, 0, 0, 0, 0, 0x10}, {0, 0, 0, 0, 0, 0, 0, 0, 0xf0}}
	for _, v := range values {
		t.Run(v[0]+"/"+v[1], func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", v[0])
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", v[1])
			sdkTracer := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(idGenerator{})).Tracer("t")
			ours, _ := parseSampler(v[0], v[1])
			for pname, parent := range parents {
				for _, tid := range traces {
					_, span := sdkTracer.Start(WithTraceID(parent, tid), "s")
					span.End()
					got := ours.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: span.SpanContext().TraceID(), Name: "s"})
					if (got.Decision == sdktrace.RecordAndSample) != span.SpanContext().IsSampled() {
						t.Errorf("parent %s, trace %s: ours %v, SDK sampled=%v", pname, tid, got.Decision, span.SpanContext().IsSampled())
					}
				}
			}
		})
	}
}

// BenchmarkLifecycleSpans compares the cost per span of the two ways of
// making a transition span: through the SDK (RecordTransition, a batch span
// processor) and as records in batches of 1024 (LifecycleSpans), both to an
// exporter that only counts.
func BenchmarkLifecycleSpans(b *testing.B) {
	for _, path := range []string{"sdk", "records"} {
		b.Run(path, func(b *testing.B) {
			exp := &countingSink{}
			tel, err := Setup(context.Background(), Config{ServiceName: "bench", Getenv: envMap(nil), SpanExporter: exp})
			if err != nil {
				b.Fatal(err)
			}
			tracer, spans := tel.Tracer("projector"), tel.LifecycleSpans("projector")
			tr := testTransition
			batch := spans.NewBatch(1024)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tr.Version = uint64(i)
				if path == "sdk" {
					RecordTransition(context.Background(), tracer, tr)
					continue
				}
				batch.AddTransition(context.Background(), &tr)
				if batch.Len() == 1024 {
					_, _ = spans.Export(context.Background(), batch)
					batch = spans.NewBatch(1024)
				}
			}
			_, _ = spans.Export(context.Background(), batch)
			_ = tel.Shutdown(context.Background())
			b.ReportMetric(float64(exp.n.Load())/float64(b.N), "exported/op")
		})
	}
}
