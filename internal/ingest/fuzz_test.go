package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/ingest"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzAPI sends arbitrary requests (method, path, Content-Type, bearer
// token, body) to the ingest API exactly as the service mounts it: the
// guard with a real token file, then the handler producing to a real
// Kafka-protocol broker (kfake over loopback TCP, started once per fuzzing
// process; the project has no hand-written Kafka mocks).
//
// Invariants: no panic; the status is one the API documents; every 4xx and
// 5xx is a well-formed application/problem+json document whose status
// member equals the response status; a 401 carries a Bearer challenge and a
// 429 a Retry-After; a 202 lists the accepted events and a position.
// (The tenant checks are asserted by TestEndpointAuthorization in e2e.)
func FuzzAPI(f *testing.F) {
	c := kafkatest.Start(f)
	cfg := ingest.DefaultConfig()
	cfg.Kafka.Brokers, cfg.Topic, cfg.ProduceTimeout = c.ListenAddrs(), topic, 2*time.Second
	cl, err := kgo.NewClient(ingest.ProducerOpts(cfg)...)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(cl.Close)
	if _, err := kafka.EnsureTopic(context.Background(), kadm.NewClient(cl), topic, 3); err != nil {
		f.Fatal(err)
	}
	writer, _ := auth.NewToken()
	reader, _ := auth.NewToken()
	tenant, _ := auth.NewToken()
	tokens := filepath.Join(f.TempDir(), "tokens")
	file := auth.HashToken(writer) + " events:write\n" + auth.HashToken(reader) + " sessions:read\n" +
		auth.HashToken(tenant) + " events:write prefix=acme:\n"
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		f.Fatal(err)
	}
	guard, err := auth.New(auth.Config{TokensFile: tokens, RateLimit: 1e6, RateBurst: 1e6}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	api := ingest.API(&ingest.Handler{Producer: cl, Topic: topic, ProduceTimeout: 2 * time.Second,
		Log: slog.New(slog.DiscardHandler)}, guard)
	bearers := []string{"", "Bearer " + writer, "Bearer " + reader, "Bearer " + tenant, "Bearer cxs_unknown", "Basic eDp5"}

	ev := `{"sessionId":"acme:1","type":"SessionCreated","payload":{"goal":"g"}}`
	f.Add(uint8(0), "/v1/events", "application/json", uint8(1), "", []byte(ev))
	f.Add(uint8(0), "/v1/events", "application/json", uint8(3), "", []byte(`{"events":[`+ev+`,{"sessionId":"globex:1","type":"SessionCreated"}]}`))
	f.Add(uint8(0), "/v1/events", "application/x-ndjson", uint8(3), "", []byte(ev+"\n"+ev+"\n"))
	f.Add(uint8(0), "/v1/events", "application/json", uint8(2), "", []byte(ev))
	f.Add(uint8(0), "/v1/events", "application/json", uint8(4), "", []byte(ev))
	f.Add(uint8(0), "/v1/events", "application/json", uint8(0), "", []byte(ev))
	f.Add(uint8(0), "/v1/events", "text/plain", uint8(1), "", []byte(ev))
	f.Add(uint8(0), "/v1/events", "application/json; charset=utf-8", uint8(1), "", []byte(`{"events":[{"sessionId":`))
	f.Add(uint8(1), "/v1/events", "", uint8(1), "", []byte(nil))
	f.Add(uint8(0), "/v1/../v1/events", "application/json", uint8(1), "", []byte(ev))
	f.Add(uint8(2), "/v1/%2e%2e/stats", "", uint8(9), "Bearer \x00\xff", []byte("\x00"))
	f.Add(uint8(0), "/v1/events", "application/json", uint8(1), "", []byte(`{"sessionId":"a","type":"TimeoutExpired","payload":{"timeout":"cancellation"},"occurredAt":"2026-11-29T06:00:00+14:00"}`))

	methods := []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead, http.MethodOptions, "PATCH", "BREW"}
	f.Fuzz(func(t *testing.T, method uint8, path, contentType string, bearer uint8, rawAuth string, body []byte) {
		req := &http.Request{Method: methods[int(method)%len(methods)], URL: &url.URL{Path: path}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), RemoteAddr: "192.0.2.1:1234"}
		req = req.WithContext(context.Background())
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		authz := rawAuth
		if int(bearer) < len(bearers) {
			authz = bearers[bearer]
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		checkAnswer(t, rec)
	})
}

func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	status := rec.Code
	switch status {
	case 202, 301, 307, 308, 400, 401, 403, 404, 405, 413, 415, 429, 503:
	default:
		t.Fatalf("undocumented status %d: %s", status, rec.Body.Bytes())
	}
	if status == 202 {
		var resp ingest.Response
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Accepted) == 0 || resp.Position == "" {
			t.Fatalf("202 body %s", rec.Body.Bytes())
		}
		return
	}
	if status < 400 {
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d with content type %q: %q", status, ct, rec.Body.Bytes())
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != status || p.Type == "" || p.Title == "" {
		t.Fatalf("%d: not a problem document: %q (%v)", status, rec.Body.Bytes(), err)
	}
	if status == 401 && rec.Header().Get("WWW-Authenticate") == "" {
		t.Fatal("401 without a challenge")
	}
	if status == 429 && rec.Header().Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
}
