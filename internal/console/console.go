// Package console is the session console: a few static files (HTML, one
// plain JavaScript file, CSS) embedded in the binary and served by the query
// service under /ui/. The page reads the query API with fetch() and the
// bearer token the user typed (kept in sessionStorage, never in a URL or a
// cookie), so it sees exactly what that token may see: the API, not the
// console, enforces scopes and tenant prefixes. Serving the files needs no
// token; they hold no data.
//
// The pages follow the query service's watch streams (read with fetch(),
// resumed with Last-Event-ID) rather than polling, and a token that may
// write a session (GET /v1/whoami) gets its actions: approve, deny, cancel,
// pause, resume, POSTed to the query service, which forwards them to ingest
// with the same token (internal/query, actions.go). Every request stays on
// this origin, so the policy below needs no other source.
//
// Every answer carries a strict Content-Security-Policy (scripts, styles and
// connections to this origin only, no inline script or style, no framing)
// and X-Content-Type-Options: nosniff. The script inserts every text that a
// session controls (ids, goals, reasons, labels, metadata) with textContent,
// never as HTML.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
)

// Path is where the console is mounted.
const Path = "/ui/"

// CSP is the Content-Security-Policy of every console answer.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed assets
var assets embed.FS

type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console. Create it with New; it is safe for
// concurrent use and holds no mutable state.
type Handler struct {
	index, script, style file
}

// New returns the console's handler, to be mounted at Path.
func New() *Handler {
	load := func(name, contentType string) file {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			// The files are embedded at build time; a missing one is a
			// build defect, caught by the package's tests.
			panic("console: " + err.Error())
		}
		b = bytes.Replace(b, []byte(statesMarker), statesJSON(), 1)
		sum := sha256.Sum256(b)
		return file{body: b, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return &Handler{
		index:  load("index.html", "text/html; charset=utf-8"),
		script: load("console.js", "text/javascript; charset=utf-8"),
		style:  load("console.css", "text/css; charset=utf-8"),
	}
}

// ServeHTTP serves /ui/ (the board), /ui/sessions/{id} (a session's page;
// the same HTML, the script reads the path), /ui/console.js and
// /ui/console.css. Anything else under /ui/ is 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
			Detail: r.Method + " is not allowed here; use GET"})
		return
	}
	f, ok := h.route(r.URL.Path)
	if !ok {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: http.StatusNotFound,
			Detail: "no console page " + r.URL.Path})
		return
	}
	hd.Set("Content-Type", f.contentType)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", f.etag)
	if r.Header.Get("If-None-Match") == f.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	http.ServeContent(w, r, "", zeroTime, bytes.NewReader(f.body))
}

// statesMarker, in index.html, becomes the lifecycle's states in order
// (pkg/fsm), as a JSON array that console.js reads: the list is one fact.
const statesMarker = "[/*fsm.States*/]"

func statesJSON() []byte {
	names := []string{}
	for _, st := range fsm.States() {
		names = append(names, st.String())
	}
	b, _ := json.Marshal(names) // strings only: cannot fail, and holds no '<'
	return b
}

func (h *Handler) route(path string) (file, bool) {
	switch path {
	case Path, Path + "index.html":
		return h.index, true
	case Path + "console.js":
		return h.script, true
	case Path + "console.css":
		return h.style, true
	}
	if id, ok := strings.CutPrefix(path, Path+"sessions/"); ok && fsm.ValidSessionID(id) {
		return h.index, true
	}
	return file{}, false
}

// zeroTime leaves Last-Modified out: the files change with the binary, and
// the ETag (a hash of the content) says when.
var zeroTime = time.Time{}
