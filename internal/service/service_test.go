package service_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/internal/tlstest"
)

// start serves ep in the background on a free port and returns its address.
func start(t *testing.T, ep service.Endpoint) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt := service.Runtime{Log: slog.New(slog.DiscardHandler), Listener: l}
	done := make(chan error, 1)
	go func() { done <- rt.HTTP(ctx, ep) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve: %v", err)
		}
	})
	return l.Addr().String()
}

var api = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "api") })

func TestServerLimits(t *testing.T) {
	srv := httpx.NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout != 5*time.Second || srv.ReadTimeout != 30*time.Second || srv.WriteTimeout != 60*time.Second ||
		srv.IdleTimeout != 120*time.Second || srv.MaxHeaderBytes != 64<<10 {
		t.Fatalf("limits changed: %+v", srv)
	}
	addr := start(t, service.Endpoint{API: api})

	// Headers well over 64 KiB (net/http allows some slack): 431, and the
	// server goes on.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/x", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("huge headers: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after huge headers: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestSlowHeadersAreCut: a client that never finishes its headers is
// disconnected after ReadHeaderTimeout (5 s).
func TestSlowHeadersAreCut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s header timeout")
	}
	addr := start(t, service.Endpoint{API: api})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn) // returns when the server closes
	if took := time.Since(began); err != nil || took < 4*time.Second || took > 9*time.Second {
		t.Fatalf("closed after %v (%v), want about 5s", took, err)
	}
}

func TestHTTPSAndClientCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "http")
	server := ca.Server(t, "service")
	addr := start(t, service.Endpoint{API: api, TLS: httpx.TLSConfig{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile}})
	get := func(c *http.Client, path string) (int, error) {
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	client := ca.Client(t, "app")
	withCert := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}}}}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if code, err := get(noCert, path); err != nil || code != 200 {
			t.Fatalf("%s without a client certificate: %d %v", path, code, err)
		}
	}
	if code, err := get(noCert, "/v1/x"); err != nil || code != 403 {
		t.Fatalf("/v1/ without a client certificate: %d %v", code, err)
	}
	if code, err := get(withCert, "/v1/x"); err != nil || code != 200 {
		t.Fatalf("/v1/ with a client certificate: %d %v", code, err)
	}
	// Plain HTTP gets net/http's 400 "Client sent an HTTP request to an
	// HTTPS server", never the endpoint.
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("plain HTTP on the HTTPS port: %d", resp.StatusCode)
		}
	}
	// HTTP/2 is negotiated.
	resp, err := withCert.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("protocol %s", resp.Proto)
	}
}

// TestCertificateReload: a new certificate on disk is served after SIGHUP
// or a change is noticed (here: the change, through Reload, which is what
// both triggers call).
func TestCertificateReload(t *testing.T) {
	ca := tlstest.NewCA(t, "reload")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	cfg := httpx.TLSConfig{CertFile: first.CertFile, KeyFile: first.KeyFile}
	st, err := cfg.Load()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", st.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	served := func() string {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "first" {
		t.Fatalf("serving %s", cn)
	}
	// A broken pair keeps the old one.
	broken := httpx.TLSConfig{CertFile: second.CertFile, KeyFile: first.KeyFile}
	if _, err := broken.Load(); err == nil {
		t.Fatal("a mismatched pair loaded")
	}
	copyFile(t, second.CertFile, first.CertFile)
	if err := st.Reload(); err == nil {
		t.Fatal("a certificate with the wrong key reloaded")
	}
	if cn := served(); cn != "first" {
		t.Fatalf("a failed reload changed the certificate to %s", cn)
	}
	copyFile(t, second.KeyFile, first.KeyFile)
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn := served(); cn != "second" {
		t.Fatalf("after reload serving %s", cn)
	}
}

func TestTLSConfigValidate(t *testing.T) {
	ca := tlstest.NewCA(t, "v")
	pair := ca.Server(t, "s")
	tests := []struct {
		cfg  httpx.TLSConfig
		want string
	}{
		{httpx.TLSConfig{}, ""},
		{httpx.TLSConfig{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: ca.CertFile}, ""},
		{httpx.TLSConfig{CertFile: pair.CertFile}, "go together"},
		{httpx.TLSConfig{ClientCAFile: ca.CertFile}, "needs HTTPS"},
		{httpx.TLSConfig{CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: pair.KeyFile}, "no PEM certificate"},
		{httpx.TLSConfig{CertFile: "/nonexistent", KeyFile: pair.KeyFile}, "CORREX_TLS_CERT_FILE"},
	}
	for _, tc := range tests {
		got := strings.Join(tc.cfg.Validate(), "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
