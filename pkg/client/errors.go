package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/wire"
)

// Sentinel errors. Match them with errors.Is; the errors returned wrap them
// with the operation and the key. Those that only appear wrapped in such an
// error (all but ErrClosed and ErrBadPosition) carry no "client:" prefix of
// their own, so that a message names the package once.
var (
	// ErrNotFound: the session does not exist, or is outside the token's
	// session-id prefix (the service answers both alike).
	ErrNotFound = errors.New("session not found")
	// ErrClosed: the Batcher was closed before the events were added.
	ErrClosed = errors.New("client: batcher closed")
	// ErrCursorExpired: a watch cursor is older than the change feed's
	// retention (410). Read the snapshots and watch again without a cursor.
	ErrCursorExpired = errors.New("watch cursor expired")
	// ErrInvalidEvent: an event was built with a value that cannot be
	// encoded (a custom payload that is not JSON, a failed id source), or
	// without an id or with an invalid session id; it is never sent. Its
	// Err matches it, and so does the *ValidationError that Send and the
	// Batcher return for it before any I/O. A 400 from ingest does not:
	// that is a *ValidationError alone.
	ErrInvalidEvent = errors.New("invalid event")
	// ErrInvalidSessionID: a session id outside the service's rule: 1-128
	// characters of [A-Za-z0-9._:-], not only dots (no "/", no space, not
	// "." or ".."; pkg/fsm's ValidNewSessionID). Get and AwaitState return
	// it before any I/O; an event built with such an id matches
	// ErrInvalidEvent and is never sent.
	ErrInvalidSessionID = errors.New("invalid session id")
	// ErrEnded: AwaitState's session ended in a state other than those
	// awaited, so it can never reach one.
	ErrEnded = errors.New("session ended")
	// ErrBadPosition: ParsePosition's input is not "partition:offset".
	ErrBadPosition = errors.New("client: position must be partition:offset")
)

// FieldProblem is one problem of one event, as ingest names it.
type FieldProblem struct {
	// Index is the event's index in the caller's call (Send, SendAndWait)
	// or in the batch the Batcher sent (Batcher results carry the event
	// itself, so the index matters less there).
	Index int `json:"index"`
	// EventID is the refused event's id ("" when the index is out of range).
	EventID string `json:"eventId,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError names every refused event with its field problems:
// either ingest answered 400, or the client refused the events before any
// I/O (Detail "refused before sending"; the error then matches
// ErrInvalidEvent, and the first refused event's own error, such as
// ErrInvalidSessionID). Nothing of the request was written. It is never
// retried.
type ValidationError struct {
	Op       string
	Detail   string
	Problems []FieldProblem

	local error // why the client refused the first event itself; nil for a 400
}

// Unwrap returns why the client refused the events before sending them
// (matching ErrInvalidEvent), or nil for a 400 from ingest.
func (e *ValidationError) Unwrap() error { return e.local }

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "client: %s: invalid events", e.Op)
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	for i, p := range e.Problems {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(e.Problems)-i)
			break
		}
		fmt.Fprintf(&b, "; event %d %s: %s", p.Index, p.Field, p.Message)
	}
	return b.String()
}

// StatusError is an answer other than success from a service, with its
// problem+json members when the body had them.
type StatusError struct {
	Op string // "send", "get", "list", "history", "watch" (pkg/testkit adds its own)
	// SessionID is the session read (Get, History, the admin calls), ""
	// otherwise.
	SessionID string
	Status    int
	Type      string // the problem type URI
	Title     string
	Detail    string
	// RetryAfter is the answer's Retry-After, zero when absent.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := "client: " + e.Op
	if e.SessionID != "" {
		s += " " + e.SessionID
	}
	return s + ": " + e.reason()
}

// reason is the message without the operation: the status and the
// problem's detail or title.
func (e *StatusError) reason() string {
	s := "status " + strconv.Itoa(e.Status)
	if e.Detail != "" {
		s += ": " + e.Detail
	} else if e.Title != "" {
		s += ": " + e.Title
	}
	return s
}

// Unwrap returns the sentinel the status maps to (ErrNotFound for 404,
// ErrCursorExpired for 410), or nil. It depends on Status alone, so a
// StatusError built elsewhere (pkg/testkit builds them) matches alike,
// except for a 404 whose problem type is endpoint-not-found: no route
// serves the URL (a wrong base URL, or the other service's), which says
// nothing about a session, so it matches no sentinel.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case http.StatusNotFound:
		if e.Type == wire.ProblemEndpointNotFound {
			return nil
		}
		return ErrNotFound
	case http.StatusGone:
		return ErrCursorExpired
	}
	return nil
}

// Temporary reports whether the request may succeed when sent again: 429,
// 502, 503 and 504.
func (e *StatusError) Temporary() bool { return retryableStatus(e.Status) }

// SendError is returned when retries ran out (or the context ended) before
// every event was confirmed. Confirmed events are in the Result returned
// beside it; Unconfirmed lists the ids of the others, which may or may not
// have been written (resending them is safe: the fold counts a resent id as
// a duplicate, within the window of docs/lifecycle.md).
type SendError struct {
	Attempts    int
	Unconfirmed []string
	Err         error // the last failure
}

func (e *SendError) Error() string {
	events := "events"
	if len(e.Unconfirmed) == 1 {
		events = "event"
	}
	return fmt.Sprintf("client: send: %d %s unconfirmed after %d attempts: %s", len(e.Unconfirmed), events, e.Attempts, cause(e.Err))
}

// cause is the message of a failure inside a *SendError or *ReadError,
// which already name the package and the operation: a *StatusError's
// without them.
func cause(err error) string {
	if se, ok := err.(*StatusError); ok {
		return se.reason()
	}
	return err.Error()
}

func (e *SendError) Unwrap() error { return e.Err }

// ReadError is returned by Get, List, Watch and AwaitState when a read
// failed for a reason other than the service's refusal (which is a
// *StatusError): retries ran out, the context ended, or a failure that
// retrying cannot cure (see the Retry option). Err is the last failure.
type ReadError struct {
	Op        string // "get", "list", "watch", "await"
	SessionID string // Get's and AwaitState's session, "" otherwise
	Attempts  int
	Err       error
}

func (e *ReadError) Error() string {
	s := "client: " + e.Op
	if e.SessionID != "" {
		s += " " + e.SessionID
	}
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("%s: failed after %d %s: %s", s, e.Attempts, attempts, cause(e.Err))
}

func (e *ReadError) Unwrap() error { return e.Err }

func retryableStatus(s int) bool {
	return s == 429 || s == 502 || s == 503 || s == 504
}
