package correxotel

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// memberContext returns ctx with a baggage member session.id=value.
func memberContext(t *testing.T, ctx context.Context, value string) context.Context {
	t.Helper()
	m, err := baggage.NewMember("session.id", value)
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, b)
}

func TestRecordPropagation(t *testing.T) {
	tel, _, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	sampledCtx, span := tel.Tracer("correxotel.test").Start(context.Background(), "ingest")
	defer span.End()
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3},
		SpanID:  trace.SpanID{4, 5, 6},
	})

	cases := []struct {
		name string
		ctx  context.Context
		want trace.SpanContext
	}{
		{"sampled", sampledCtx, span.SpanContext()},
		{"not sampled", trace.ContextWithSpanContext(context.Background(), unsampled), unsampled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &kgo.Record{Headers: []kgo.RecordHeader{
				{Key: "traceparent", Value: []byte("00-stale")},
				{Key: "content-type", Value: []byte("application/json")},
			}}
			InjectRecord(memberContext(t, tc.ctx, "s-1"), tel.Propagator, r)

			var keys []string
			for _, h := range r.Headers {
				keys = append(keys, h.Key)
			}
			if want := []string{"traceparent", "content-type", "baggage"}; !slices.Equal(keys, want) {
				t.Errorf("header keys = %q, want %q (Set replaces, never duplicates)", keys, want)
			}

			got := ExtractRecord(context.Background(), tel.Propagator, r)
			sc := trace.SpanContextFromContext(got)
			if sc.TraceID() != tc.want.TraceID() || sc.SpanID() != tc.want.SpanID() || sc.IsSampled() != tc.want.IsSampled() {
				t.Errorf("extracted %s/%s sampled=%v, want %s/%s sampled=%v",
					sc.TraceID(), sc.SpanID(), sc.IsSampled(), tc.want.TraceID(), tc.want.SpanID(), tc.want.IsSampled())
			}
			if !sc.IsRemote() {
				t.Errorf("extracted span context is not marked remote")
			}
			if v := baggage.FromContext(got).Member("session.id").Value(); v != "s-1" {
				t.Errorf("baggage session.id = %q, want s-1", v)
			}
		})
	}
}

func TestExtractRecordWithoutHeaders(t *testing.T) {
	tel, _, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ctx := ExtractRecord(context.Background(), tel.Propagator, &kgo.Record{})
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		t.Errorf("span context %v from a record without headers, want none", sc)
	}
}

// TestKafkaHooks produces and consumes through kfake with the kotel hooks:
// the consumer's record context must continue the producer's trace.
func TestKafkaHooks(t *testing.T) {
	const topic = "session-events"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	tel, rec, reader := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })

	newClient := func(opts ...kgo.Opt) *kgo.Client {
		opts = append(opts, kgo.SeedBrokers(cluster.ListenAddrs()...), KafkaHooks(tel, kotel.ClientID("test")))
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatalf("kgo client: %v", err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	producer := newClient()
	consumer := newClient(kgo.ConsumeTopics(topic))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ingestCtx, ingest := tel.Tracer("correxotel.test").Start(ctx, "ingest")
	if err := producer.ProduceSync(ingestCtx, &kgo.Record{Topic: topic, Value: []byte("{}")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	ingest.End()

	var got *kgo.Record
	for got == nil {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed: %v", err)
		}
		fetches.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		if recs := fetches.Records(); len(recs) > 0 {
			got = recs[0]
		}
	}
	// kgo unbuffers a record, so kotel ends its receive span, when a poll
	// returns it: the receive span is already recorded here.

	receive := trace.SpanContextFromContext(got.Context)
	if receive.TraceID() != ingest.SpanContext().TraceID() {
		t.Errorf("consumed record context in trace %s, want the producer's %s", receive.TraceID(), ingest.SpanContext().TraceID())
	}
	headerCtx := ExtractRecord(context.Background(), tel.Propagator, got)
	if sc := trace.SpanContextFromContext(headerCtx); sc.TraceID() != ingest.SpanContext().TraceID() {
		t.Errorf("ExtractRecord of a kotel-produced record: trace %s, want %s", sc.TraceID(), ingest.SpanContext().TraceID())
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	publish, ok := spans[topic+" publish"]
	if !ok {
		t.Fatalf("no publish span among %v", keys(spans))
	}
	if publish.Parent().SpanID() != ingest.SpanContext().SpanID() || publish.SpanKind() != trace.SpanKindProducer {
		t.Errorf("publish span: parent %s kind %v, want parent %s (ingest) kind producer",
			publish.Parent().SpanID(), publish.SpanKind(), ingest.SpanContext().SpanID())
	}
	if rcv, ok := spans[topic+" receive"]; !ok {
		t.Errorf("no receive span among %v", keys(spans))
	} else if rcv.Parent().SpanID() != publish.SpanContext().SpanID() {
		t.Errorf("receive span parent %s, want the publish span %s", rcv.Parent().SpanID(), publish.SpanContext().SpanID())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	if names := metricNames(rm); !slices.Contains(names, "messaging.kafka.connects.count") {
		t.Errorf("kotel metrics missing messaging.kafka.connects.count; have %q", names)
	}
}

func metricNames(rm metricdata.ResourceMetrics) []string {
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out = append(out, m.Name)
		}
	}
	return out
}

func TestHTTPHandlerContinuesTrace(t *testing.T) {
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	cases := []struct {
		name       string
		header     http.Header
		wantParent string // "" for a new root
	}{
		{"traceparent", http.Header{"Traceparent": {"00-" + traceID + "-" + spanID + "-01"}, "Baggage": {"session.id=s-1"}}, spanID},
		{"none", http.Header{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel, rec, reader := NewForTest()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			var seen trace.SpanContext
			var seenBaggage string
			h := HTTPHandler(tel, "post events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = trace.SpanContextFromContext(r.Context())
				seenBaggage = baggage.FromContext(r.Context()).Member("session.id").Value()
				w.WriteHeader(http.StatusAccepted)
			}))
			req := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
			req.Header = tc.header
			h.ServeHTTP(httptest.NewRecorder(), req)

			ended := rec.Ended()
			if len(ended) != 1 {
				t.Fatalf("recorded %d spans, want 1", len(ended))
			}
			s := ended[0]
			if s.SpanKind() != trace.SpanKindServer {
				t.Errorf("span kind %v, want server", s.SpanKind())
			}
			if s.SpanContext().SpanID() != seen.SpanID() {
				t.Errorf("handler saw span %s, recorded %s", seen.SpanID(), s.SpanContext().SpanID())
			}
			if tc.wantParent == "" {
				if s.Parent().IsValid() {
					t.Errorf("span has parent %s, want a new root", s.Parent().SpanID())
				}
				return
			}
			if got := s.Parent().SpanID().String(); got != tc.wantParent || !s.Parent().IsRemote() {
				t.Errorf("parent %s (remote %v), want remote %s", got, s.Parent().IsRemote(), tc.wantParent)
			}
			if got := s.SpanContext().TraceID().String(); got != traceID {
				t.Errorf("trace %s, want %s", got, traceID)
			}
			if seenBaggage != "s-1" {
				t.Errorf("handler saw baggage session.id=%q, want s-1", seenBaggage)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatalf("collect: %v", err)
			}
			if names := metricNames(rm); !slices.Contains(names, "http.server.request.duration") {
				t.Errorf("otelhttp metrics missing http.server.request.duration; have %q", names)
			}
		})
	}
}
