// Package service holds the runtime the three services share: logging, the
// HTTP server with /healthz, /readyz, /metrics and, for a service with an
// API, /openapi.json (package api's description), instrumentation hooks, and
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

	openapi "github.com/correx/sessions/api"
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

// Endpoint is what a service serves over HTTP.
type Endpoint struct {
	Addr string // listen address, unless the runtime has a Listener
	// API is served under /v1/, and the description of the ingest and
	// query APIs (package api) at /openapi.json; nil for none (the
	// projector). The service puts its own authentication in front of it.
	API http.Handler
	// UI is served under /ui/ without a token (the query service's
	// console: static files that read the API with the user's token); nil
	// for none. A client certificate, when required, is required here too.
	UI http.Handler
	// Ready answers /readyz.
	Ready func(context.Context) error
	// Degraded, when set, lists what works less than fully while the
	// service is ready (a secondary store unreachable); /readyz shows it
	// beside "ready" (httpx.Health).
	Degraded func() []string
	// TLS serves HTTPS when set. With a client CA, /v1/ requires a
	// verified client certificate, while /healthz, /readyz and /metrics
	// stay open to clients without one (kubelet probes, Prometheus).
	TLS httpx.TLSConfig
}

// HTTP serves the endpoint's API (under /v1/) with the health and metrics
// endpoints until ctx is done, then drains: /readyz turns 503, in-flight
// requests finish. /healthz, /readyz, /metrics and /openapi.json never
// require a token: probes and scrapers must reach them, so they are to be
// kept off the public network (docs/security.md).
func (rt Runtime) HTTP(ctx context.Context, ep Endpoint) error {
	var serverTLS *httpx.ServerTLS
	if ep.TLS.Enabled() {
		var err error
		if serverTLS, err = ep.TLS.Load(); err != nil {
			return err
		}
	}
	api := ep.API
	health := &httpx.Health{Ready: ep.Ready, Degraded: ep.Degraded}
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
		if serverTLS != nil && serverTLS.RequireClientCert() {
			api = httpx.RequireVerifiedClient(api)
		}
		if rt.WrapHTTP != nil {
			api = rt.WrapHTTP("api", api)
		}
		mux.Handle("/v1/", api)
		// The description of the API, open as /healthz is: it holds
		// nothing a token guards.
		mux.Handle("GET "+openapi.Path, openapi.Handler())
	}
	if ui := ep.UI; ui != nil {
		if serverTLS != nil && serverTLS.RequireClientCert() {
			ui = httpx.RequireVerifiedClient(ui)
		}
		if rt.WrapHTTP != nil {
			ui = rt.WrapHTTP("ui", ui)
		}
		mux.Handle("/ui/", ui)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeEndpointNotFound, Status: http.StatusNotFound,
			Detail: "no endpoint " + r.URL.Path})
	})
	l := rt.Listener
	if l == nil {
		var err error
		if l, err = httpx.Listen(ep.Addr); err != nil {
			return err
		}
	}
	srv := httpx.NewServer(mux)
	// net/http reports panics, failed TLS handshakes and accept errors
	// through ErrorLog; they go to the service's log.
	srv.ErrorLog = slog.NewLogLogger(rt.Logger().Handler(), slog.LevelWarn)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	scheme := "http"
	if serverTLS != nil {
		scheme = "https"
		srv.TLSConfig = serverTLS.Config()
		serverTLS.Watch(sctx, rt.Logger())
	}
	rt.Logger().Info("listening", "addr", l.Addr().String(), "scheme", scheme,
		"clientCertificates", serverTLS != nil && serverTLS.RequireClientCert())
	if rt.Ready != nil {
		rt.Ready(l.Addr().String())
	}
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
