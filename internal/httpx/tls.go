package httpx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/correx/sessions/internal/config"
)

// TLSConfig are the HTTPS settings of a service. With CertFile and KeyFile
// the service serves HTTPS only; with ClientCAFile too, it asks clients for
// a certificate (tls.VerifyClientCertIfGiven): a client that offers one must
// offer one signed by that CA, and RequireClientCert turns away API requests
// of clients that offered none, while probes and Prometheus reach /healthz,
// /readyz and /metrics without one.
type TLSConfig struct {
	// CertFile is the PEM certificate chain (CORREX_TLS_CERT_FILE).
	// default: none (plain HTTP)
	CertFile string
	// KeyFile is its PEM key (CORREX_TLS_KEY_FILE).
	// default: none
	KeyFile string
	// ClientCAFile holds the PEM CAs of client certificates
	// (CORREX_TLS_CLIENT_CA_FILE).
	// default: none (no client certificates asked for)
	ClientCAFile string
}

// Bind registers the settings; each default is the zero value.
func (c *TLSConfig) Bind(b *config.Binder) {
	var d TLSConfig
	b.String(&c.CertFile, "tls-cert-file", "CORREX_TLS_CERT_FILE", d.CertFile, "PEM certificate to serve HTTPS with (empty: plain HTTP)")
	b.String(&c.KeyFile, "tls-key-file", "CORREX_TLS_KEY_FILE", d.KeyFile, "PEM key of the HTTPS certificate")
	b.String(&c.ClientCAFile, "tls-client-ca-file", "CORREX_TLS_CLIENT_CA_FILE", d.ClientCAFile, "PEM CA bundle of client certificates: /v1/ then requires a verified client certificate (mutual TLS)")
}

// Enabled reports whether HTTPS is configured.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate reports every problem; it loads the files.
func (c TLSConfig) Validate() []string {
	var out []string
	if (c.CertFile == "") != (c.KeyFile == "") {
		out = append(out, "CORREX_TLS_CERT_FILE and CORREX_TLS_KEY_FILE go together: set both or neither")
	}
	if c.ClientCAFile != "" && !c.Enabled() {
		out = append(out, "CORREX_TLS_CLIENT_CA_FILE needs HTTPS: set CORREX_TLS_CERT_FILE and CORREX_TLS_KEY_FILE")
	}
	if len(out) == 0 && c.Enabled() {
		if _, err := c.load(); err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

type tlsMaterial struct {
	cert    tls.Certificate
	clients *x509.CertPool
}

func (c TLSConfig) load() (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("CORREX_TLS_CERT_FILE/CORREX_TLS_KEY_FILE: %w", err)
	}
	m := &tlsMaterial{cert: cert}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("CORREX_TLS_CLIENT_CA_FILE: %w", err)
		}
		m.clients = x509.NewCertPool()
		if !m.clients.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CORREX_TLS_CLIENT_CA_FILE: %s holds no PEM certificate", c.ClientCAFile)
		}
	}
	return m, nil
}

// ServerTLS is the loaded HTTPS material of a server, replaced as a whole
// by Reload (renewed certificates, a new client CA) while the server runs.
// Safe for concurrent use.
type ServerTLS struct {
	files TLSConfig
	cur   atomic.Pointer[tlsMaterial]
}

// Load loads the files; use the result's Config as http.Server.TLSConfig.
func (c TLSConfig) Load() (*ServerTLS, error) {
	m, err := c.load()
	if err != nil {
		return nil, err
	}
	s := &ServerTLS{files: c}
	s.cur.Store(m)
	return s, nil
}

// Reload loads the files again; on error the previous material stays.
func (s *ServerTLS) Reload() error {
	m, err := s.files.load()
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Watch reloads on SIGHUP and when the files change, until ctx is done.
func (s *ServerTLS) Watch(ctx context.Context, log *slog.Logger) {
	files := []string{s.files.CertFile, s.files.KeyFile}
	if s.files.ClientCAFile != "" {
		files = append(files, s.files.ClientCAFile)
	}
	config.FileWatch{What: "TLS certificate", Files: files, Reload: s.Reload, Log: log}.Start(ctx)
}

// RequireClientCert reports whether API requests need a verified client
// certificate (a client CA is configured).
func (s *ServerTLS) RequireClientCert() bool { return s.files.ClientCAFile != "" }

// Config returns the server TLS configuration: TLS 1.2 or later, and the
// material current at each handshake.
func (s *ServerTLS) Config() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := s.cur.Load()
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
			Certificates: []tls.Certificate{m.cert}}
		if m.clients != nil {
			c.ClientCAs = m.clients
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
		return c, nil
	}
	return base
}

// RequireVerifiedClient lets through only requests over TLS whose client
// presented a certificate that verified against the client CA; others get a
// 403 problem. (With VerifyClientCertIfGiven, a certificate that does not
// verify fails the handshake, so a request without verified chains is one
// without a certificate.)
func RequireVerifiedClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			WriteProblem(w, Problem{Type: TypeForbidden, Status: http.StatusForbidden,
				Detail: "this endpoint requires a client certificate signed by the configured client CA (mutual TLS)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
