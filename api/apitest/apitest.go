// Package apitest checks HTTP traffic against the OpenAPI description of
// package api, so that the description cannot drift from the services:
// Validator.Transport wraps an http.RoundTripper, and every answer of the
// ingest and query services that goes through it is checked (status,
// Content-Type, required headers, the body against its schema, and each
// Server-Sent Event's data of a watch as the caller reads it). What is not
// described is recorded as a violation; Err returns them, and the tests
// that use it (internal/e2e, and pkg/testkit's clients, whose Close returns
// them) fail.
//
// Requests are checked too: a request the description calls invalid (a
// query parameter out of range, a body that is no envelope) must be
// answered 4xx, since a service that accepts what its description refuses
// has drifted as much as one that answers what it does not describe. A path
// the description does not hold must be answered 404 (not-found), and a
// method a described path does not take 405 (method-not-allowed), both as
// application/problem+json. Bearer tokens are not checked against the
// security requirements: devstack runs without them (the 401 and 403
// answers are checked like any other). The console's files under /ui/ and
// HEAD requests are passed through unchecked; a path that is not clean
// ("..", "//") must be answered with net/http's redirect to its clean form.
//
// The validator is github.com/pb33f/libopenapi-validator, over
// github.com/pb33f/libopenapi: it reads OpenAPI 3.1 (and 3.0 and 3.2), and
// checks schemas with a JSON Schema 2020-12 implementation (pb33f's
// maintained fork of santhosh-tekuri/jsonschema), which is the dialect of
// OpenAPI 3.1: type arrays such as ["string", "null"], const,
// propertyNames and additionalProperties: false behave as the description
// means them. It is actively maintained and validates http.Request and
// http.Response directly. kin-openapi, the other common Go choice, was
// built for OpenAPI 3.0 and its 3.1 support is recent and partial, and a
// bare JSON Schema library would leave routing, parameters, status codes
// and media types to this package.
//
// This package is for tests: it links the validator, which the services'
// binaries do not.
package apitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/correx/sessions/api"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// validated counts the answers checked by every Validator of the process.
var validated atomic.Int64

// Validated returns how many answers the validators of this process have
// checked.
func Validated() int64 { return validated.Load() }

// maxViolations bounds what a Validator keeps; the count goes on.
const maxViolations = 50

// Validator checks traffic against the description. Safe for concurrent
// use.
type Validator struct {
	opts   *config.ValidationOptions
	model  *v3.Document
	v      validator.Validator
	schema schema_validation.SchemaValidator
	// events are, per described path of an SSE stream, the schema of each
	// event's data by event name (the media type's x-correx-events).
	events map[string]map[string]*base.Schema

	mu         sync.Mutex
	violations []string
	count      int
	checked    atomic.Int64
}

// New builds a Validator over api.Document.
func New() (*Validator, error) {
	return newValidator(api.Document())
}

func newValidator(spec []byte) (*Validator, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("apitest: %w", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	opts := []config.Option{config.WithFormatAssertions(), config.WithoutSecurityValidation(), config.WithLogger(quiet)}
	v := &Validator{
		opts:   config.NewValidationOptions(opts...),
		model:  &m.Model,
		schema: schema_validation.NewSchemaValidatorWithLogger(quiet, config.WithFormatAssertions()),
		events: map[string]map[string]*base.Schema{},
	}
	v.v = validator.NewValidatorFromV3Model(&m.Model, opts...)
	if err := v.readEvents(spec); err != nil {
		return nil, err
	}
	return v, nil
}

// readEvents reads each text/event-stream answer's x-correx-events: the
// event names and the $ref of their data's schema.
func (v *Validator) readEvents(spec []byte) error {
	var raw struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(spec, &raw); err != nil {
		return fmt.Errorf("apitest: %w", err)
	}
	for p, item := range raw.Paths {
		var op struct {
			Responses map[string]struct {
				Content map[string]struct {
					Events map[string]struct {
						Ref string `json:"$ref"`
					} `json:"x-correx-events"`
				} `json:"content"`
			} `json:"responses"`
		}
		if err := json.Unmarshal(item["get"], &op); err != nil || item["get"] == nil {
			continue
		}
		for _, r := range op.Responses {
			for _, ev := range r.Content["text/event-stream"].Events {
				name, ok := strings.CutPrefix(ev.Ref, "#/components/schemas/")
				proxy := v.model.Components.Schemas.GetOrZero(name)
				if !ok || proxy == nil {
					return fmt.Errorf("apitest: %s: x-correx-events names %q, which is not a schema of the components", p, ev.Ref)
				}
			}
			for event, ev := range r.Content["text/event-stream"].Events {
				if v.events[p] == nil {
					v.events[p] = map[string]*base.Schema{}
				}
				name := strings.TrimPrefix(ev.Ref, "#/components/schemas/")
				v.events[p][event] = v.model.Components.Schemas.GetOrZero(name).Schema()
			}
		}
	}
	return nil
}

// Checked returns how many answers v has checked.
func (v *Validator) Checked() int64 { return v.checked.Load() }

// Err returns the violations seen so far (nil if none).
func (v *Validator) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.count == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d answers or requests not as api/openapi.json describes them:\n  %s",
		v.count, strings.Join(v.violations, "\n  "))
	if v.count > len(v.violations) {
		msg += fmt.Sprintf("\n  (and %d more)", v.count-len(v.violations))
	}
	return errors.New(msg)
}

func (v *Validator) violation(req *http.Request, status int, format string, args ...any) {
	msg := fmt.Sprintf("%s %s -> %d: %s", req.Method, req.URL.RequestURI(), status, fmt.Sprintf(format, args...))
	v.mu.Lock()
	defer v.mu.Unlock()
	v.count++
	if len(v.violations) < maxViolations {
		v.violations = append(v.violations, msg)
	}
}

// Transport returns base (http.DefaultTransport when nil) checking every
// exchange against the description.
func (v *Validator) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, base: base}
}

// Client returns a copy of c (a new client when nil) whose transport checks
// every exchange.
func (v *Validator) Client(c *http.Client) *http.Client {
	out := &http.Client{}
	if c != nil {
		*out = *c
	}
	out.Transport = v.Transport(out.Transport)
	return out
}

type transport struct {
	v    *Validator
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodHead || strings.HasPrefix(req.URL.Path, "/ui/") {
		return t.base.RoundTrip(req)
	}
	// The request's body is read here and replayed twice: to the server,
	// and to the validator. Its length and encoding are left as they were.
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		sent := req.Clone(req.Context())
		sent.Body = io.NopCloser(bytes.NewReader(body))
		sent.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req = sent
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	check := req.Clone(req.Context())
	check.Body = http.NoBody
	if isEventStream(resp) && resp.StatusCode == http.StatusOK {
		head := *resp
		head.Body = http.NoBody
		t.v.check(check, &head, body)
		resp.Body = t.v.wrapStream(check, resp.Body)
		return resp, nil
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(got))
	if err != nil {
		// The caller sees the failure as it would have; a body cut short
		// is not the description's business.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(got), errReader{err}))
		return resp, nil
	}
	copied := *resp
	copied.Body = io.NopCloser(bytes.NewReader(got))
	t.v.check(check, &copied, body)
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections
// (http.Client.CloseIdleConnections reaches it through here).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func isEventStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// check checks one exchange: the request (body is its body) and the answer.
func (v *Validator) check(req *http.Request, resp *http.Response, body []byte) {
	v.checked.Add(1)
	validated.Add(1)
	if p := req.URL.Path; path.Clean(p) != p && p != "/" && path.Clean(p)+"/" != p {
		// net/http redirects a path with "..", "." or "//" to its clean
		// form before any service sees it.
		if resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusTemporaryRedirect &&
			resp.StatusCode != http.StatusPermanentRedirect {
			v.violation(req, resp.StatusCode, "a path that is not clean must be redirected to its clean form")
		}
		return
	}
	route, errs := paths.ResolveRoute(req, v.model, v.opts)
	if route == nil || len(errs) > 0 {
		v.undescribed(req, resp, errs)
		return
	}
	if ok, errs := v.v.ValidateHttpResponse(req, resp); !ok {
		v.violation(req, resp.StatusCode, "the answer is not described: %s", describe(errs))
	}
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// An NDJSON body is a stream of documents, which the validator cannot
	// read as one: its events are checked by ingest's own answer (a 400
	// naming each bad line), so only the other requests are checked here.
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == "application/x-ndjson" {
		return
	}
	if ok, errs := v.v.ValidateHttpRequest(req); !ok && (resp.StatusCode < 400 || resp.StatusCode > 499) {
		v.violation(req, resp.StatusCode, "the request is invalid by the description, and was not answered 4xx: %s", describe(errs))
	}
}

// undescribed checks the answer to a request whose path or method the
// description does not hold: 404 endpoint-not-found (not-found is a
// missing session's), or 405 method-not-allowed.
func (v *Validator) undescribed(req *http.Request, resp *http.Response, errs []*verrors.ValidationError) {
	status, typ := http.StatusNotFound, "https://correx.dev/problems/endpoint-not-found"
	for _, e := range errs {
		if e.ValidationSubType == helpers.ValidationMissingOperation {
			status, typ = http.StatusMethodNotAllowed, "https://correx.dev/problems/method-not-allowed"
		}
	}
	if resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(req.URL.Path, "/v1/") {
		// Authentication comes before routing under /v1/: a caller without
		// a valid token learns nothing of which paths exist.
		status, typ = http.StatusUnauthorized, "https://correx.dev/problems/unauthenticated"
	}
	if resp.StatusCode != status {
		v.violation(req, resp.StatusCode, "neither the path nor its method is described (%s), so the answer must be %d", describe(errs), status)
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	b, _ := io.ReadAll(resp.Body)
	if mt != "application/problem+json" || json.Unmarshal(b, &p) != nil || p.Type != typ || p.Status != status {
		v.violation(req, resp.StatusCode, "a path or method not described must be answered with a problem of type %s, got %s %q", typ, mt, b)
	}
}

func describe(errs []*verrors.ValidationError) string {
	var parts []string
	for _, e := range errs {
		s := e.Message
		if e.Reason != "" && e.Reason != e.Message {
			s += " (" + e.Reason + ")"
		}
		for _, f := range e.SchemaValidationErrors {
			s += fmt.Sprintf("; %s at %s", f.Reason, f.FieldPath)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// sse checks each event of a stream as the caller reads it.
type sse struct {
	v      *Validator
	req    *http.Request
	body   io.ReadCloser
	schema map[string]*base.Schema
	line   bytes.Buffer
	event  string
	data   []byte
	isData bool // a data line was read since the last event
}

func (e *sse) Read(p []byte) (int, error) {
	n, err := e.body.Read(p)
	for _, c := range p[:n] {
		if c != '\n' {
			e.line.WriteByte(c)
			continue
		}
		e.field(e.line.Bytes())
		e.line.Reset()
	}
	return n, err
}

func (e *sse) Close() error { return e.body.Close() }

// field takes one line of the stream (text/event-stream, as the services
// write it: "\n" line ends, "field: value").
func (e *sse) field(line []byte) {
	switch {
	case len(line) == 0:
		e.dispatch()
	case line[0] == ':':
	default:
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			e.event = string(value)
		case "data":
			if e.isData {
				e.data = append(e.data, '\n')
			}
			e.data, e.isData = append(e.data, value...), true
		case "id", "retry":
		default:
			e.v.violation(e.req, http.StatusOK, "SSE field %q is not one the stream writes", name)
		}
	}
}

func (e *sse) dispatch() {
	event, data, isData := e.event, e.data, e.isData
	e.event, e.data, e.isData = "", nil, false
	if !isData {
		return // an id-only event
	}
	e.v.checked.Add(1)
	validated.Add(1)
	if event == "" {
		event = "message"
	}
	s, ok := e.schema[event]
	if !ok {
		e.v.violation(e.req, http.StatusOK, "SSE event %q is not described (x-correx-events)", event)
		return
	}
	if ok, errs := e.v.schema.ValidateSchemaBytes(s, data); !ok {
		e.v.violation(e.req, http.StatusOK, "SSE event %q: %s: %s", event, describe(errs), data)
	}
}

// wrapStream returns body checking each SSE event against the schemas of
// req's described path.
func (v *Validator) wrapStream(req *http.Request, body io.ReadCloser) io.ReadCloser {
	route, errs := paths.ResolveRoute(req, v.model, v.opts)
	if route == nil || len(errs) > 0 {
		return body // reported by check
	}
	return &sse{v: v, req: req, body: body, schema: v.events[route.Path]}
}
