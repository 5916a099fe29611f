package otelredis_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/redistest"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/otel/otelredis"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
)

func TestInstrument(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	tel, rec, reader := correxotel.NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if err := otelredis.Instrument(rdb, tel); err != nil {
		t.Fatalf("Instrument: %v", err)
	}

	ctx, parent := tel.Tracer("correxotel.test").Start(context.Background(), "query")
	const secret = "snapshot-bytes-for-s-1"
	if err := rdb.Set(ctx, "session:s-1", secret, 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	parent.End()

	var set bool
	for _, s := range rec.Ended() {
		if s.Name() != "set" {
			continue
		}
		set = true
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("set span: parent %s kind %v, want parent %s kind client", s.Parent().SpanID(), s.SpanKind(), parent.SpanContext().SpanID())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), secret) {
				t.Errorf("set span attribute %s carries the command's value", kv.Key)
			}
		}
	}
	if !set {
		t.Fatalf("no span named set among %d ended spans", len(rec.Ended()))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	if names := metricNames(rm); !slices.Contains(names, "db.client.connections.usage") {
		t.Errorf("redisotel metrics missing db.client.connections.usage; have %q", names)
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
