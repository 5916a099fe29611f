package kafka

import (
	"fmt"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderOrigin marks the records the system produces on the events topic
// (the firer's TimeoutExpired, the projector's derived events) with the
// value OriginSystem. Ingest never sets it. It is what lets a reader tell
// the system's records, whose eventIds lie in the reserved space
// (fsm.DeriveEventID), from another producer's record that carries such
// an id (DecodeEvent).
const HeaderOrigin = "correx-origin"

// OriginSystem is HeaderOrigin's value on the system's records.
const OriginSystem = "system"

// SystemHeader returns the header that marks a record the system produced.
func SystemHeader() kgo.RecordHeader {
	return kgo.RecordHeader{Key: HeaderOrigin, Value: []byte(OriginSystem)}
}

// FromSystem reports whether r carries the system's HeaderOrigin.
func FromSystem(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderOrigin {
			return string(h.Value) == OriginSystem
		}
	}
	return false
}

// DecodeEvent decodes an events-topic record into e (fsm.DecodeRecord) and
// checks its origin: an eventId in the space reserved for the ids the
// system derives on a record without the system's header is refused with
// an error that matches fsm.ErrReservedEventID. The projector sets such a
// record aside and the replay skips it, by this one rule, so it never
// reaches a session's duplicate window, where it would make the system's
// own event a duplicate. e.Payload aliases r.Value.
func DecodeEvent(r *kgo.Record, e *fsm.Event) error {
	if err := fsm.DecodeRecord(r.Value, e); err != nil {
		return err
	}
	if e.ID.Reserved() && !FromSystem(r) {
		return fmt.Errorf("%w: %s on a record without the %s: %s header", fsm.ErrReservedEventID, e.ID, HeaderOrigin, OriginSystem)
	}
	return nil
}
