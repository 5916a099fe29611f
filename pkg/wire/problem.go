package wire

import (
	"bytes"
	"encoding/json"
)

// Problem is an RFC 9457 problem details document (application/problem+json),
// the body of every error answer of the services: internal/httpx writes it,
// pkg/client reads it. Errors lists validation problems as {index, field,
// message}; Extra holds extension members, written beside the standard ones
// (one that names a standard member is left out).
type Problem struct {
	Type   string         `json:"type"`
	Title  string         `json:"title"`
	Status int            `json:"status"`
	Detail string         `json:"detail,omitempty"`
	Errors []FieldError   `json:"errors,omitempty"`
	Extra  map[string]any `json:"-"`
}

// Problem types: the stable URIs of Problem.Type, which clients can switch
// on. They are written here only; api/openapi.json lists the same set
// (components/schemas/ProblemType, checked by api's tests).
const (
	ProblemValidation  = "https://correx.dev/problems/validation"
	ProblemTooLarge    = "https://correx.dev/problems/too-large"
	ProblemMediaType   = "https://correx.dev/problems/unsupported-media-type"
	ProblemUnavailable = "https://correx.dev/problems/unavailable"
	ProblemNotFound    = "https://correx.dev/problems/not-found"
	// ProblemEndpointNotFound is the 404 of a path no route serves (a
	// wrong URL, or the other service's): not a missing session.
	ProblemEndpointNotFound = "https://correx.dev/problems/endpoint-not-found"
	ProblemTimeout          = "https://correx.dev/problems/timeout"
	ProblemMethod           = "https://correx.dev/problems/method-not-allowed"
	ProblemInternal         = "https://correx.dev/problems/internal"
	ProblemUnauthenticated  = "https://correx.dev/problems/unauthenticated"
	ProblemForbidden        = "https://correx.dev/problems/forbidden"
	ProblemRateLimited      = "https://correx.dev/problems/rate-limited"
	// ProblemCursorExpired is a watch cursor older than the change feed
	// keeps (410): list the sessions again and watch from the new cursor.
	ProblemCursorExpired = "https://correx.dev/problems/cursor-expired"
	// ProblemHistoryTruncated is a session whose first events the log no
	// longer holds (409), asked for a history or a version before them.
	ProblemHistoryTruncated = "https://correx.dev/problems/history-truncated"
)

// FieldError is one validation problem of a Problem: the index of the event
// at fault in its request, the field, and why.
type FieldError struct {
	Index   int    `json:"index"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// MarshalJSON writes the standard members and the extension members,
// without HTML escaping (a problem's detail is not embedded in HTML).
func (p Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	b, err := marshalNoEscape(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return b, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range p.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return marshalNoEscape(m)
}

// marshalNoEscape is json.Marshal without HTML escaping.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
