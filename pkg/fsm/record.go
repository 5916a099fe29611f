package fsm

import (
	"encoding/binary"
	"strconv"
	"time"
)

// AppendRecord appends the record value of e (format RecordVersion) to dst.
// The output is compact JSON with members in a fixed order, so equal events
// encode to equal bytes.
func AppendRecord(dst []byte, e *Event) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, RecordVersion, 10)
	dst = append(dst, `,"eventId":"`...)
	dst = e.ID.AppendText(dst)
	dst = append(dst, `","sessionId":`...)
	dst = appendQuoted(dst, e.SessionID)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, e.TypeName()...)
	dst = append(dst, `","occurredAt":"`...)
	dst = e.OccurredAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","correlationId":`...)
	dst = appendQuoted(dst, e.CorrelationID)
	if e.HasExpectedVersion {
		dst = append(dst, `,"expectedVersion":`...)
		dst = strconv.AppendUint(dst, e.ExpectedVersion, 10)
	}
	if len(e.Payload) > 0 {
		dst = append(dst, `,"payload":`...)
		dst = append(dst, e.Payload...)
	}
	if e.SentBy != "" {
		dst = append(dst, `,"sentBy":`...)
		dst = appendQuoted(dst, e.SentBy)
	}
	return append(dst, '}')
}

// AppendCanonical appends the canonical bytes of e, the input of the digest
// chain: a tag byte, then the id, session id, type, occurredAt in
// nanoseconds, correlation id and payload, each variable-length part prefixed
// by its length. Two events have equal canonical bytes exactly when they have
// equal fields, whatever the JSON spelling they arrived in (the payload is
// compact JSON, as ingest writes it and as the record carries it).
//
// Fields added later extend the bytes only when present, so the canonical
// bytes (and the digest chain) of an event without them never change: a
// custom type's name follows the type byte, and an expected version follows
// the payload as a marker byte 1 and its uvarint (the payload is length
// prefixed, so the tail is unambiguous).
func AppendCanonical(dst []byte, e *Event) []byte {
	dst = append(dst, 1)
	dst = append(dst, e.ID[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(e.SessionID)))
	dst = append(dst, e.SessionID...)
	dst = append(dst, byte(e.Type))
	if e.Type == EventCustom {
		dst = binary.AppendUvarint(dst, uint64(len(e.Custom)))
		dst = append(dst, e.Custom...)
	}
	dst = binary.AppendVarint(dst, e.OccurredAt.UnixNano())
	dst = binary.AppendUvarint(dst, uint64(len(e.CorrelationID)))
	dst = append(dst, e.CorrelationID...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Payload)))
	dst = append(dst, e.Payload...)
	if e.HasExpectedVersion {
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, e.ExpectedVersion)
	}
	return dst
}
