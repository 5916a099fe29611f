// Package wire holds the shapes correx-sessions puts on the wire for its
// readers: Change, the change feed's record (the value of each record of
// "<events topic>.changes" and the data of each change of the query
// service's watch stream), with its JSON encoding and decoding; Snapshot
// and its members (Counters, Transition, Approval, ...), a session's
// snapshot as the query service serves it, written once: pkg/snapshot
// builds one to encode its snapshots (Snapshot.Wire, MarshalJSON) and
// reads its JSON form through it, pkg/client decodes the service's answers
// into it; HistoryPage and HistoryEntry, a page of a session's history as
// the query service answers it; Problem, the RFC 9457 problem document of
// every error answer, which internal/httpx writes and pkg/client reads;
// and Position, where an event sits in the events topic, with the "P:O"
// form the HTTP API writes and reads.
//
// It imports nothing but the standard library, so that a program that only
// reads those shapes (pkg/client, which speaks HTTP) links no Kafka or
// Redis client: pkg/feed, which consumes the feed from Kafka and keeps its
// checkpoint in Redis, and pkg/snapshot, which stores snapshots in Redis,
// name these types as aliases (pkg/client names the snapshot's too). The
// name says what the package is about at its call sites: wire.Change,
// wire.Snapshot and wire.Position are the forms exchanged, not the
// consumer's or the store's.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Outcomes of an event in a change record.
const (
	Applied  = "applied"
	Rejected = "rejected"
)

// Position is where an event sits in the events topic: a partition and an
// offset.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Less orders positions of one partition by offset, and of different
// partitions by partition.
func (p Position) Less(q Position) bool {
	if p.Partition != q.Partition {
		return p.Partition < q.Partition
	}
	return p.Offset < q.Offset
}

// String is "partition:offset" ("P:O"): the position ingest answers and the
// query API's minPosition.
func (p Position) String() string {
	return strconv.FormatInt(int64(p.Partition), 10) + ":" + strconv.FormatInt(p.Offset, 10)
}

// ErrBadPosition is wrapped by ParsePosition's error.
var ErrBadPosition = errors.New("position must be partition:offset")

// ParsePosition reads a position in its String form "P:O": a partition
// (32 bits) and an offset (64 bits), both non-negative decimal integers.
// Anything else is an error wrapping ErrBadPosition.
func ParsePosition(s string) (Position, error) {
	ps, os, ok := strings.Cut(s, ":")
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if !ok || err1 != nil || err2 != nil || p < 0 || o < 0 {
		return Position{}, fmt.Errorf("%w: %q", ErrBadPosition, s)
	}
	return Position{Partition: int32(p), Offset: o}, nil
}

// Change is one record of the change feed: what one event did to its
// session. From and To are the states before and after (equal for an
// applied custom event; To is the unchanged state for a rejection); Version
// is the session's version after the event; Reason is the rejection's;
// FailureCategory and FailureCode are the failure's, on a transition to
// FAILED (docs/lifecycle.md, "Structured failures").
type Change struct {
	SessionID       string            `json:"sessionId"`
	Version         uint64            `json:"version"`
	Position        Position          `json:"position"`
	EventID         string            `json:"eventId"`
	Type            string            `json:"type"`
	OccurredAt      time.Time         `json:"occurredAt"`
	Outcome         string            `json:"outcome"`
	Reason          string            `json:"reason,omitempty"`
	From            string            `json:"from,omitempty"`
	To              string            `json:"to"`
	Terminal        bool              `json:"terminal"`
	Labels          map[string]string `json:"labels,omitempty"`
	ParentSessionID string            `json:"parentSessionId,omitempty"`
	CorrelationID   string            `json:"correlationId,omitempty"`
	FailureCategory string            `json:"failureCategory,omitempty"`
	FailureCode     string            `json:"failureCode,omitempty"`
}

// Key is the change's idempotency key: the session and the event's position.
type Key struct {
	SessionID string
	Position  Position
}

// Key returns the change's idempotency key.
func (c *Change) Key() Key { return Key{c.SessionID, c.Position} }

// Transition reports whether c is an applied transition: a change of
// state (the creation included) or the escalation of a graceful
// CANCELLING to forced, a CancellationRequested whose From and To are both
// CANCELLING. The other applied changes are custom events
// ("x.<vendor>.<Name>"), which never change a state.
func (c *Change) Transition() bool {
	return c.Outcome == Applied && !strings.HasPrefix(c.Type, "x.")
}

// AppendJSON appends the record value of c: compact JSON with members in a
// fixed order, labels sorted by key, times in RFC 3339 with nanoseconds in
// UTC and no HTML escaping (encoding/json's encoding of c with
// SetEscapeHTML(false) and OccurredAt in UTC), so that the same change
// always encodes to the same bytes (a record written again after a crash is
// byte-identical).
func (c *Change) AppendJSON(dst []byte) []byte {
	if len(c.Labels) == 0 {
		return c.AppendJSONWithLabels(dst, 0, nil)
	}
	var kb [16]string
	keys := kb[:0]
	for k := range c.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return c.AppendJSONWithLabels(dst, len(keys), func(i int) (string, string) { return keys[i], c.Labels[keys[i]] })
}

// AppendJSONWithLabels is AppendJSON with n labels, label(0) to
// label(n-1), in place of c.Labels, for a writer that keeps a session's
// labels as a list rather than a map (the projector): the bytes of
// AppendJSON of c with c.Labels holding them (a repeated key holds its last
// value). Labels given in increasing key order are the fast case.
//
// Written by hand where encoding/json would write the same bytes: every
// string printable ASCII without '"' or '\\', labels in strictly increasing
// key order and a year from 0 to 9999; otherwise encoding/json writes it.
// The change feed has a record per transition, and encoding/json's
// reflection was most of what it cost the projector.
func (c *Change) AppendJSONWithLabels(dst []byte, n int, label func(i int) (key, value string)) []byte {
	if !c.plain(n, label) {
		return appendEncoded(dst, c, n, label)
	}
	dst = append(dst, `{"sessionId":"`...)
	dst = append(dst, c.SessionID...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendUint(dst, c.Version, 10)
	dst = append(dst, `,"position":{"partition":`...)
	dst = strconv.AppendInt(dst, int64(c.Position.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, c.Position.Offset, 10)
	dst = append(dst, `},"eventId":"`...)
	dst = append(dst, c.EventID...)
	dst = append(dst, `","type":"`...)
	dst = append(dst, c.Type...)
	dst = append(dst, `","occurredAt":"`...)
	dst = c.OccurredAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","outcome":"`...)
	dst = append(dst, c.Outcome...)
	dst = append(dst, '"')
	dst = appendMember(dst, "reason", c.Reason)
	dst = appendMember(dst, "from", c.From)
	dst = append(dst, `,"to":"`...)
	dst = append(dst, c.To...)
	dst = append(dst, `","terminal":`...)
	dst = strconv.AppendBool(dst, c.Terminal)
	for i := range n {
		if i == 0 {
			dst = append(dst, `,"labels":{"`...)
		} else {
			dst = append(dst, `,"`...)
		}
		k, v := label(i)
		dst = append(dst, k...)
		dst = append(dst, `":"`...)
		dst = append(dst, v...)
		dst = append(dst, '"')
	}
	if n > 0 {
		dst = append(dst, '}')
	}
	dst = appendMember(dst, "parentSessionId", c.ParentSessionID)
	dst = appendMember(dst, "correlationId", c.CorrelationID)
	dst = appendMember(dst, "failureCategory", c.FailureCategory)
	dst = appendMember(dst, "failureCode", c.FailureCode)
	return append(dst, '}')
}

// appendEncoded appends encoding/json's encoding of c with the n labels,
// its time in UTC and no HTML escaping.
func appendEncoded(dst []byte, c *Change, n int, label func(int) (string, string)) []byte {
	cc := *c
	cc.OccurredAt = c.OccurredAt.UTC()
	cc.Labels = nil
	if n > 0 {
		cc.Labels = make(map[string]string, n)
		for i := range n {
			k, v := label(i)
			cc.Labels[k] = v
		}
	}
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(&cc) // a Change always encodes (strings, numbers, a map of strings)
	out := buf.Bytes()
	return out[:len(out)-1] // Encode's newline
}

// appendMember appends ,"name":"value" unless value is empty (omitempty).
func appendMember(dst []byte, name, value string) []byte {
	if value == "" {
		return dst
	}
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":"`...)
	dst = append(dst, value...)
	return append(dst, '"')
}

// plain reports whether AppendJSONWithLabels may write c with the n labels
// itself.
func (c *Change) plain(n int, label func(int) (string, string)) bool {
	if y := c.OccurredAt.UTC().Year(); y < 0 || y > 9999 {
		return false
	}
	for _, s := range [...]string{c.SessionID, c.EventID, c.Type, c.Outcome, c.Reason, c.From, c.To, c.ParentSessionID, c.CorrelationID,
		c.FailureCategory, c.FailureCode} {
		if !plainString(s) {
			return false
		}
	}
	prev := ""
	for i := range n {
		k, v := label(i)
		if !plainString(k) || !plainString(v) || (i > 0 && prev >= k) {
			return false
		}
		prev = k
	}
	return true
}

// plainString reports whether s is printable ASCII without '"' or '\\',
// which encoding/json writes as it is.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}

// Decode reads a record value written by AppendJSON.
func Decode(value []byte, c *Change) error {
	*c = Change{}
	if err := json.Unmarshal(value, c); err != nil {
		return fmt.Errorf("feed: decoding a change: %w", err)
	}
	if c.SessionID == "" || c.EventID == "" || (c.Outcome != Applied && c.Outcome != Rejected) {
		return fmt.Errorf("feed: decoding a change: sessionId, eventId and an outcome of %q or %q are required", Applied, Rejected)
	}
	return nil
}
