package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Limits of one ingest request (README, HTTP API); Send and the Batcher split
// larger inputs.
const (
	MaxRequestEvents = 1000
	MaxRequestBytes  = 1 << 20
)

// bodyOverhead is what a request body holds beyond its events and one
// separator byte each: nothing in NDJSON.
const bodyOverhead = 0

// Position is where an event sits in the events topic: a partition and an
// offset. Its String form "P:O" is the query API's minPosition, and
// ParsePosition reads it back.
type Position = wire.Position

// ParsePosition reads a position in its String form "P:O" (the `position`
// of ingest's answer, the query API's minPosition): a partition and an
// offset, both non-negative. Anything else is an error matching
// ErrBadPosition.
func ParsePosition(s string) (Position, error) {
	p, err := wire.ParsePosition(s)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %q", ErrBadPosition, s)
	}
	return p, nil
}

// Accepted is where ingest wrote one event (pkg/wire's, as ingest writes
// it); Position returns its position.
type Accepted = wire.Accepted

// Result is what Send confirmed: Accepted[i] is where events[i] was written,
// or the zero Accepted (EventID "") when it was not confirmed.
type Result struct {
	Accepted []Accepted
	// Resent counts requests sent again after an answer or a failure that
	// may have left some of their events written (503, 502, 504, a
	// transport error): those sessions may hold duplicates that only Kafka
	// saw (counters.events and counters.duplicates count them).
	Resent int
	// Throttled counts requests sent again after a 429 (nothing written).
	Throttled int
}

// item is one encoded event and its index in the caller's call.
type item struct {
	idx int
	id  string
	sid string // the session id
	raw []byte
}

func encode(i int, e *Event) (item, *ValidationError) {
	refuse := func(field, msg string, cause error) *ValidationError {
		return &ValidationError{Op: "send", Detail: "refused before sending", local: cause,
			Problems: []FieldProblem{{Index: i, EventID: e.ID, Field: field, Message: msg}}}
	}
	if e.ID == "" {
		// Ingest would assign one, different at each resend: a retry could
		// then double the event's effect.
		return item{}, refuse("eventId", "required: build events with the constructors, or set EventID, so that a resend carries the same id", ErrInvalidEvent)
	}
	if e.err == nil && !fsm.ValidNewSessionID(e.SessionID) { // an Event built without a constructor
		err := sessionIDError(e.SessionID)
		return item{}, refuse("sessionId", err.Error(), fmt.Errorf("%w: %w", ErrInvalidEvent, err))
	}
	if e.err != nil {
		field := e.errField
		if field == "" {
			field = "event"
		}
		return item{}, refuse(field, e.err.Error(), e.err) // e.err matches ErrInvalidEvent
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return item{}, refuse("payload", err.Error(), fmt.Errorf("%w: payload: %w", ErrInvalidEvent, err))
	}
	return item{idx: i, id: e.ID, sid: e.SessionID, raw: raw}, nil
}

// encodeAll encodes events, or refuses them with one *ValidationError that
// names every event the client refuses.
func encodeAll(events []Event) ([]item, error) {
	items := make([]item, len(events))
	var refused *ValidationError
	for i := range events {
		it, err := encode(i, &events[i])
		switch {
		case err == nil:
			items[i] = it
		case refused == nil:
			refused = err
		default:
			refused.Problems = append(refused.Problems, err.Problems...)
		}
	}
	if refused != nil {
		return nil, refused
	}
	return items, nil
}

// Send writes events to ingest and returns where each was written. Events
// are sent in the order given, in requests of at most MaxRequestEvents
// events and MaxRequestBytes bytes, one request at a time, so the events of
// one session keep their order.
//
// A request answered 429, 502, 503 or 504, or lost to a transport error
// (refused, reset or dropped connection, a timed-out attempt), is retried
// with the policy of the Retry option. A 503 lists the events Kafka
// confirmed: the retry resends exactly the others, with the same ids; after
// a transport error the whole request is resent, since it may have been
// written. Either way a resent event that had been written is counted by
// the fold as a duplicate, so retries never double an effect (within the
// duplicate window: a session's next 128 events).
//
// Errors: a *ValidationError (400, or events the client refuses before any
// I/O: an Err, a session id outside the rule) names each refused event by its
// index in events; nothing of its request was written, and the requests
// before it were (none when the client refused). A *SendError says retries
// ran out; the Result then holds what was confirmed. Other refusals are a
// *StatusError (401, 403, 413, 415).
func (c *Client) Send(ctx context.Context, events ...Event) (Result, error) {
	res := Result{Accepted: make([]Accepted, len(events))}
	items, err := encodeAll(events)
	if err != nil {
		return res, err
	}
	for len(items) > 0 {
		n, size := 0, bodyOverhead
		for n < len(items) && n < MaxRequestEvents {
			add := len(items[n].raw) + 1 // its newline
			if n > 0 && size+add > MaxRequestBytes {
				break
			}
			size += add
			n++
		}
		if err := c.sendBatch(ctx, items[:n], res.Accepted, &res); err != nil {
			return res, err
		}
		items = items[n:]
	}
	return res, nil
}

// sendBatch sends one request's worth of events with retries, filling
// out[item.idx] for each confirmed event and counting retries in res (nil:
// not counted).
func (c *Client) sendBatch(ctx context.Context, items []item, out []Accepted, res *Result) error {
	remaining := items
	var buf bytes.Buffer
	for attempt := 1; ; attempt++ {
		acc, err := c.post(ctx, &buf, remaining)
		if inOrder(acc, remaining) { // a 202 lists the events in the order sent
			for i, it := range remaining {
				out[it.idx] = acc[i]
			}
			remaining = nil
		} else if len(acc) > 0 {
			byID := make(map[string]Accepted, len(acc))
			for _, a := range acc {
				byID[a.EventID] = a
			}
			left := remaining[:0:0]
			for _, it := range remaining {
				if a, ok := byID[it.id]; ok {
					out[it.idx] = a
				} else {
					left = append(left, it)
				}
			}
			remaining = left
		}
		if err == nil || len(remaining) == 0 {
			return nil
		}
		var ve *ValidationError
		if errors.As(err, &ve) {
			for i := range ve.Problems {
				p := &ve.Problems[i]
				if p.Index >= 0 && p.Index < len(remaining) {
					p.EventID = remaining[p.Index].id
					p.Index = remaining[p.Index].idx
				}
			}
			return ve
		}
		var se *StatusError
		isStatus := errors.As(err, &se)
		if isStatus && !se.Temporary() {
			return se // refused (401, 403, 413, 415, ...): sending again cannot help
		}
		if (!isStatus && ctx.Err() != nil) || c.retry.gaveUp(err, attempt) {
			return &SendError{Attempts: attempt, Unconfirmed: ids(remaining), Err: err}
		}
		var after time.Duration
		if se != nil {
			after = se.RetryAfter
		}
		if res != nil {
			if se != nil && se.Status == http.StatusTooManyRequests {
				res.Throttled++
			} else {
				res.Resent++
			}
		}
		if werr := backoff.Sleep(ctx, c.retry.backoff(attempt, after)); werr != nil {
			return &SendError{Attempts: attempt, Unconfirmed: ids(remaining), Err: errors.Join(err, werr)}
		}
	}
}

func inOrder(acc []Accepted, items []item) bool {
	if len(acc) != len(items) {
		return false
	}
	for i := range acc {
		if acc[i].EventID != items[i].id {
			return false
		}
	}
	return true
}

func ids(items []item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.id
	}
	return out
}

// backoff is the wait before attempt+1 (attempts count from 1):
// exponential from min, capped at max, jittered into [d/2, d], and at
// least the server's Retry-After.
func (r retryPolicy) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := backoff.Exponential{Min: r.min, Max: r.max, Jitter: true}.Wait(attempt - 1)
	return max(d, retryAfter)
}

// problem is a problem+json answer as the client reads it: pkg/wire's
// document, which the services write, with the extension member of
// ingest's 503, the events Kafka confirmed.
type problem struct {
	wire.Problem
	Accepted []Accepted `json:"accepted"`
}

// fieldProblems returns a 400's validation problems as the client names
// them (EventID is the caller's to fill).
func fieldProblems(errs []wire.FieldError) []FieldProblem {
	out := make([]FieldProblem, len(errs))
	for i, e := range errs {
		out[i] = FieldProblem{Index: e.Index, Field: e.Field, Message: e.Message}
	}
	return out
}

// ingestAnswer is ingest's 202, as ingest writes it.
type ingestAnswer = wire.IngestAnswer

// maxAnswerBytes bounds what the client reads of an answer: a 202 for 1000
// events is about 80 KB.
const maxAnswerBytes = 4 << 20

// post sends one request. It returns the events confirmed (all of them on
// 202; the 503 body's accepted list otherwise) and an error for anything
// but 202.
func (c *Client) post(ctx context.Context, buf *bytes.Buffer, items []item) ([]Accepted, error) {
	// NDJSON: ingest splits it by lines, cheaper than decoding an
	// {"events": [...]} document first; json.Marshal never writes a raw
	// newline inside an event.
	buf.Reset()
	size := 0
	for _, it := range items {
		size += len(it.raw) + 1
	}
	buf.Grow(size)
	for _, it := range items {
		buf.Write(it.raw)
		buf.WriteByte('\n')
	}
	actx, cancel := context.WithTimeout(ctx, c.retry.reqTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.ingest.String(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	c.setHeaders(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		// The request may have been written; the caller resends it all.
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode == http.StatusAccepted {
		if acc, ok := parseAccepted(body, len(items)); ok {
			return acc, nil
		}
		var ans ingestAnswer
		if err := json.Unmarshal(body, &ans); err != nil {
			return nil, fmt.Errorf("decoding the answer: %w", err)
		}
		return ans.Accepted, nil
	}
	p, se := statusError("send", resp, body)
	if resp.StatusCode == http.StatusBadRequest && len(p.Errors) > 0 {
		return nil, &ValidationError{Op: "send", Detail: p.Detail, Problems: fieldProblems(p.Errors)}
	}
	return p.Accepted, se
}

// parseAccepted reads the accepted list of a 202 in the exact form ingest
// writes it ({"accepted":[{"eventId":"...","partition":N,"offset":N},...],
// ...}), about ten times faster than encoding/json; anything else reports
// false and the caller decodes with encoding/json.
func parseAccepted(b []byte, n int) ([]Accepted, bool) {
	const head = `{"accepted":[`
	if !bytes.HasPrefix(b, []byte(head)) {
		return nil, false
	}
	b = b[len(head):]
	out := make([]Accepted, 0, n)
	for len(b) > 0 && b[0] != ']' {
		var a Accepted
		var ok bool
		if b, ok = cutPrefix(b, `{"eventId":"`); !ok {
			return nil, false
		}
		i := bytes.IndexByte(b, '"')
		if i < 0 || !plainASCII(b[:i]) {
			return nil, false // escapes, or bytes encoding/json would replace
		}
		a.EventID = string(b[:i])
		b = b[i+1:]
		var p, o int64
		if b, ok = cutPrefix(b, `,"partition":`); !ok {
			return nil, false
		}
		if p, b, ok = cutInt(b); !ok {
			return nil, false
		}
		if b, ok = cutPrefix(b, `,"offset":`); !ok {
			return nil, false
		}
		if o, b, ok = cutInt(b); !ok {
			return nil, false
		}
		if b, ok = cutPrefix(b, `}`); !ok || p < 0 || p > 1<<31-1 {
			return nil, false
		}
		a.Partition, a.Offset = int32(p), o
		out = append(out, a)
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
		}
	}
	if len(b) == 0 {
		return nil, false
	}
	return out, true
}

// plainASCII reports whether b is printable ASCII without escapes: text
// that encoding/json decodes to the same bytes.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

func cutPrefix(b []byte, p string) ([]byte, bool) {
	if !bytes.HasPrefix(b, []byte(p)) {
		return b, false
	}
	return b[len(p):], true
}

func cutInt(b []byte) (int64, []byte, bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i > 18 {
		return 0, b, false
	}
	v, err := strconv.ParseInt(string(b[:i]), 10, 64)
	return v, b[i:], err == nil
}

// statusError reads a non-success answer.
func statusError(op string, resp *http.Response, body []byte) (problem, *StatusError) {
	var p problem
	_ = json.Unmarshal(body, &p) // not every answer is problem+json (a proxy's 502)
	se := &StatusError{Op: op, Status: resp.StatusCode, Type: p.Type, Title: p.Title, Detail: p.Detail,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	return p, se
}

// parseRetryAfter reads seconds or an HTTP date; at most a minute, so that
// a wrong header cannot stall a client for long.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return min(max(d, 0), time.Minute)
}
