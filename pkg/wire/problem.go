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
