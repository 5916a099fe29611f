// Package wire holds the shapes correx-sessions puts on the wire for its
// readers: Change, the change feed's record (the value of each record of
// "<events topic>.changes" and the data of each change of the query
// service's watch stream), with its JSON encoding and decoding, and
// Position, where an event sits in the events topic, with the "P:O" form
// the HTTP API writes and reads.
//
// It imports nothing but the standard library, so that a program that only
// reads those shapes (pkg/client, which speaks HTTP) links no Kafka or
// Redis client: pkg/feed, which consumes the feed from Kafka and keeps its
// checkpoint in Redis, and pkg/snapshot, which stores snapshots in Redis,
// name these types as aliases. The name says what the package is about at
// its call sites: wire.Change and wire.Position are the forms exchanged,
// not the consumer's or the store's.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// String is "partition:offset", the form of the query API's minPosition.
func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Partition, p.Offset) }

// Change is one record of the change feed: what one event did to its
// session. From and To are the states before and after (equal for an
// applied custom event; To is the unchanged state for a rejection); Version
// is the session's version after the event; Reason is the rejection's.
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
}

// Key is the change's idempotency key: the session and the event's position.
type Key struct {
	SessionID string
	Position  Position
}

// Key returns the change's idempotency key.
func (c *Change) Key() Key { return Key{c.SessionID, c.Position} }

// AppendJSON appends the record value of c: compact JSON with members in a
// fixed order, labels sorted by key, times in RFC 3339 with nanoseconds in
// UTC and no HTML escaping, so that the same change always encodes to the
// same bytes (a record written again after a crash is byte-identical).
func (c *Change) AppendJSON(dst []byte) []byte {
	cc := *c
	cc.OccurredAt = c.OccurredAt.UTC()
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(&cc) // a Change always encodes (strings, numbers, a map of strings)
	out := buf.Bytes()
	return out[:len(out)-1] // Encode's newline
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
