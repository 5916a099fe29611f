package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

// client sends requests with an optional bearer token.
type client struct {
	t    *testing.T
	http *http.Client
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (c client) do(method, url, token, contentType string, body []byte) answer {
	c.t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	hc := c.http
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// wantProblem checks an error answer: its status, problem+json with the
// same status inside, and a WWW-Authenticate challenge on 401.
func wantProblem(t *testing.T, what string, a answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, a.status, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: content type %q", what, ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(a.body, &p); err != nil || p.Status != status || p.Type == "" || p.Title == "" {
		t.Fatalf("%s: not a problem: %s", what, a.body)
	}
	if status == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer ") {
		t.Fatalf("%s: 401 without a Bearer challenge", what)
	}
}

// endOffsets sums the end offsets of the topic: what Kafka holds.
func endOffsets(t *testing.T, cl *kafka.Client, topic string) int64 {
	t.Helper()
	ends, err := kadm.NewClient(cl.Client).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func event(id, typ string) string {
	return fmt.Sprintf(`{"sessionId":%q,"type":%q,"payload":{}}`, id, typ)
}

func batch(events ...string) []byte {
	return []byte(`{"events":[` + strings.Join(events, ",") + `]}`)
}

// waitFolded polls the query service until the session is readable.
func waitFolded(t *testing.T, c client, queryURL, token, id string) {
	t.Helper()
	testwait.UntilSeen(t, id+" folded", 15*time.Second, func() (bool, string) {
		a := c.do(http.MethodGet, queryURL+"/v1/sessions/"+id, token, "", nil)
		return a.status == 200, fmt.Sprintf("%d %s", a.status, a.body)
	})
}

// TestEndpointAuthorization checks every endpoint with no token, a bad
// token, a token lacking the scope and another tenant's token: the status,
// the problem, nothing written to Kafka, and no difference between another
// tenant's session and a session that does not exist.
func TestEndpointAuthorization(t *testing.T) {
	f := securitytest.Write(t)
	srv := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: 3, Log: quietLog(),
		Auth:      &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"]},
		Projector: func(c *projector.Config) { c.FlushInterval = 20 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	kc, err := kafka.NewClient(kafka.Config{Brokers: st.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c := client{t: t}
	tok := f.Tokens
	bad := "cxs_" + strings.Repeat("A", 43)
	events := st.IngestURL + "/v1/events"
	const jsonCT = "application/json"

	// Seed: one session of another tenant, one of acme, one global.
	for _, ev := range []struct{ token, id string }{{tok["writer"], "globex:1"}, {tok["acme"], "acme:1"}, {tok["admin"], "plain-1"}} {
		if a := c.do(http.MethodPost, events, ev.token, jsonCT, []byte(event(ev.id, "SessionCreated"))); a.status != 202 {
			t.Fatalf("seed %s: %d %s", ev.id, a.status, a.body)
		}
	}
	for _, id := range []string{"globex:1", "acme:1", "plain-1"} {
		waitFolded(t, c, st.QueryURL, tok["admin"], id)
	}
	written := endOffsets(t, kc, st.Topic)
	if written != 3 {
		t.Fatalf("%d records after seeding, want 3", written)
	}

	t.Run("ingest", func(t *testing.T) {
		body := []byte(event("acme:2", "SessionCreated"))
		wantProblem(t, "no token", c.do(http.MethodPost, events, "", jsonCT, body), 401)
		wantProblem(t, "bad token", c.do(http.MethodPost, events, bad, jsonCT, body), 401)
		if a := c.do(http.MethodPost, events, bad, jsonCT, body); !strings.Contains(a.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Fatalf("bad token challenge %q", a.header.Get("WWW-Authenticate"))
		}
		wantProblem(t, "lacking events:write", c.do(http.MethodPost, events, tok["reader"], jsonCT, body), 403)
		wantProblem(t, "GET without a token", c.do(http.MethodGet, events, "", "", nil), 401)
		wantProblem(t, "GET with a token", c.do(http.MethodGet, events, tok["writer"], "", nil), 405)
		wantProblem(t, "unknown endpoint without a token", c.do(http.MethodGet, st.IngestURL+"/v1/nothing", "", "", nil), 401)
		wantProblem(t, "unknown endpoint", c.do(http.MethodGet, st.IngestURL+"/v1/nothing", tok["writer"], "", nil), 404)

		// A tenant writing outside its prefix: 403 naming the offending
		// indexes and fields, and nothing of the batch is written.
		a := c.do(http.MethodPost, events, tok["acme"], jsonCT, batch(
			event("acme:2", "SessionCreated"),
			event("globex:1", "SessionStarted"),
			`{"sessionId":"acme:3","type":"SessionCreated","payload":{"predecessorSessionId":"globex:1"}}`,
			event("acmex:1", "SessionCreated")))
		wantProblem(t, "outside the prefix", a, 403)
		var p struct {
			Errors []struct {
				Index int    `json:"index"`
				Field string `json:"field"`
			} `json:"errors"`
		}
		if err := json.Unmarshal(a.body, &p); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(p.Errors); got != "[{1 sessionId} {2 payload.predecessorSessionId} {3 sessionId}]" {
			t.Fatalf("offending events %s: %s", got, a.body)
		}
		if n := endOffsets(t, kc, st.Topic); n != written {
			t.Fatalf("%d records after refused requests, want %d", n, written)
		}
		if a := c.do(http.MethodPost, events, tok["acme"], jsonCT, body); a.status != 202 {
			t.Fatalf("acme writing its own session: %d %s", a.status, a.body)
		}
		written++
		if n := endOffsets(t, kc, st.Topic); n != written {
			t.Fatalf("%d records, want %d", n, written)
		}
	})

	t.Run("query", func(t *testing.T) {
		q := st.QueryURL
		for _, path := range []string{"/v1/sessions/acme:1", "/v1/sessions", "/v1/stats", "/v1/sessions/acme:1/replay", "/v1/archive", "/v1/nothing"} {
			wantProblem(t, path+" without a token", c.do(http.MethodGet, q+path, "", "", nil), 401)
			wantProblem(t, path+" with a bad token", c.do(http.MethodGet, q+path, bad, "", nil), 401)
		}
		wantProblem(t, "read with events:write only", c.do(http.MethodGet, q+"/v1/sessions/acme:1", tok["writer"], "", nil), 403)
		wantProblem(t, "list with events:write only", c.do(http.MethodGet, q+"/v1/sessions", tok["writer"], "", nil), 403)
		wantProblem(t, "stats with events:write only", c.do(http.MethodGet, q+"/v1/stats", tok["writer"], "", nil), 403)
		wantProblem(t, "archive with events:write only", c.do(http.MethodGet, q+"/v1/archive", tok["writer"], "", nil), 403)
		wantProblem(t, "archive without one configured", c.do(http.MethodGet, q+"/v1/archive", tok["reader"], "", nil), 503)
		wantProblem(t, "replay with sessions:read only", c.do(http.MethodGet, q+"/v1/sessions/acme:1/replay", tok["reader"], "", nil), 403)
		if a := c.do(http.MethodGet, q+"/v1/sessions/globex:1", tok["reader"], "", nil); a.status != 200 {
			t.Fatalf("reader: %d %s", a.status, a.body)
		}

		// Another tenant's session answers exactly what a session that
		// does not exist answers, for reads, waits and replays.
		for _, pair := range [][2]string{
			{"/v1/sessions/globex:1", "/v1/sessions/acme:nope"},
			{"/v1/sessions/globex:1?minPosition=0:0&wait=100ms", "/v1/sessions/acme:nope?minPosition=0:0&wait=100ms"},
		} {
			other := c.do(http.MethodGet, q+pair[0], tok["acme"], "", nil)
			missing := c.do(http.MethodGet, q+pair[1], tok["acme"], "", nil)
			if other.status != 404 || !bytes.Equal(other.body, missing.body) || other.header.Get("Content-Type") != missing.header.Get("Content-Type") {
				t.Fatalf("%s: %d %q, and %s: %d %q", pair[0], other.status, other.body, pair[1], missing.status, missing.body)
			}
			if strings.Contains(string(other.body), "globex") {
				t.Fatalf("the 404 names the session: %s", other.body)
			}
		}
		other := c.do(http.MethodGet, q+"/v1/sessions/globex:1/replay", tok["acme-admin"], "", nil)
		missing := c.do(http.MethodGet, q+"/v1/sessions/acme:nope/replay", tok["acme-admin"], "", nil)
		if other.status != 404 || !bytes.Equal(other.body, missing.body) {
			t.Fatalf("replay of another tenant's session: %d %q, of none: %d %q", other.status, other.body, missing.status, missing.body)
		}
		if a := c.do(http.MethodGet, q+"/v1/sessions/acme:1/replay", tok["acme-admin"], "", nil); a.status != 200 {
			t.Fatalf("acme-admin replaying its own session: %d %s", a.status, a.body)
		}

		// Listings and stats are restricted to the tenant.
		waitFolded(t, c, q, tok["acme"], "acme:2")
		var list struct {
			Sessions []struct {
				ID string `json:"sessionId"`
			} `json:"sessions"`
		}
		a := c.do(http.MethodGet, q+"/v1/sessions", tok["acme"], "", nil)
		if err := json.Unmarshal(a.body, &list); err != nil || a.status != 200 {
			t.Fatalf("list: %d %s", a.status, a.body)
		}
		if got := fmt.Sprint(list.Sessions); got != "[{acme:1} {acme:2}]" && got != "[{acme:2} {acme:1}]" {
			t.Fatalf("acme's listing: %s", got)
		}
		// A prefix filter narrows within the tenant and never widens it.
		for filter, want := range map[string]string{"prefix=acme:2": "[{acme:2}]", "prefix=globex:": "[]", "prefix=glo": "[]"} {
			list.Sessions = nil
			a := c.do(http.MethodGet, q+"/v1/sessions?"+filter, tok["acme"], "", nil)
			if err := json.Unmarshal(a.body, &list); err != nil || a.status != 200 || fmt.Sprint(list.Sessions) != want {
				t.Fatalf("acme's listing with %s: %d %s", filter, a.status, a.body)
			}
		}
		var stats struct {
			Prefix   string `json:"prefix"`
			Sessions struct {
				Total int `json:"total"`
			} `json:"sessions"`
			Partitions []json.RawMessage `json:"partitions"`
		}
		a = c.do(http.MethodGet, q+"/v1/stats", tok["acme-admin"], "", nil)
		if err := json.Unmarshal(a.body, &stats); err != nil || a.status != 200 {
			t.Fatalf("stats: %d %s", a.status, a.body)
		}
		if stats.Prefix != "acme:" || stats.Sessions.Total != 2 || stats.Partitions != nil || strings.Contains(string(a.body), "partitions") {
			t.Fatalf("acme's stats: %s", a.body)
		}
		a = c.do(http.MethodGet, q+"/v1/stats", tok["admin"], "", nil)
		if err := json.Unmarshal(a.body, &stats); err != nil || stats.Sessions.Total != 4 || len(stats.Partitions) == 0 {
			t.Fatalf("global stats: %s", a.body)
		}
		// sessions:read gives the counts (the console's board), never the
		// partitions' progress, which stays admin-only.
		for _, who := range []struct {
			token, prefix string
			total         int
		}{{"reader", "", 4}, {"acme", "acme:", 2}} {
			stats.Prefix, stats.Partitions = "", nil
			a = c.do(http.MethodGet, q+"/v1/stats", tok[who.token], "", nil)
			if err := json.Unmarshal(a.body, &stats); err != nil || a.status != 200 || stats.Prefix != who.prefix ||
				stats.Sessions.Total != who.total || strings.Contains(string(a.body), "partitions") {
				t.Fatalf("%s's stats: %d %s", who.token, a.status, a.body)
			}
		}
	})

	t.Run("probes and metrics stay open", func(t *testing.T) {
		for _, base := range []string{st.IngestURL, st.QueryURL, st.ProjectorURL} {
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				if a := c.do(http.MethodGet, base+path, "", "", nil); a.status != 200 {
					t.Errorf("%s%s: %d %s", base, path, a.status, a.body)
				}
			}
		}
	})
}

// lockedLog collects the services' logs.
type lockedLog struct {
	ch chan struct{}
	b  bytes.Buffer
}

func newLockedLog() *lockedLog {
	l := &lockedLog{ch: make(chan struct{}, 1)}
	l.ch <- struct{}{}
	return l
}

func (l *lockedLog) Write(p []byte) (int, error) {
	<-l.ch
	defer func() { l.ch <- struct{}{} }()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	<-l.ch
	defer func() { l.ch <- struct{}{} }()
	return l.b.String()
}

// TestSecureStack runs the whole pipeline with every security feature on:
// Kafka (kfake) with SCRAM-SHA-512 over mutual TLS, a TLS-only redis-server
// with an ACL user whose password comes from a file, the services over
// HTTPS with client certificates and bearer tokens. An event goes in and
// its snapshot comes out; no secret appears in the logs.
func TestSecureStack(t *testing.T) {
	f := securitytest.Write(t)
	env := f.Env
	kafkaServer := f.CA.Server(t, "broker")
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3), kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismScramSHA512, env["CORREX_KAFKA_SASL_USERNAME"], "kafka-sasl-pw-7d1f"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{kafkaServer.TLS}, ClientAuth: tls.RequireAndVerifyClientCert,
			ClientCAs: f.CA.Pool(), MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	redisServer := f.CA.Server(t, "redis")
	admin := f.CA.Client(t, "redis-admin")
	rs := redistest.StartTLS(t, redistest.TLSFiles{CertFile: redisServer.CertFile, KeyFile: redisServer.KeyFile, CAFile: f.CA.CertFile,
		Client: &tls.Config{RootCAs: f.CA.Pool(), Certificates: []tls.Certificate{admin.TLS}}},
		"--user", "default", "off", "--user", "correx", "on", ">redis-pw-93ab", "~correx:*", "+@all")

	logs := newLockedLog()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := devstack.Start(context.Background(), devstack.Options{
		Brokers: broker.ListenAddrs(), Partitions: 3, Log: log,
		KafkaSecurity: kafka.Config{TLS: true, TLSCAFile: env["CORREX_KAFKA_TLS_CA_FILE"],
			TLSCertFile: env["CORREX_KAFKA_TLS_CERT_FILE"], TLSKeyFile: env["CORREX_KAFKA_TLS_KEY_FILE"],
			SASLMechanism: env["CORREX_KAFKA_SASL_MECHANISM"], SASLUsername: env["CORREX_KAFKA_SASL_USERNAME"],
			SASLPasswordFile: env["CORREX_KAFKA_SASL_PASSWORD_FILE"]},
		Redis:     redisconn.Config{URL: "rediss://correx@" + rs.Addr + "/0", PasswordFile: env["CORREX_REDIS_PASSWORD_FILE"], TLSCAFile: env["CORREX_REDIS_TLS_CA_FILE"]},
		Auth:      &auth.Config{TokensFile: env["CORREX_AUTH_TOKENS_FILE"], RateLimit: 100, RateBurst: 100},
		TLS:       httpxTLS(env),
		Projector: func(c *projector.Config) { c.FlushInterval = 20 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	if !strings.HasPrefix(st.IngestURL, "https://") {
		t.Fatalf("ingest at %s", st.IngestURL)
	}
	appClient := f.CA.Client(t, "app")
	withCert := client{t: t, http: &http.Client{Transport: apiCheck.Transport(&http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: f.CA.Pool(), Certificates: []tls.Certificate{appClient.TLS}}})}}
	noCert := client{t: t, http: &http.Client{Transport: apiCheck.Transport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.CA.Pool()}})}}
	// Without a client certificate: /v1/ is refused even with a token,
	// while probes and metrics answer.
	wantProblem(t, "no client certificate", noCert.do(http.MethodPost, st.IngestURL+"/v1/events", f.Tokens["writer"], "application/json",
		[]byte(event("sec:1", "SessionCreated"))), 403)
	for _, base := range []string{st.IngestURL, st.QueryURL, st.ProjectorURL} {
		if a := noCert.do(http.MethodGet, base+"/healthz", "", "", nil); a.status != 200 {
			t.Fatalf("%s/healthz without a client certificate: %d", base, a.status)
		}
	}
	// A certificate from another CA fails the handshake.
	other := securitytest.Write(t).CA.Client(t, "stranger")
	stranger := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.CA.Pool(), Certificates: []tls.Certificate{other.TLS}}}}
	if resp, err := stranger.Get(st.IngestURL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a client certificate of another CA was accepted")
	}
	// With a certificate: the token still decides.
	wantProblem(t, "certificate without a token", withCert.do(http.MethodPost, st.IngestURL+"/v1/events", "", "application/json",
		[]byte(event("sec:1", "SessionCreated"))), 401)
	a := withCert.do(http.MethodPost, st.IngestURL+"/v1/events", f.Tokens["writer"], "application/json",
		batch(event("sec:1", "SessionCreated"), event("sec:1", "SessionStarted")))
	if a.status != 202 {
		t.Fatalf("post: %d %s", a.status, a.body)
	}
	var accepted struct {
		Position string `json:"position"`
	}
	if err := json.Unmarshal(a.body, &accepted); err != nil {
		t.Fatal(err)
	}
	a = withCert.do(http.MethodGet, st.QueryURL+"/v1/sessions/sec:1?wait=10s&minPosition="+accepted.Position, f.Tokens["reader"], "", nil)
	if a.status != 200 || !strings.Contains(string(a.body), `"state":"ACTIVE"`) {
		t.Fatalf("read: %d %s", a.status, a.body)
	}
	if a := withCert.do(http.MethodGet, st.QueryURL+"/v1/sessions/sec:1/replay", f.Tokens["admin"], "", nil); a.status != 200 ||
		!strings.Contains(string(a.body), `"matchesStored":true`) {
		t.Fatalf("replay over SASL and TLS: %d %s", a.status, a.body)
	}
	// A verified workload through mutual TLS with a tenant's token.
	rep, err := loadgen.Run(context.Background(), loadgen.Config{IngestURL: st.IngestURL, QueryURL: st.QueryURL,
		Sessions: 40, Concurrency: 2, Batch: 20, Seed: 5, Prefix: "acme:lg", Verify: true, Token: f.Tokens["acme"],
		Client: withCert.http})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verified != 40 || len(rep.Mismatches) > 0 {
		t.Fatalf("loadgen with a token: verified %d of 40, mismatches %v", rep.Verified, rep.Mismatches)
	}
	for _, s := range append(f.Secrets, "redis-pw-93ab", "kafka-sasl-pw-7d1f") {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("a secret is in the logs")
		}
	}
	if strings.Contains(logs.String(), "authentication DISABLED") || !strings.Contains(logs.String(), "authentication on") {
		t.Fatalf("the logs do not say that authentication is on")
	}
}

func httpxTLS(env map[string]string) httpx.TLSConfig {
	return httpx.TLSConfig{CertFile: env["CORREX_TLS_CERT_FILE"], KeyFile: env["CORREX_TLS_KEY_FILE"], ClientCAFile: env["CORREX_TLS_CLIENT_CA_FILE"]}
}
