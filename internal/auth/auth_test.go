package auth_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/testwait"
)

func mustToken(t *testing.T) string {
	t.Helper()
	tok, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func writeTokens(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNewTokenAndHash(t *testing.T) {
	a, b := mustToken(t), mustToken(t)
	if a == b || !strings.HasPrefix(a, auth.TokenPrefix) || len(a) != len(auth.TokenPrefix)+43 {
		t.Fatalf("tokens %q %q", a, b)
	}
	// echo -n abc | sha256sum
	if got := auth.HashToken("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("hash %s", got)
	}
}

func TestParseTokens(t *testing.T) {
	h1, h2 := auth.HashToken("one"), auth.HashToken("two")
	file := "# comment\n\n" + h1 + " events:write,sessions:read prefix=acme: name=acme-app\n" +
		"  " + strings.ToUpper(h2) + " admin  \n"
	tokens, err := auth.ParseTokens(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 2 {
		t.Fatalf("%d tokens", len(tokens))
	}
	a, b := tokens[0], tokens[1]
	if a.Name != "acme-app" || a.Prefix != "acme:" || !a.Has(auth.ScopeEventsWrite) || !a.Has(auth.ScopeSessionsRead) || a.Has(auth.ScopeAdmin) {
		t.Fatalf("first token %+v", a)
	}
	if b.Name != "token-"+h2[:8] || b.Prefix != "" || !b.Has(auth.ScopeEventsWrite) || !b.Has(auth.ScopeSessionsRead) {
		t.Fatalf("admin token %+v (admin implies every scope; default name)", b)
	}
	if got := a.Line(); got != h1+" events:write,sessions:read prefix=acme: name=acme-app" {
		t.Fatalf("line %q", got)
	}
	again, err := auth.ParseTokens(strings.NewReader(a.Line()))
	if err != nil || again[0].Hash != a.Hash || again[0].Prefix != a.Prefix || again[0].Name != a.Name {
		t.Fatalf("round trip: %+v %v", again, err)
	}
}

func TestParseTokensReportsEveryBadLine(t *testing.T) {
	h := auth.HashToken("x")
	secret := mustToken(t)
	tests := []struct {
		line, want string
	}{
		{"abc events:write", "SHA-256"},
		{secret + " events:write", "not its hash"},
		{h, "want <sha256-hex> <scopes>"},
		{h + " events:write,delete", `unknown scope "delete"`},
		{h + " admin prefix=bad/prefix", "prefix"},
		{h + " admin name=" + strings.Repeat("n", 65), "name"},
		{h + " admin owner=x", "unknown or repeated key"},
		{h + " admin prefix=a: prefix=b:", "unknown or repeated key"},
		{h + " admin oops", "key=value"},
	}
	var lines []string
	for _, tc := range tests {
		lines = append(lines, tc.line)
	}
	lines = append(lines, h+" admin", h+" events:write") // lines 10 and 11: the same hash
	_, err := auth.ParseTokens(strings.NewReader(strings.Join(lines, "\n")))
	if err == nil {
		t.Fatal("bad file accepted")
	}
	msg := err.Error()
	for i, tc := range tests {
		want := "line " + strconv.Itoa(i+1) + ": "
		if !strings.Contains(msg, want) {
			t.Errorf("error does not report line %d (%s): %s", i+1, tc.want, msg)
		}
		if !strings.Contains(msg, tc.want) {
			t.Errorf("error does not say %q: %s", tc.want, msg)
		}
	}
	if !strings.Contains(msg, "the same hash as line 10") {
		t.Errorf("duplicate not reported: %s", msg)
	}
	if strings.Contains(msg, secret) {
		t.Error("the error quotes a token")
	}
}

func TestKeyringLookupAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	tokA, tokB := mustToken(t), mustToken(t)
	writeTokens(t, path, auth.HashToken(tokA)+" events:write name=a")
	k, err := auth.LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := k.Lookup(tokA); !ok || p.Name != "a" {
		t.Fatalf("lookup A: %+v %v", p, ok)
	}
	for _, bad := range []string{tokB, "", tokA + "x", auth.HashToken(tokA)} {
		if _, ok := k.Lookup(bad); ok {
			t.Fatalf("lookup %q succeeded", bad)
		}
	}
	writeTokens(t, path, auth.HashToken(tokB)+" admin name=b")
	if err := k.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Lookup(tokA); ok {
		t.Fatal("a removed token still works")
	}
	if p, ok := k.Lookup(tokB); !ok || p.Name != "b" {
		t.Fatalf("lookup B: %+v %v", p, ok)
	}
	writeTokens(t, path, "garbage")
	if err := k.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if _, ok := k.Lookup(tokB); !ok {
		t.Fatal("a failed reload dropped the previous tokens")
	}
}

// syncBuffer is a log destination written by the watch goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestReloadOnSIGHUP sends the test process a real SIGHUP.
func TestReloadOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	tokA, tokB := mustToken(t), mustToken(t)
	writeTokens(t, path, auth.HashToken(tokA)+" events:write name=a")
	logs := &syncBuffer{}
	g, err := auth.New(auth.Config{TokensFile: path}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	g.Watch(ctx)
	h := g.Authenticate(auth.Require(auth.ScopeEventsWrite, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	status := func(tok string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if status(tokA) != 200 || status(tokB) != 401 {
		t.Fatal("initial tokens")
	}
	writeTokens(t, path, auth.HashToken(tokB)+" events:write name=b")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the reload after SIGHUP", 5*time.Second, func() bool { return status(tokB) == 200 && status(tokA) == 401 })

	writeTokens(t, path, "not a token file")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the failed reload's log line", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), "reload failed; keeping the previous bearer tokens")
	})
	if status(tokB) != 200 {
		t.Fatal("a failed reload dropped the previous tokens")
	}
	if strings.Contains(logs.String(), tokB) || strings.Contains(logs.String(), tokA) {
		t.Fatal("a token appears in the log")
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &auth.Limiter{Rate: 2, Burst: 3, MaxKeys: 2, Now: func() time.Time { return now }}
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("over the burst: %v, wait %v (want 500ms at 2/s)", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key shares a's bucket")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("no refill after 500ms")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("refilled more than the rate")
	}
	// At MaxKeys, a new key shares the overflow bucket while the others
	// are in use...
	if ok, _ := l.Allow("c"); !ok || l.Len() != 3 {
		t.Fatalf("overflow: %v, %d buckets", ok, l.Len())
	}
	// ...and once they have refilled, they are dropped.
	now = now.Add(2 * time.Second)
	l.Allow("d")
	if l.Len() != 1 {
		t.Fatalf("%d buckets after a sweep, want 1", l.Len())
	}
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func serve(h http.Handler, method, auth string, remote string) (*http.Response, problem) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, "/v1/x", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if remote != "" {
		req.RemoteAddr = remote
	}
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	var p problem
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &p)
	return resp, p
}

func TestGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writer, reader, admin, tenant := mustToken(t), mustToken(t), mustToken(t), mustToken(t)
	writeTokens(t, path,
		auth.HashToken(writer)+" events:write name=w",
		auth.HashToken(reader)+" sessions:read name=r",
		auth.HashToken(admin)+" admin name=adm",
		auth.HashToken(tenant)+" events:write prefix=acme: name=t")
	g, err := auth.New(auth.Config{TokensFile: path, RateLimit: 1, RateBurst: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var seen *auth.Principal
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = auth.PrincipalFrom(r.Context()) })
	write := g.Authenticate(auth.Require(auth.ScopeEventsWrite, ok))

	tests := []struct {
		name, header string
		status       int
		challenge    string
	}{
		{"no header", "", 401, `Bearer realm="correx-sessions"`},
		{"basic scheme", "Basic dXNlcjpwYXNz", 401, `Bearer realm="correx-sessions"`},
		{"empty bearer", "Bearer ", 401, `Bearer realm="correx-sessions"`},
		{"unknown token", "Bearer " + mustToken(t), 401, `Bearer realm="correx-sessions", error="invalid_token"`},
		{"hash instead of token", "Bearer " + auth.HashToken(writer), 401, `Bearer realm="correx-sessions", error="invalid_token"`},
		{"oversized token", "Bearer " + strings.Repeat("a", 10000), 401, `Bearer realm="correx-sessions"`},
		{"lacking scope", "Bearer " + reader, 403, `Bearer realm="correx-sessions", error="insufficient_scope", scope="events:write"`},
		{"writer", "Bearer " + writer, 200, ""},
		{"lowercase scheme", "bearer " + writer, 200, ""},
		{"admin implies write", "Bearer " + admin, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, p := serve(write, http.MethodPost, tc.header, "")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Fatalf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if tc.status != 200 && (resp.Header.Get("Content-Type") != "application/problem+json" || p.Status != tc.status || p.Type == "") {
				t.Fatalf("not a problem: %+v", p)
			}
		})
	}
	seen = nil
	serve(write, http.MethodPost, "Bearer "+tenant, "")
	if seen == nil || seen.Name != "t" || seen.SessionPrefix() != "acme:" || !seen.Owns("acme:1") || seen.Owns("other:1") {
		t.Fatalf("tenant principal %+v", seen)
	}

	// The writer has used its burst of 2 (writer, lowercase scheme); the
	// limit is per token.
	resp, p := serve(write, http.MethodPost, "Bearer "+writer, "")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || p.Type == "" {
		t.Fatalf("over the limit: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), p)
	}
	if resp, _ := serve(write, http.MethodPost, "Bearer "+tenant, ""); resp.StatusCode != 200 {
		t.Fatalf("another token limited: %d", resp.StatusCode)
	}
}

func TestDisabledAuthLimitsPerAddress(t *testing.T) {
	logs := &syncBuffer{}
	g, err := auth.New(auth.Config{Disabled: true, RateLimit: 1, RateBurst: 1}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "authentication DISABLED") || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no loud warning: %s", logs)
	}
	var seen *auth.Principal
	h := g.Authenticate(auth.Require(auth.ScopeAdmin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = auth.PrincipalFrom(r.Context())
	})))
	if resp, _ := serve(h, http.MethodGet, "", "192.0.2.1:1234"); resp.StatusCode != 200 || !seen.Anonymous || seen.SessionPrefix() != "" {
		t.Fatalf("anonymous request: %d %+v", resp.StatusCode, seen)
	}
	if resp, _ := serve(h, http.MethodGet, "Bearer whatever", "192.0.2.1:5678"); resp.StatusCode != 429 {
		t.Fatalf("same address, other port: %d, want 429", resp.StatusCode)
	}
	if resp, _ := serve(h, http.MethodGet, "", "192.0.2.2:1234"); resp.StatusCode != 200 {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
}

func TestAuthIsRequired(t *testing.T) {
	tests := []struct {
		cfg  auth.Config
		want string
	}{
		{auth.Config{}, "authentication is required"},
		{auth.Config{Disabled: true, TokensFile: "/x"}, "choose one"},
		{auth.Config{TokensFile: "/nonexistent/tokens"}, "/nonexistent/tokens"},
	}
	for _, tc := range tests {
		_, err := auth.New(tc.cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
		if got := strings.Join(tc.cfg.Validate(), "\n"); !strings.Contains(got, tc.want) {
			t.Errorf("Validate(%+v): %q, want %q", tc.cfg, got, tc.want)
		}
	}
	if got := (auth.Config{Disabled: true, RateLimit: -1}).Validate(); len(got) != 1 || !strings.Contains(got[0], "CORREX_RATE_LIMIT") {
		t.Errorf("negative rate: %q", got)
	}
	if got := (auth.Config{Disabled: true, RateLimit: 5}).Validate(); len(got) != 1 || !strings.Contains(got[0], "CORREX_RATE_BURST") {
		t.Errorf("rate without burst: %q", got)
	}
	// A handler behind Require but not Authenticate fails closed.
	rec := httptest.NewRecorder()
	auth.Require(auth.ScopeSessionsRead, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("reached the handler without a principal")
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions", nil))
	if rec.Code != 401 {
		t.Fatalf("status %d without Authenticate", rec.Code)
	}
}
