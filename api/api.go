// Package api owns the OpenAPI 3.1 description of the HTTP APIs of the
// ingest and query services: openapi.json, embedded here and served by each
// of them at GET /openapi.json (no token, like /healthz). The description
// covers every request and answer of POST /v1/events and of the query API
// (snapshots, listings, stats, replay, rebuild, the SSE watches as
// text/event-stream), the application/problem+json answers with every
// problem `type` URI the services use, and the bearer tokens with the scope
// each operation needs. It links nothing but the standard library.
//
// The description cannot drift from the services: package api/apitest
// checks every response the end-to-end tests (internal/e2e) and
// pkg/testkit's clients receive against it, and openapi.json's snapshot and
// change-record schemas refuse members they do not list, so a new field
// without a schema update fails a test.
//
// openapi.json is the source: edit it by hand, except the enumerations it
// shares with pkg/fsm (components/schemas State, TimeoutKind and
// FailureCategory), which go generate writes from pkg/fsm
// (internal/genenums) and every other schema refers to with $ref; keep it
// valid OpenAPI 3.1
// (a test checks it), give every enum and const schema its type (a test
// checks that too: a generator makes an untyped enum an interface{};
// api/codegen compiles oapi-codegen's output, make test-openapi) and keep
// it indented with two spaces.
package api

//go:generate go run ./internal/genenums

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
)

//go:embed openapi.json
var document []byte

// etag is the document's entity tag: a hash of its bytes.
var etag = func() string {
	sum := sha256.Sum256(document)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// Document returns the OpenAPI 3.1 description (JSON). The caller may keep
// and change the copy.
func Document() []byte { return bytes.Clone(document) }

// Path is where each service serves the description.
const Path = "/openapi.json"

// Handler serves the description as application/json, with an ETag
// (If-None-Match gives 304).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", etag)
		w.Header().Set("Cache-Control", "no-cache")
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(document)
	})
}
