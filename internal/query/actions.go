package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
)

// The console's two routes beyond the read API: who the token is
// (GET /v1/whoami) and the actions on a session (POST
// /v1/sessions/{id}/actions), which the query service turns into one event
// and forwards to ingest with the caller's own Authorization header, so
// that ingest applies its ordinary validation, scopes (events:write) and
// tenant prefix. The page stays on one origin, and its CSP keeps
// connect-src 'self' (docs/security.md, "Actions from the console").

// Limits of an action request.
const (
	maxActionBody = 8 << 10
	// maxForwardAnswer bounds what is read of ingest's answer.
	maxForwardAnswer = 64 << 10
	// ForwardTimeout bounds a forwarded action: ingest waits up to 10 s
	// for Kafka, and 2 s more for what is in flight.
	ForwardTimeout = 15 * time.Second
)

// Actions are the actions POST /v1/sessions/{id}/actions takes, with the
// event type each one sends.
var Actions = map[string]fsm.EventType{
	"approve": fsm.ApprovalGranted,
	"deny":    fsm.ApprovalDenied,
	"cancel":  fsm.CancellationRequested,
	"pause":   fsm.SessionPaused,
	"resume":  fsm.SessionResumed,
}

const actionList = "approve, deny, cancel, pause or resume"

// requestIDRule is the form of an approval's requestId (docs/lifecycle.md,
// "Approvals that match their request").
var requestIDRule = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// actionRequest is the body of POST /v1/sessions/{id}/actions.
type actionRequest struct {
	Action    string `json:"action"`
	RequestID string `json:"requestId"`
	Reason    string `json:"reason"`
	Mode      string `json:"mode"`
}

// whoami is the answer of GET /v1/whoami.
type whoami struct {
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	Prefix    string   `json:"prefix"`
	Anonymous bool     `json:"anonymous"`
	// Actions says whether this query service forwards actions to ingest
	// (CORREX_INGEST_URL is set).
	Actions bool `json:"actions"`
}

// forwarder sends actions to ingest.
type forwarder struct {
	events *url.URL // <ingest>/v1/events; nil: actions are off
	client *http.Client
	log    *slog.Logger
}

// registerConsoleRoutes adds GET /v1/whoami and POST
// /v1/sessions/{id}/actions to mux; ingestURL "" turns actions off (503).
func registerConsoleRoutes(mux *http.ServeMux, ingestURL string, log *slog.Logger) {
	f := &forwarder{log: log, client: &http.Client{Timeout: ForwardTimeout,
		// An answer of ingest is passed on as it is, never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if ingestURL != "" {
		if u, err := url.Parse(ingestURL); err == nil {
			f.events = u.JoinPath("/v1/events")
		}
	}
	// Any valid token may ask who it is; the guard in front answers 401
	// without one.
	mux.HandleFunc("/v1/whoami", f.whoami)
	mux.Handle("/v1/sessions/{id}/actions", sessionRoute(http.MethodPost, f.action))
}

// ValidateIngestURL checks CORREX_INGEST_URL: empty, or an absolute http or
// https URL without query or fragment.
func ValidateIngestURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("CORREX_INGEST_URL: must be an absolute http:// or https:// URL of the ingest service, without credentials, query or fragment (got %q)", s)
	}
	return nil
}

func (f *forwarder) whoami(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	p := auth.PrincipalFrom(r.Context())
	if p == nil { // not behind the guard: fail closed
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnauthenticated, Status: http.StatusUnauthorized, Detail: "a bearer token is required"})
		return
	}
	out := whoami{Name: p.Name, Scopes: []string{}, Prefix: p.Prefix, Anonymous: p.Anonymous, Actions: f.events != nil}
	for _, s := range p.Scopes {
		out.Scopes = append(out.Scopes, string(s))
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
}

// action validates an action, turns it into its event and forwards it to
// ingest, passing ingest's answer back as it is (sessionRoute; the token's
// prefix is ingest's to check, as for any event).
func (f *forwarder) action(w http.ResponseWriter, r *http.Request, id string) {
	// JSON only: a cross-origin page can then not send one without a CORS
	// preflight, which this service never grants.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMediaType, Status: http.StatusUnsupportedMediaType,
			Detail: "Content-Type must be application/json"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	if err != nil {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeTooLarge, Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("an action is at most %d bytes", maxActionBody)})
		return
	}
	a, field, msg := decodeAction(body)
	if field != "" {
		badRequest(w, field, msg)
		return
	}
	event, field, msg := a.event(id, auth.PrincipalFrom(r.Context()))
	if field != "" {
		badRequest(w, field, msg)
		return
	}
	if f.events == nil {
		httpx.Unavailable(w, retryUnconfigured, "actions are off: this query service has no CORREX_INGEST_URL to forward them to", nil)
		return
	}
	f.forward(w, r, event)
}

// decodeAction reads an action's body as ingest reads an envelope
// (fsm.DecodeEnvelope): one JSON object whose members are named exactly
// (encoding/json would also take "Action" or "ACTION"), each at most once
// (encoding/json keeps the last), each a string. It returns the request,
// or the field at fault ("body" when the body is no such object) and why.
func decodeAction(body []byte) (actionRequest, string, string) {
	const shape = "must be one JSON object with action and, as the action allows, requestId, reason and mode"
	var a actionRequest
	fields := map[string]*string{"action": &a.Action, "requestId": &a.RequestID, "reason": &a.Reason, "mode": &a.Mode}
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return a, "body", shape
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return a, "body", shape
		}
		name, _ := t.(string) // a member name is always a string
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return a, "body", shape
		}
		dst, ok := fields[name]
		switch {
		case !ok:
			return a, truncateField(name), "unknown field; an action has action, requestId, reason and mode"
		case seen[name]:
			return a, name, "duplicate field"
		case len(val) == 0 || val[0] != '"' || json.Unmarshal(val, dst) != nil:
			return a, name, "must be a string"
		}
		seen[name] = true
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return a, "body", shape
	}
	if _, err := dec.Token(); err != io.EOF {
		return a, "body", shape
	}
	return a, "", ""
}

// truncateField bounds a member name echoed back as a field.
func truncateField(name string) string {
	if len(name) > 64 {
		return name[:64]
	}
	return name
}

// event returns the event of the action on session id, or the field at
// fault and why.
func (a *actionRequest) event(id string, p *auth.Principal) (map[string]any, string, string) {
	typ, ok := Actions[a.Action]
	if !ok {
		return nil, "action", "must be " + actionList
	}
	payload := map[string]any{}
	switch {
	case a.RequestID != "" && typ != fsm.ApprovalGranted && typ != fsm.ApprovalDenied:
		return nil, "requestId", "only approve and deny name a request"
	case a.RequestID != "" && !requestIDRule.MatchString(a.RequestID):
		return nil, "requestId", "must match " + requestIDRule.String()
	case a.Mode != "" && typ != fsm.CancellationRequested:
		return nil, "mode", "only cancel has a mode"
	case a.Mode != "" && a.Mode != "graceful" && a.Mode != "forced":
		return nil, "mode", "must be graceful or forced"
	case len(a.Reason) > fsm.MaxReasonBytes:
		return nil, "reason", fmt.Sprintf("is %d bytes; the limit is %d", len(a.Reason), fsm.MaxReasonBytes)
	case a.Reason != "" && (typ == fsm.SessionPaused || typ == fsm.SessionResumed):
		return nil, "reason", "only approve, deny and cancel carry a reason"
	}
	if a.RequestID != "" {
		payload["requestId"] = a.RequestID
	}
	if a.Reason != "" {
		payload["reason"] = a.Reason
	}
	if a.Mode != "" {
		payload["mode"] = a.Mode
	}
	if (typ == fsm.ApprovalGranted || typ == fsm.ApprovalDenied) && p != nil && !p.Anonymous {
		payload["by"] = p.Name // who decided: the token's name
	}
	e := map[string]any{"sessionId": id, "type": typ.String()}
	if len(payload) > 0 {
		e["payload"] = payload
	}
	return e, "", ""
}

// forward posts the event to ingest with the caller's Authorization and
// copies ingest's answer (status, type, body) back.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, event map[string]any) {
	body, err := json.Marshal(map[string]any{"events": []any{event}})
	if err != nil {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: http.StatusInternalServerError, Detail: "could not encode the event"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ForwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.events.String(), bytes.NewReader(body))
	if err != nil {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: http.StatusInternalServerError, Detail: "could not build the request to ingest"})
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if v := r.Header.Get("Authorization"); v != "" {
		req.Header.Set("Authorization", v)
	}
	if v := r.Header.Get("Traceparent"); v != "" {
		req.Header.Set("Traceparent", v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.log.Warn("action: ingest does not answer", "url", f.events.Redacted(), "err", err)
		detail := "ingest does not answer; retry"
		if errors.Is(err, context.DeadlineExceeded) {
			detail = "ingest did not answer in time; the action may or may not have been written: look at the session before retrying"
		}
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnavailable, Status: http.StatusBadGateway, Detail: detail})
		return
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardAnswer))
	if err != nil {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnavailable, Status: http.StatusBadGateway,
			Detail: "ingest's answer was cut; the action may or may not have been written: look at the session before retrying"})
		return
	}
	if ct := resp.Header.Get("Content-Type"); !strings.Contains(ct, "json") {
		// Not ingest: a proxy's page in between. Say so rather than pass
		// markup on.
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeUnavailable, Status: http.StatusBadGateway,
			Detail: fmt.Sprintf("the ingest URL answered %d with %q, not JSON", resp.StatusCode, ct)})
		return
	}
	for _, k := range []string{"Content-Type", "Retry-After", "WWW-Authenticate"} {
		if v := resp.Header.Get(k); v != "" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}
