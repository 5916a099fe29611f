package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Health serves /healthz (the process is up) and /readyz (its dependencies
// answer). Ready is called with a short deadline on every /readyz request.
// Degraded, when set, lists what works less than fully without making the
// service unready (an archive that cannot be reached): /readyz answers 200
// {"status": "ready", "degraded": [...]} then, so that a load balancer
// keeps the service while operators see what is wrong.
type Health struct {
	Ready    func(ctx context.Context) error
	Degraded func() []string
	// draining is set during shutdown so load balancers stop sending traffic
	// before the listener closes.
	draining atomic.Bool
}

// Register adds /healthz and /readyz to mux.
func (h *Health) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if h.draining.Load() {
			Unavailable(w, time.Second, "shutting down", nil)
			return
		}
		if h.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := h.Ready(ctx); err != nil {
				Unavailable(w, time.Second, "not ready: "+err.Error(), nil)
				return
			}
		}
		if h.Degraded != nil {
			if d := h.Degraded(); len(d) > 0 {
				WriteJSON(w, http.StatusOK, map[string]any{"status": "ready", "degraded": d})
				return
			}
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
}

// Drain marks the service as shutting down: /readyz answers 503 from now on.
func (h *Health) Drain() { h.draining.Store(true) }

// NewServer returns an http.Server with the timeouts a public service needs:
// slow or idle clients cannot hold connections forever.
func NewServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// Listen opens a TCP listener on addr (":0" picks a free port).
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l, nil
}

// Serve serves srv on l until ctx is done, then shuts down gracefully within
// grace: in-flight requests finish, new connections are refused. A server
// with a TLSConfig serves HTTPS (HTTP/2 included).
func Serve(ctx context.Context, srv *http.Server, l net.Listener, grace time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(l, "", "")
			return
		}
		errc <- srv.Serve(l)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
