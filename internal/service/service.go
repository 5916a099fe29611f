// Package service holds the runtime the three services share: logging, the
// HTTP server with /healthz, /readyz and /metrics, instrumentation hooks, and
// the effective-configuration banner each service prints at start.
package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/correx/sessions/internal/httpx"
	correxotel "github.com/correx/sessions/otel"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Runtime is what a service gets from its main: where to log, and the
// telemetry hooks (all optional).
type Runtime struct {
	Log *slog.Logger
	// Metrics serves /metrics (Prometheus text); nil serves an empty page.
	Metrics http.Handler
	// WrapHTTP instruments the API handler (tracing).
	WrapHTTP func(operation string, h http.Handler) http.Handler
	// KafkaOpts are added to every Kafka client.
	KafkaOpts []kgo.Opt
	// Telemetry, when set, provides tracing and metrics (see Telemetry).
	Telemetry *correxotel.Telemetry
	// Listener, when set, is used instead of listening on the configured
	// address (tests pass a listener on port 0).
	Listener net.Listener
	// Ready is called once the service is listening, with its address.
	Ready func(addr string)
}

// Logger returns the runtime's logger or the default.
func (rt Runtime) Logger() *slog.Logger {
	if rt.Log != nil {
		return rt.Log
	}
	return slog.Default()
}

// Banner writes the effective configuration, one setting per line.
func Banner(w io.Writer, name string, settings []string) {
	fmt.Fprintf(w, "%s: effective configuration\n  %s\n", name, strings.Join(settings, "\n  "))
}

// HTTP serves api (under /v1/) with the health and metrics endpoints until
// ctx is done, then drains: /readyz turns 503, in-flight requests finish.
func (rt Runtime) HTTP(ctx context.Context, addr string, api http.Handler, ready func(context.Context) error) error {
	health := &httpx.Health{Ready: ready}
	mux := http.NewServeMux()
	health.Register(mux)
	metrics := rt.Metrics
	if metrics == nil {
		metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		})
	}
	mux.Handle("GET /metrics", metrics)
	if api != nil {
		if rt.WrapHTTP != nil {
			api = rt.WrapHTTP("api", api)
		}
		mux.Handle("/v1/", api)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: http.StatusNotFound,
			Detail: "no endpoint " + r.URL.Path})
	})
	l := rt.Listener
	if l == nil {
		var err error
		if l, err = httpx.Listen(addr); err != nil {
			return err
		}
	}
	rt.Logger().Info("listening", "addr", l.Addr().String())
	if rt.Ready != nil {
		rt.Ready(l.Addr().String())
	}
	srv := httpx.NewServer(mux)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			health.Drain()
			cancel()
		case <-sctx.Done():
		}
	}()
	return httpx.Serve(sctx, srv, l, 10*time.Second, rt.Logger())
}
