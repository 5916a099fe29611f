package feed

import "github.com/correx/sessions/pkg/wire"

// The change record and its position are pkg/wire's, which imports only the
// standard library; they are named here too so that a consumer needs one
// import.

// Outcomes of an event in a change record (wire.Applied, wire.Rejected).
const (
	Applied  = wire.Applied
	Rejected = wire.Rejected
)

// Topic returns the change feed's topic for an events topic.
func Topic(eventsTopic string) string { return eventsTopic + ".changes" }

// Position is where an event sits in the events topic (wire.Position).
type Position = wire.Position

// Change is one record of the change feed (wire.Change): what one event
// did to its session.
type Change = wire.Change

// Key is a change's idempotency key (wire.Key): the session and the
// event's position.
type Key = wire.Key

// Decode reads a record value written by Change.AppendJSON (wire.Decode).
func Decode(value []byte, c *Change) error { return wire.Decode(value, c) }
