// Package httpx holds what the three HTTP services share: RFC 9457 problem
// details, the health endpoints, and a server runner with sane timeouts and
// graceful shutdown.
package httpx

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Problem is an RFC 9457 problem details document: pkg/wire's, which
// pkg/client reads. Errors lists validation problems as {index, field,
// message}; Extra holds extension members.
type Problem = wire.Problem

// FieldError is one validation problem of a Problem.
type FieldError = wire.FieldError

// FieldErrors returns the validation problems of a fold's ValidationError
// as a Problem lists them.
func FieldErrors(errs []fsm.FieldError) []FieldError {
	out := make([]FieldError, len(errs))
	for i, e := range errs {
		out[i] = FieldError(e)
	}
	return out
}

// Problem types: pkg/wire's, which clients switch on.
const (
	TypeValidation       = wire.ProblemValidation
	TypeTooLarge         = wire.ProblemTooLarge
	TypeMediaType        = wire.ProblemMediaType
	TypeUnavailable      = wire.ProblemUnavailable
	TypeNotFound         = wire.ProblemNotFound
	TypeEndpointNotFound = wire.ProblemEndpointNotFound
	TypeTimeout          = wire.ProblemTimeout
	TypeMethod           = wire.ProblemMethod
	TypeInternal         = wire.ProblemInternal
	TypeUnauthenticated  = wire.ProblemUnauthenticated
	TypeForbidden        = wire.ProblemForbidden
	TypeRateLimited      = wire.ProblemRateLimited
)

// Marshal is json.Marshal without HTML escaping: API JSON is not embedded in
// HTML, and escaping would turn each "<", ">" and "&" of a stored text into
// six bytes (\u003c). Every JSON answer of the services goes through it.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := EncodeJSON(&buf, v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// EncodeJSON writes v to buf as JSON without HTML escaping, followed by a
// newline.
func EncodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// WriteProblem writes p as application/problem+json with its status.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	b, err := Marshal(p)
	if err != nil {
		b = []byte(`{"type":"` + TypeInternal + `","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// Unavailable writes a 503 with Retry-After.
func Unavailable(w http.ResponseWriter, retryAfter time.Duration, detail string, extra map[string]any) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(retryAfter.Seconds()))))
	WriteProblem(w, Problem{Type: TypeUnavailable, Status: http.StatusServiceUnavailable, Detail: detail, Extra: extra})
}

// WriteJSON writes v as application/json with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := Marshal(v)
	writeEncoded(w, status, b, err)
}

// WriteMarshaled writes m's MarshalJSON as the answer, as WriteJSON would,
// without encoding/json's second pass over a Marshaler's bytes (it
// validates and compacts them again: half the cost of a snapshot's
// answer). For this module's types whose MarshalJSON already writes
// compact JSON through encoding/json without HTML escaping, such as
// snapshot.Snapshot; the answer's bytes are WriteJSON's.
func WriteMarshaled(w http.ResponseWriter, status int, m json.Marshaler) {
	b, err := m.MarshalJSON()
	writeEncoded(w, status, b, err)
}

// writeEncoded writes b, a JSON document, with status, or a 500 problem
// when encoding it failed (err).
func writeEncoded(w http.ResponseWriter, status int, b []byte, err error) {
	if err != nil {
		WriteProblem(w, Problem{Type: TypeInternal, Status: http.StatusInternalServerError, Detail: "encoding the response failed"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
