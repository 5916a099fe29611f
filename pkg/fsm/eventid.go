package fsm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// EventID is an event's identifier: a UUID, held as its 16 bytes so that the
// duplicate window and the digest never allocate.
type EventID [16]byte

// NewEventID returns a fresh UUIDv7 (RFC 9562): a millisecond timestamp and
// random bits, so ids assigned by ingest sort roughly by arrival.
func NewEventID(now time.Time) (EventID, error) {
	var id EventID
	if _, err := rand.Read(id[6:]); err != nil {
		return id, fmt.Errorf("fsm: event id: %w", err)
	}
	ms := uint64(now.UnixMilli())
	id[0], id[1], id[2] = byte(ms>>40), byte(ms>>32), byte(ms>>24)
	id[3], id[4], id[5] = byte(ms>>16), byte(ms>>8), byte(ms)
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 9562 variant
	return id, nil
}

// IsZero reports whether id is the nil UUID, which no valid event carries.
func (id EventID) IsZero() bool { return id == EventID{} }

// String returns the canonical lowercase 8-4-4-4-12 form.
func (id EventID) String() string {
	var buf [36]byte
	return string(id.AppendText(buf[:0]))
}

// AppendText appends the canonical form of id to dst.
func (id EventID) AppendText(dst []byte) []byte {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(dst, buf[:]...)
}

// MarshalText implements encoding.TextMarshaler.
func (id EventID) MarshalText() ([]byte, error) { return id.AppendText(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *EventID) UnmarshalText(b []byte) error {
	v, ok := ParseEventID(b)
	if !ok {
		return fmt.Errorf("fsm: invalid event id %q", b)
	}
	*id = v
	return nil
}

// ParseEventID parses the canonical 36-character form of a UUID, in either
// case. Other spellings (braces, urn:uuid:) are refused so that one event has
// one spelling on the wire.
func ParseEventID(b []byte) (EventID, bool) {
	var id EventID
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return id, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(b[i])
		lo, ok2 := unhex(b[i+1])
		if !ok1 || !ok2 {
			return EventID{}, false
		}
		id[j] = hi<<4 | lo
		j++
		i += 2
	}
	return id, true
}

func unhex(c byte) (byte, bool) {
	v := hexValue[c]
	return v & 0x0f, v != 0
}

// hexValue holds 0x10 | the value of each hex digit, and 0 for other bytes.
var hexValue = func() (t [256]byte) {
	for c := '0'; c <= '9'; c++ {
		t[c] = 0x10 | byte(c-'0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = 0x10 | byte(c-'a'+10)
		t[c-'a'+'A'] = 0x10 | byte(c-'a'+10)
	}
	return t
}()
