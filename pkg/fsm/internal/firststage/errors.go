package firststage

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupportedVersion is returned (wrapped in a *ValidationError) when a
// record value names a format version this build cannot read. The projector
// sends such records to the dead-letter topic instead of guessing.
var ErrUnsupportedVersion = errors.New("unsupported envelope version")

// FieldError is one problem with one field of one event. Index is the event's
// position in a batch (0 for a single event); Field is the JSON path of the
// field, such as "sessionId" or "payload.timeout", or "" for the document.
type FieldError struct {
	Index   int    `json:"index"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// ValidationError lists every problem found in an event, not only the first,
// so that a client can fix them all in one round.
type ValidationError struct {
	Errors []FieldError
	// Version is set when the only reason is an unknown format version.
	version bool
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.Error()
	}
	return fmt.Sprintf("invalid event: %s", strings.Join(parts, "; "))
}

// Is lets errors.Is(err, ErrUnsupportedVersion) find version problems.
func (e *ValidationError) Is(target error) bool {
	return target == ErrUnsupportedVersion && e.version
}

// WithIndex returns a copy of the error whose field errors carry index i.
func (e *ValidationError) WithIndex(i int) *ValidationError {
	out := &ValidationError{Errors: make([]FieldError, len(e.Errors)), version: e.version}
	for j, fe := range e.Errors {
		fe.Index = i
		out.Errors[j] = fe
	}
	return out
}
