package fsm

import (
	"crypto/sha256"
	"encoding/binary"
)

// derivedPrefix opens every id the system derives: the first 48 bits of
// the UUID spell "correx" in ASCII, so the ids read 636f7272-6578-8xxx-...
var derivedPrefix = [6]byte{'c', 'o', 'r', 'r', 'e', 'x'}

// DeriveEventID returns the eventId of an event the system produces
// itself (a TimeoutExpired, a cascaded CancellationRequested, the
// replacement events), derived from the parts that make it unique: by
// convention its type, its session and what it comes from. Producing the
// same event again gives the same id, a duplicate for the fold.
//
// The id is a UUID of version 8 (RFC 9562, whose layout the producer
// defines) that starts with the 48 bits of derivedPrefix, followed by 74
// bits of SHA-256 over the parts, each preceded by its length. That part of
// the UUID space is reserved for the system (Reserved): ingest refuses it
// from clients, and the projector sets aside a record that carries such an
// id without the header the system's own records carry, so that no other
// producer can take the id of an event the system will produce and make
// the session see that event as a duplicate.
func DeriveEventID(parts ...string) EventID {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, p := range parts {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(p)))])
		h.Write([]byte(p))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	var id EventID
	copy(id[:6], derivedPrefix[:])
	id[6] = 0x80 | sum[0]&0x0f // version 8
	id[7] = sum[1]
	id[8] = 0x80 | sum[2]&0x3f // RFC 9562 variant
	copy(id[9:], sum[3:10])
	return id
}

// Reserved reports whether id lies in the part of the UUID space reserved
// for the ids the system derives (DeriveEventID): version 8, RFC 9562
// variant, starting 636f7272-6578. UUIDv4 and v7, which clients and ingest
// generate, never do.
func (id EventID) Reserved() bool {
	return [6]byte(id[:6]) == derivedPrefix && id[6]>>4 == 8 && id[8]>>6 == 2
}
