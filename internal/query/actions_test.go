package query_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/securitytest"
)

func do(t *testing.T, method, url, token, contentType string, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestWhoamiAndActions runs the pipeline with authentication: GET
// /v1/whoami says what a token carries; an action goes through the query
// service to ingest with the caller's token, so ingest's scopes and tenant
// prefix decide, and the session moves.
func TestWhoamiAndActions(t *testing.T) {
	f := securitytest.Write(t)
	st, err := devstack.Start(context.Background(), devstack.Options{Redis: redisconn.Config{URL: redistest.Start(t).URL()}, Partitions: 2,
		Log:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Auth: &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	acme := f.Tokens["acme"]

	status, hd, body := do(t, http.MethodGet, st.QueryURL+"/v1/whoami", "", "", "")
	if status != 401 || hd.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("whoami without a token: %d %s %s", status, hd.Get("Content-Type"), body)
	}
	status, _, body = do(t, http.MethodGet, st.QueryURL+"/v1/whoami", acme, "", "")
	var who struct {
		Name      string   `json:"name"`
		Scopes    []string `json:"scopes"`
		Prefix    string   `json:"prefix"`
		Anonymous bool     `json:"anonymous"`
		Actions   bool     `json:"actions"`
	}
	if err := json.Unmarshal(body, &who); err != nil || status != 200 {
		t.Fatalf("whoami: %d %s", status, body)
	}
	if who.Name != "acme" || strings.Join(who.Scopes, ",") != "events:write,sessions:read" || who.Prefix != "acme:" || who.Anonymous || !who.Actions {
		t.Errorf("whoami: %+v", who)
	}

	post := func(token, id, contentType, body string) (int, []byte) {
		status, _, out := do(t, http.MethodPost, st.QueryURL+"/v1/sessions/"+id+"/actions", token, contentType, body)
		return status, out
	}
	// The session waits for approval.
	status, _, body = do(t, http.MethodPost, st.IngestURL+"/v1/events", acme, "application/json",
		`{"events":[{"sessionId":"acme:a","type":"SessionCreated"},{"sessionId":"acme:a","type":"SessionStarted"},`+
			`{"sessionId":"acme:a","type":"ApprovalRequested","payload":{"reason":"spend"}}]}`)
	if status != 202 {
		t.Fatalf("ingest: %d %s", status, body)
	}

	for _, c := range []struct {
		body, field string
	}{
		{`{"action":"explode"}`, "action"},
		{`{"action":"pause","mode":"forced"}`, "mode"},
		{`{"action":"cancel","mode":"brutal"}`, "mode"},
		{`{"action":"approve","requestId":"has space"}`, "requestId"},
		{`{"action":"resume","requestId":"r1"}`, "requestId"},
		{`{"action":"pause","reason":"x"}`, "reason"},
		{`{"action":"approve","extra":1}`, "extra"},
		{`not json`, "body"},
	} {
		status, out := post(acme, "acme:a", "application/json", c.body)
		var p struct {
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		if err := json.Unmarshal(out, &p); status != 400 || err != nil || len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, status, out, c.field)
		}
	}
	if status, out := post(acme, "acme:a", "text/plain", `{"action":"approve"}`); status != 415 {
		t.Errorf("text/plain: %d %s, want 415", status, out)
	}
	if status, out := post("", "acme:a", "application/json", `{"action":"approve"}`); status != 401 {
		t.Errorf("no token: %d %s, want 401", status, out)
	}
	// Ingest's rules: the reader may not write, acme may not touch beta.
	if status, out := post(f.Tokens["reader"], "acme:a", "application/json", `{"action":"approve"}`); status != 403 || !bytes.Contains(out, []byte("events:write")) {
		t.Errorf("reader: %d %s, want 403 for events:write", status, out)
	}
	if status, out := post(acme, "beta:a", "application/json", `{"action":"approve"}`); status != 403 || !bytes.Contains(out, []byte("acme:")) {
		t.Errorf("acme on beta: %d %s, want 403", status, out)
	}

	status, out := post(acme, "acme:a", "application/json", `{"action":"approve","reason":"fine"}`)
	var acc struct {
		Position string `json:"position"`
	}
	if err := json.Unmarshal(out, &acc); status != 202 || err != nil || acc.Position == "" {
		t.Fatalf("approve: %d %s", status, out)
	}
	status, _, body = do(t, http.MethodGet, st.QueryURL+"/v1/sessions/acme:a?minPosition="+acc.Position+"&wait=10s", acme, "", "")
	var snap struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &snap); status != 200 || err != nil || snap.State != "ACTIVE" {
		t.Fatalf("after approve: %d %s", status, body)
	}
	status, out = post(acme, "acme:a", "application/json", `{"action":"cancel","mode":"forced","reason":"stop"}`)
	if status != 202 {
		t.Fatalf("cancel: %d %s", status, out)
	}
}

// TestActionsOff: without CORREX_INGEST_URL, whoami says so and an action
// answers 503 after its validation.
func TestActionsOff(t *testing.T) {
	f := newFixture(t)
	status, _, body := do(t, http.MethodGet, f.srv.URL+"/v1/whoami", "", "", "")
	if status != 200 || !bytes.Contains(body, []byte(`"actions":false`)) || !bytes.Contains(body, []byte(`"anonymous":true`)) {
		t.Errorf("whoami: %d %s", status, body)
	}
	status, hdr, body := do(t, http.MethodPost, f.srv.URL+"/v1/sessions/a/actions", "", "application/json", `{"action":"pause"}`)
	if status != 503 || !bytes.Contains(body, []byte("CORREX_INGEST_URL")) || hdr.Get("Retry-After") != "30" {
		t.Errorf("action: %d Retry-After %q %s, want 503 naming CORREX_INGEST_URL, Retry-After 30", status, hdr.Get("Retry-After"), body)
	}
	for _, u := range []string{"ftp://x", "http://", "http://h/?q=1", "http://u:p@h"} {
		if query.ValidateIngestURL(u) == nil {
			t.Errorf("%s accepted", u)
		}
	}
	if err := query.ValidateIngestURL("https://ingest:8081/base"); err != nil {
		t.Error(err)
	}
}

// TestActionDecodedStrictly: an action's body is read as ingest reads an
// envelope: member names match exactly, once each, and anything else is a
// 400 naming the member; only then does the missing ingest URL answer 503.
func TestActionDecodedStrictly(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		body, field string
	}{
		{`{"Action":"pause"}`, "Action"},
		{`{"action":"pause","ACTION":"resume"}`, "ACTION"},
		{`{"action":"cancel","action":"pause"}`, "action"},
		{`{"action":"approve","reason":"a","reason":"b"}`, "reason"},
		{`{"action":"approve","requestID":"r1"}`, "requestID"},
		{`{"action":"approve","extra":1}`, "extra"},
		{`{"action":1}`, "action"},
		{`{"action":"cancel","mode":null}`, "mode"},
		{`{"action":"pause"} {}`, "body"},
		{`["pause"]`, "body"},
		{`not json`, "body"},
	} {
		status, _, out := do(t, http.MethodPost, f.srv.URL+"/v1/sessions/a/actions", "", "application/json", c.body)
		var p struct {
			Errors []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		if err := json.Unmarshal(out, &p); status != 400 || err != nil || len(p.Errors) != 1 || p.Errors[0].Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, status, out, c.field)
		}
	}
	status, _, out := do(t, http.MethodPost, f.srv.URL+"/v1/sessions/a/actions", "", "application/json", ` {"action":"cancel", "mode":"forced","reason":"r"} `)
	if status != 503 {
		t.Errorf("a valid action without an ingest URL: %d %s, want 503", status, out)
	}
}
