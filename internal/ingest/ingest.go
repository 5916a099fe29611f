// Package ingest is the HTTP front door: it validates session events and
// produces them to Kafka, keyed by session id so that each session's events
// stay in order on one partition.
//
// A request is all or nothing at validation: every event is checked before
// any is produced, and a request with one bad event produces nothing. Once
// produced, events are acknowledged by every in-sync replica (acks=all,
// idempotent producer). If Kafka cannot take a write the answer is 503 with
// Retry-After and the list of events that were written, if any; resending
// the whole request is safe because the projector recognises event ids it
// has already folded, within a bound: a resent event is a duplicate exactly
// when fewer than 128 events of the same session (applied or rejected) were
// folded after the original (fsm.IDWindow). A retry sent before the
// session's next 128 events is safe; one sent later is folded again.
package ingest

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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Limits of one request (README, HTTP API; docs/security.md, "Abuse limits").
const (
	MaxBodyBytes = 1 << 20
	MaxEvents    = 1000
)

// produceRetryAfter is what a 503 for events Kafka did not confirm advises.
const produceRetryAfter = time.Second

// Producer is what the handler needs from a Kafka client; *kgo.Client
// implements it.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Handler serves POST /v1/events.
type Handler struct {
	Producer Producer
	Topic    string
	// Now is the clock for occurredAt and UUIDv7 of events that lack them.
	Now func() time.Time
	Log *slog.Logger
	// ProduceTimeout bounds how long a request waits for Kafka (default
	// 10s); the answer is then 503.
	ProduceTimeout time.Duration
}

// Accepted is one produced event in a 202 answer (pkg/wire's, which
// pkg/client reads).
type Accepted = wire.Accepted

// Response is the 202 body (pkg/wire's).
type Response = wire.IngestAnswer

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	events, perr := h.parse(w, r)
	if perr != nil {
		httpx.WriteProblem(w, *perr)
		return
	}
	principal := auth.PrincipalFrom(r.Context())
	if perr := checkNamespace(principal.SessionPrefix(), events); perr != nil {
		httpx.WriteProblem(w, *perr)
		return
	}
	sentBy := sender(principal)
	now := h.now().UTC()
	for i := range events {
		if t := events[i].Type; sentBy != "" && (t == fsm.ApprovalGranted || t == fsm.ApprovalDenied) {
			events[i].SentBy = sentBy
		}
		if events[i].ID.IsZero() {
			id, err := fsm.NewEventID(now)
			if err != nil {
				httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: http.StatusInternalServerError, Detail: "could not assign an event id"})
				return
			}
			events[i].ID = id
		}
		if events[i].OccurredAt.IsZero() {
			events[i].OccurredAt = now
		}
	}
	h.produce(w, r.Context(), events)
}

// sender is the name ingest records as an approval decision's sentBy:
// the request's token's name, "" when authentication is off (there is no
// token to name).
func sender(p *auth.Principal) string {
	if p == nil || p.Anonymous {
		return ""
	}
	return p.Name
}

// checkNamespace refuses a request of a token bound to a session-id prefix
// (a tenant) when any of its events names a session outside the prefix,
// as its own id, as the predecessor it replaces or as its parent: 403, with the index and
// field of every such event, and nothing produced. The answer says nothing
// about the sessions named (whether they exist, whose they are).
func checkNamespace(prefix string, events []fsm.Event) *httpx.Problem {
	if prefix == "" {
		return nil
	}
	var outside []fsm.FieldError
	msg := "must start with " + strconv.Quote(prefix) + ", the session-id prefix of this token"
	for i := range events {
		if !strings.HasPrefix(events[i].SessionID, prefix) {
			outside = append(outside, fsm.FieldError{Index: i, Field: "sessionId", Message: msg})
		}
		if p := events[i].Fields.PredecessorSessionID; p != "" && !strings.HasPrefix(p, prefix) {
			outside = append(outside, fsm.FieldError{Index: i, Field: "payload.predecessorSessionId", Message: msg})
		}
		if p := events[i].Fields.ParentSessionID; p != "" && !strings.HasPrefix(p, prefix) {
			outside = append(outside, fsm.FieldError{Index: i, Field: "payload.parentSessionId", Message: msg})
		}
	}
	if len(outside) == 0 {
		return nil
	}
	return &httpx.Problem{Type: httpx.TypeForbidden, Status: http.StatusForbidden, Errors: httpx.FieldErrors(outside),
		Detail: fmt.Sprintf("%s outside this token's namespace; nothing was produced", count(len(outside), "event names a session", "events name sessions"))}
}

// Explainer is implemented by producers that can say why an error happened
// (kafka.Client names failed authentication).
type Explainer interface {
	Explain(error) error
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Handler) produce(w http.ResponseWriter, ctx context.Context, events []fsm.Event) {
	type result struct {
		partition int32
		offset    int64
		err       error
		done      bool
	}
	timeout := h.ProduceTimeout
	if timeout <= 0 {
		timeout = DefaultProduceTimeout
	}
	// The request's context does not cancel produces (a client going away
	// must not leave half a batch unknown), but the produce context does:
	// a record not yet sent to Kafka when it expires is failed, so that the
	// answer can say what happened to every event.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var mu sync.Mutex
	results := make([]result, len(events))
	remaining := len(events)
	allDone := make(chan struct{})
	for i := range events {
		e := &events[i]
		rec := &kgo.Record{
			Topic:   h.Topic,
			Key:     []byte(e.SessionID),
			Value:   fsm.AppendRecord(make([]byte, 0, 256+len(e.Payload)), e),
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderEventType, Value: []byte(e.TypeName())}},
			Context: ctx,
		}
		h.Producer.Produce(pctx, rec, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			results[i] = result{r.Partition, r.Offset, err, true}
			if remaining--; remaining == 0 {
				close(allDone)
			}
		})
	}
	// A record already sent to Kafka cannot be failed safely (idempotence),
	// so the wait itself is bounded too: what is still unconfirmed then is
	// reported as pending, and may yet be written.
	timer := time.NewTimer(timeout + 2*time.Second)
	defer timer.Stop()
	select {
	case <-allDone:
	case <-timer.C:
	}
	mu.Lock()
	snap := append([]result(nil), results...)
	mu.Unlock()

	resp := Response{Accepted: make([]Accepted, 0, len(events))}
	var failed, pending []map[string]any
	var firstErr error
	for i, res := range snap {
		switch {
		case !res.done:
			pending = append(pending, map[string]any{"index": i, "eventId": events[i].ID.String()})
		case res.err != nil:
			failed = append(failed, map[string]any{"index": i, "eventId": events[i].ID.String(), "error": res.err.Error()})
			firstErr = cmpErr(firstErr, res.err)
		default:
			resp.Accepted = append(resp.Accepted, Accepted{EventID: events[i].ID.String(), Partition: res.partition, Offset: res.offset})
			resp.Position = strconv.Itoa(int(res.partition)) + ":" + strconv.FormatInt(res.offset, 10)
		}
	}
	if len(failed)+len(pending) > 0 {
		if firstErr == nil {
			firstErr = errors.New("no answer from Kafka in time")
		}
		if ex, ok := h.Producer.(Explainer); ok {
			firstErr = ex.Explain(firstErr)
		}
		h.log().Warn("produce failed", "events", len(events), "failed", len(failed), "pending", len(pending), "err", firstErr)
		extra := map[string]any{"accepted": resp.Accepted, "failed": failed}
		if len(pending) > 0 {
			extra["pending"] = pending
		}
		httpx.Unavailable(w, produceRetryAfter, fmt.Sprintf("Kafka did not confirm %d of %d events (%v); accepted ones are written, "+
			"pending ones may still be; resending the whole request is safe", len(failed)+len(pending), len(events), firstErr), extra)
		return
	}
	httpx.WriteJSON(w, http.StatusAccepted, resp)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}

// parse reads and validates the body: one envelope, {"events": [...]}, or
// NDJSON. It returns every validation problem at once.
func (h *Handler) parse(w http.ResponseWriter, r *http.Request) ([]fsm.Event, *httpx.Problem) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || (mt != "application/json" && mt != "application/x-ndjson") {
		return nil, &httpx.Problem{Type: httpx.TypeMediaType, Status: http.StatusUnsupportedMediaType,
			Detail: fmt.Sprintf("Content-Type %q: send application/json (one event or {\"events\": [...]}) or application/x-ndjson", ct)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpx.Problem{Type: httpx.TypeTooLarge, Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("the body is over %d bytes; split it into several requests", MaxBodyBytes)}
		}
		return nil, &httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest, Detail: "reading the body failed: " + err.Error()}
	}
	return decodeBody(mt, body)
}

// decodeBody splits a body of media type mt (application/json or
// application/x-ndjson) into its events and validates each, reporting every
// problem at once. The events own their memory: nothing they hold aliases
// body.
func decodeBody(mt string, body []byte) ([]fsm.Event, *httpx.Problem) {
	var raws [][]byte
	if mt == "application/x-ndjson" {
		raws = splitNDJSON(body)
	} else {
		var perr *httpx.Problem
		if raws, perr = splitJSON(body); perr != nil {
			return nil, perr
		}
	}
	if len(raws) == 0 {
		return nil, &httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest, Detail: "no events in the request",
			Errors: []httpx.FieldError{{Field: "events", Message: "must hold at least one event"}}}
	}
	if len(raws) > MaxEvents {
		return nil, &httpx.Problem{Type: httpx.TypeTooLarge, Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("%d events in one request; the limit is %d", len(raws), MaxEvents)}
	}
	events := make([]fsm.Event, len(raws))
	var problems []fsm.FieldError
	for i, raw := range raws {
		if err := fsm.DecodeEnvelope(raw, &events[i], fsm.DecodeOptions{Ingest: true}); err != nil {
			var ve *fsm.ValidationError
			if errors.As(err, &ve) {
				problems = append(problems, ve.WithIndex(i).Errors...)
			} else {
				problems = append(problems, fsm.FieldError{Index: i, Message: err.Error()})
			}
		}
	}
	if len(problems) > 0 {
		return nil, &httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("%s in %s; nothing was produced", count(len(problems), "problem"), count(len(raws), "event")), Errors: httpx.FieldErrors(problems)}
	}
	return events, nil
}

// splitNDJSON returns the lines of an NDJSON body that hold something
// other than JSON whitespace, each trimmed of it, as slices of body. Lines
// end with LF or CRLF, and the last may lack its newline. A JSON text never
// holds a raw LF (strings escape it), so every LF ends a line.
//
// The slices alias body and stay valid as long as body does: the body is
// read whole (at most MaxBodyBytes) and split in place, never through a
// reused buffer.
func splitNDJSON(body []byte) [][]byte {
	var lines [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if line = trimJSONSpace(line); len(line) > 0 {
			lines = append(lines, line)
		}
	}
	return lines
}

// trimJSONSpace trims the whitespace JSON allows around a value (space,
// tab, CR, LF) and nothing else, so that a line is valid exactly when
// encoding/json finds it valid.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// splitJSON returns the events of a JSON body: the body itself when it is
// one envelope, or the members of "events" when it is a batch. It only
// finds where the top-level members and the batch's events begin and end
// (skipJSON): each event is validated when it is decoded
// (fsm.DecodeEnvelope), so a body is read once in full, not once by
// encoding/json and again by the decoder. What lies between the events
// (brackets, commas, whitespace) is checked here.
func splitJSON(body []byte) ([][]byte, *httpx.Problem) {
	bad := func(field, msg string) *httpx.Problem {
		return &httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest, Detail: msg,
			Errors: []httpx.FieldError{{Field: field, Message: msg}}}
	}
	malformed := func(what string) *httpx.Problem { return bad("", "malformed JSON: "+what) }
	i := skipJSONSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, bad("", "the body must be a JSON object: one event, or {\"events\": [...]}")
	}
	var events []byte
	keys := map[string]bool{}
	for i = skipJSONSpace(body, i+1); ; {
		if i < len(body) && body[i] == '}' && len(keys) == 0 {
			i++
			break
		}
		if i >= len(body) || body[i] != '"' {
			return nil, malformed(fmt.Sprintf("expected a member name at byte %d", i))
		}
		end, ok := skipJSON(body, i)
		if !ok {
			return nil, malformed("the body ends inside a member name")
		}
		key := string(body[i+1 : end-1])
		if strings.IndexByte(key, '\\') >= 0 {
			if json.Unmarshal(body[i:end], &key) != nil {
				return nil, malformed(fmt.Sprintf("invalid member name at byte %d", i))
			}
		}
		keys[key] = true
		if i = skipJSONSpace(body, end); i >= len(body) || body[i] != ':' {
			return nil, malformed(fmt.Sprintf("expected ':' at byte %d", i))
		}
		start := skipJSONSpace(body, i+1)
		if end, ok = skipJSON(body, start); !ok {
			return nil, malformed("the body ends inside a value")
		}
		if key == "events" {
			events = body[start:end] // the last one, as encoding/json reads duplicates
		}
		if i = skipJSONSpace(body, end); i < len(body) && body[i] == ',' {
			i = skipJSONSpace(body, i+1)
			continue
		}
		if i >= len(body) || body[i] != '}' {
			return nil, malformed(fmt.Sprintf("expected ',' or '}' at byte %d", i))
		}
		i++
		break
	}
	if i = skipJSONSpace(body, i); i < len(body) {
		return nil, malformed(fmt.Sprintf("data after the object at byte %d", i))
	}
	if !keys["events"] {
		return [][]byte{body}, nil
	}
	if len(keys) != 1 {
		return nil, bad("events", "a batch object holds only \"events\"")
	}
	if len(events) == 0 || events[0] != '[' {
		return nil, bad("events", "must be an array of events")
	}
	var out [][]byte
	j := skipJSONSpace(events, 1)
	if j < len(events) && events[j] == ']' {
		return out, nil
	}
	for {
		end, ok := skipJSON(events, j)
		if !ok || end == j {
			return nil, bad("events", "must be an array of events")
		}
		out = append(out, events[j:end])
		if j = skipJSONSpace(events, end); j < len(events) && events[j] == ',' {
			j = skipJSONSpace(events, j+1)
			continue
		}
		if j != len(events)-1 || events[j] != ']' {
			return nil, bad("events", "must be an array of events")
		}
		return out, nil
	}
}

// skipJSONSpace returns the first index at or after i that is not JSON
// whitespace.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipJSON returns the end of the JSON value that starts at i, following
// strings (and their escapes) and the nesting of brackets, and false when b
// ends first. It does not validate what it skips: numbers, literals and
// the insides of strings are the decoder's to check, and a value whose
// brackets do not pair (`[1}`) ends where its depth returns to zero, which
// the decoder then refuses.
func skipJSON(b []byte, i int) (int, bool) {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return i, false
			}
			if depth == 0 {
				return i + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, true // ends the scalar before it
			}
			if depth--; depth == 0 {
				return i + 1, true
			}
		case ',', ':', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i, true
			}
		}
	}
	return i, depth == 0
}

// count writes n with the singular noun, or with the plural (the noun and
// an "s" unless given), as a detail reads: "1 problem", "2 problems".
func count(n int, singular string, plural ...string) string {
	if n == 1 {
		return "1 " + singular
	}
	if len(plural) > 0 {
		return strconv.Itoa(n) + " " + plural[0]
	}
	return strconv.Itoa(n) + " " + singular + "s"
}
