package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/console"
	"github.com/correx/sessions/pkg/fsm"
)

func get(t *testing.T, h http.Handler, method, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestRoutes checks every console route: status, content type, and the
// security headers on every answer, errors included.
func TestRoutes(t *testing.T) {
	h := console.New()
	for _, c := range []struct {
		method, path string
		status       int
		contentType  string
		contains     string
	}{
		{"GET", "/ui/", 200, "text/html; charset=utf-8", `<script src="/ui/console.js" defer></script>`},
		{"GET", "/ui/index.html", 200, "text/html; charset=utf-8", "<title>correx sessions</title>"},
		{"GET", "/ui/sessions/acme:run-1", 200, "text/html; charset=utf-8", `id="session-view"`},
		{"HEAD", "/ui/", 200, "text/html; charset=utf-8", ""},
		{"GET", "/ui/console.js", 200, "text/javascript; charset=utf-8", "'use strict';"},
		{"GET", "/ui/console.css", 200, "text/css; charset=utf-8", ".timeline"},
		{"GET", "/ui/nothing", 404, "application/problem+json", "no console page"},
		{"GET", "/ui/sessions/", 404, "application/problem+json", ""},
		{"GET", "/ui/sessions/bad%20id", 404, "application/problem+json", ""},
		{"GET", "/ui/sessions/a/b", 404, "application/problem+json", ""},
		{"GET", "/ui/console.js/x", 404, "application/problem+json", ""},
		{"POST", "/ui/", 405, "application/problem+json", "use GET"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			resp, body := get(t, h, c.method, c.path)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if got := resp.Header.Get("Content-Type"); got != c.contentType {
				t.Errorf("content type %q, want %q", got, c.contentType)
			}
			if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP {
				t.Errorf("CSP %q", got)
			}
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q", got)
			}
			if !strings.Contains(body, c.contains) {
				t.Errorf("body lacks %q: %.200s", c.contains, body)
			}
			if c.method == "HEAD" && body != "" {
				t.Errorf("HEAD answered a body of %d bytes", len(body))
			}
		})
	}
}

// TestCSPIsStrict restates the policy the console promises, directive by
// directive, so that a loosened constant fails here.
func TestCSPIsStrict(t *testing.T) {
	want := map[string]string{
		"default-src": "'none'", "script-src": "'self'", "style-src": "'self'", "connect-src": "'self'",
		"img-src": "'self' data:", "base-uri": "'none'", "form-action": "'self'", "frame-ancestors": "'none'",
	}
	got := map[string]string{}
	for _, d := range strings.Split(console.CSP, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		got[name] = value
	}
	if len(got) != len(want) {
		t.Errorf("directives %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %q, want %q", k, got[k], v)
		}
	}
}

// TestNoInlineCode checks that the HTML holds nothing the CSP would block
// (inline scripts, style attributes or elements, event handler attributes)
// and that the script never parses data as HTML.
func TestNoInlineCode(t *testing.T) {
	h := console.New()
	_, html := get(t, h, "GET", "/ui/")
	for _, bad := range []string{"<script>", "style=", "<style", " onclick=", " onload=", " onerror=", "javascript:"} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	_, js := get(t, h, "GET", "/ui/console.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage", "document.cookie"} {
		if strings.Contains(js, bad) {
			t.Errorf("console.js uses %s", bad)
		}
	}
}

// TestConditionalGet checks the ETag: a matching If-None-Match gets 304.
func TestConditionalGet(t *testing.T) {
	h := console.New()
	resp, _ := get(t, h, "GET", "/ui/console.js")
	etag := resp.Header.Get("ETag")
	if etag == "" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, resp.Header.Get("Cache-Control"))
	}
	if resp, _ := get(t, h, "GET", "/ui/console.js", "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d with a matching If-None-Match", resp.StatusCode)
	}
	if resp, _ := get(t, h, "GET", "/ui/console.css", "If-None-Match", etag); resp.StatusCode != 200 {
		t.Fatalf("status %d with another file's ETag", resp.StatusCode)
	}
}

// TestStatesFromFSM: the page carries the lifecycle's states, in order,
// from pkg/fsm, which console.js reads instead of a list of its own.
func TestStatesFromFSM(t *testing.T) {
	_, body := get(t, console.New(), http.MethodGet, console.Path)
	var names []string
	for _, st := range fsm.States() {
		names = append(names, `"`+st.String()+`"`)
	}
	want := `<script type="application/json" id="fsm-states">[` + strings.Join(names, ",") + `]</script>`
	if !strings.Contains(body, want) {
		t.Fatalf("the page does not carry %s", want)
	}
	if _, js := get(t, console.New(), http.MethodGet, console.Path+"console.js"); strings.Contains(js, "'CREATED', 'INITIALIZING'") {
		t.Fatal("console.js keeps a list of the states of its own")
	}
}
