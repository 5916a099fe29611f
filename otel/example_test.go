package correxotel_test

import (
	"context"
	"fmt"
	"net/http"

	correxotel "github.com/correx/sessions/otel"
)

// A binary builds its telemetry once, mounts /metrics, wraps its handlers,
// and flushes on the way out.
func ExampleSetup() {
	ctx := context.Background()
	tel, err := correxotel.Setup(ctx, correxotel.Config{
		ServiceName:    "query",
		ServiceVersion: "1.0.0",
		// Tests inject the environment; binaries leave Getenv nil.
		Getenv: func(string) string { return "" },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = tel.Shutdown(ctx) }()

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.MetricsHandler())
	mux.Handle("GET /sessions/{id}", correxotel.HTTPHandler(tel, "get session", http.NotFoundHandler()))
	fmt.Println("ready")
	// Output: ready
}

// The lifecycle span of the transition that brought a session to version 3
// always has the same span ID, so a replay re-emits the same span.
func ExampleDeriveSpanID() {
	tel, _, _ := correxotel.NewForTest()
	defer func() { _ = tel.Shutdown(context.Background()) }()

	ctx := correxotel.WithSpanID(context.Background(), correxotel.DeriveSpanID("s-1", 3))
	ctx = correxotel.WithTraceID(ctx, correxotel.DeriveTraceID("s-1"))
	_, span := tel.Tracer("projector").Start(ctx, "session.transition")
	span.End()
	fmt.Println(span.SpanContext().TraceID(), span.SpanContext().SpanID())
	// Output: 175838bb61ad3da8e278667a0d623ad4 6e0a03bf22723fc0
}
