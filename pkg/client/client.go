package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
)

// Client talks to the ingest and query services. It is safe for concurrent
// use by many goroutines; make one per process and share it.
type Client struct {
	ingest *url.URL // .../v1/events
	query  *url.URL // base, without a trailing slash
	http   *http.Client
	token  string
	retry  retryPolicy
	ua     string
}

type settings struct {
	ingestURL, queryURL string
	httpClient          *http.Client
	tlsConfig           *tls.Config
	token               string
	retry               retryPolicy
	tracing             bool
	propagators         propagation.TextMapPropagator
	userAgent           string
}

type retryPolicy struct {
	attempts   int
	min, max   time.Duration
	reqTimeout time.Duration
}

// IngestURL is the ingest service's base URL (default
// "http://127.0.0.1:8081"); events go to its /v1/events.
func IngestURL(u string) ClientOpt { return clientOpt(func(s *settings) { s.ingestURL = u }) }

// QueryURL is the query service's base URL (default "http://127.0.0.1:8082").
func QueryURL(u string) ClientOpt { return clientOpt(func(s *settings) { s.queryURL = u }) }

// Token is the bearer token sent with every request (default none: the
// services run open in devstack). It is sent only in the Authorization
// header. New refuses a token with a control character (a line ending
// read from a file with it): no header can carry one.
func Token(t string) ClientOpt { return clientOpt(func(s *settings) { s.token = t }) }

// HTTPClient is the HTTP client to use (default: a client with
// http.DefaultTransport's settings and no overall timeout; each request is
// bounded by its context and RequestTimeout). Its Transport is wrapped with
// otelhttp unless WithoutTracing is given; the client passed in is not
// modified.
func HTTPClient(c *http.Client) ClientOpt { return clientOpt(func(s *settings) { s.httpClient = c }) }

// TLSConfig sets the TLS configuration of the default transport: a custom CA
// (RootCAs) for the services' certificates, and Certificates for mutual TLS
// (default: the system roots, no client certificate). It cannot be combined
// with HTTPClient; configure that client's transport instead.
func TLSConfig(c *tls.Config) ClientOpt { return clientOpt(func(s *settings) { s.tlsConfig = c }) }

// Retry sets how a request is retried after a 429, 502, 503, 504 or a
// transport error (a dropped connection, a timed-out attempt): at most
// attempts tries in all (default 10), waiting an exponential backoff from
// minBackoff (default 100ms) doubling up to maxBackoff (default 5s), with
// equal jitter (a uniform wait in [backoff/2, backoff]), and never less than
// the answer's Retry-After. attempts of 1 disables retries.
//
// A wrong URL fails fast: a host name that does not resolve (DNS "no such
// host"), a certificate that does not verify and a server that does not
// speak TLS are not retried, and a refused connection (nothing listens on
// the port, or a service restarts) is tried at most 3 times in all, except
// by a watch whose stream was established (see Watch).
func Retry(attempts int, minBackoff, maxBackoff time.Duration) ClientOpt {
	return clientOpt(func(s *settings) {
		s.retry.attempts, s.retry.min, s.retry.max = attempts, minBackoff, maxBackoff
	})
}

// RequestTimeout bounds one HTTP attempt (default 30s); a waiting read adds
// its wait to it. The caller's context bounds the whole call, retries
// included.
func RequestTimeout(d time.Duration) ClientOpt {
	return clientOpt(func(s *settings) { s.retry.reqTimeout = d })
}

// WithoutTracing leaves the transport unwrapped (default: wrapped with
// otelhttp, so that each request is a client span of the global
// TracerProvider and carries the caller's trace context, see Propagators).
func WithoutTracing() ClientOpt { return clientOpt(func(s *settings) { s.tracing = false }) }

// Propagators sets how the trace context is written into each request's
// headers (default: W3C traceparent and baggage, which the services read,
// whatever the process's global propagator is).
func Propagators(p propagation.TextMapPropagator) ClientOpt {
	return clientOpt(func(s *settings) { s.propagators = p })
}

// UserAgent sets the User-Agent header (default "correx-sessions-go").
func UserAgent(ua string) ClientOpt { return clientOpt(func(s *settings) { s.userAgent = ua }) }

// New returns a Client. It does no I/O; errors name every bad option at once.
func New(opts ...ClientOpt) (*Client, error) {
	s := settings{
		ingestURL:   "http://127.0.0.1:8081",
		queryURL:    "http://127.0.0.1:8082",
		retry:       retryPolicy{attempts: 10, min: 100 * time.Millisecond, max: 5 * time.Second, reqTimeout: 30 * time.Second},
		tracing:     true,
		propagators: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		userAgent:   "correx-sessions-go",
	}
	for _, o := range opts {
		o.applyClient(&s)
	}
	var errs []error
	ingest, err := baseURL("IngestURL", s.ingestURL)
	if err != nil {
		errs = append(errs, err)
	}
	query, err := baseURL("QueryURL", s.queryURL)
	if err != nil {
		errs = append(errs, err)
	}
	if s.retry.attempts < 1 {
		errs = append(errs, fmt.Errorf("Retry: attempts must be at least 1, got %d", s.retry.attempts))
	}
	if s.retry.min <= 0 || s.retry.max < s.retry.min {
		errs = append(errs, fmt.Errorf("Retry: need 0 < minBackoff <= maxBackoff, got %v and %v", s.retry.min, s.retry.max))
	}
	if s.retry.reqTimeout <= 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout must be positive, got %v", s.retry.reqTimeout))
	}
	if err := headerValueError("Token", s.token); err != nil {
		errs = append(errs, err)
	}
	if err := headerValueError("UserAgent", s.userAgent); err != nil {
		errs = append(errs, err)
	}
	if s.httpClient != nil && s.tlsConfig != nil {
		errs = append(errs, errors.New("TLSConfig and HTTPClient together: set the TLS configuration on the HTTPClient's transport"))
	}
	if len(errs) > 0 {
		return nil, oneLine(errs)
	}
	hc := s.httpClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Many goroutines share one client against two hosts: keep enough
		// idle connections that a burst does not dial again.
		t.MaxIdleConnsPerHost = 256
		if s.tlsConfig != nil {
			t.TLSClientConfig = s.tlsConfig.Clone()
		}
		hc = &http.Client{Transport: t}
	} else {
		c := *hc
		hc = &c
	}
	if s.tracing {
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc.Transport = otelhttp.NewTransport(base, otelhttp.WithPropagators(s.propagators))
	}
	ingest = ingest.JoinPath("v1", "events")
	return &Client{ingest: ingest, query: query, http: hc, token: s.token, retry: s.retry, ua: s.userAgent}, nil
}

// oneLine joins the problems of New into one error on one line, named by
// the package once: "client: IngestURL: ...; QueryURL: ...".
func oneLine(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("client: %s", strings.Join(msgs, "; "))
}

// baseURL reads a base URL option; its errors name the option and are
// joined by New.
func baseURL(opt, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if !strings.Contains(raw, "://") && raw != "" {
			return nil, fmt.Errorf("%s: want http(s)://host[:port], got %q (no scheme: http://%s?)", opt, raw, raw)
		}
		return nil, fmt.Errorf("%s: want http(s)://host[:port], got %q", opt, raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// newRequest builds a request with the client's headers.
func (c *Client) setHeaders(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.ua)
}
