package firststage

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
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
func (id EventID) String() string { return string(id.AppendText(nil)) }

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
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Event is one lifecycle or execution event: the envelope of DESIGN §3.
//
// Payload holds the payload object as compact JSON (nil when absent). Fields
// holds what the fold reads from it; the decoders fill both, and code that
// builds an Event by hand must keep them consistent (NewEvent does).
type Event struct {
	ID            EventID
	SessionID     string
	Type          EventType
	OccurredAt    time.Time // always UTC
	CorrelationID string    // defaults to SessionID
	Payload       []byte
	Fields        Fields
}

// Fields are the payload fields the fold reads. Each is meaningful only for
// the event types noted.
type Fields struct {
	Goal                 string      // SessionCreated.goal
	PredecessorSessionID string      // SessionCreated.predecessorSessionId
	Reason               string      // SessionFailed.reason, CancellationRequested.reason
	Mode                 CancelMode  // CancellationRequested.mode
	Timeout              TimeoutKind // TimeoutExpired.timeout
	ToolFailed           bool        // ToolCompleted with ok == false
}

// Limits of the envelope (DESIGN §3).
const (
	MaxSessionIDLen     = 128
	MaxCorrelationIDLen = 128
	MaxPayloadBytes     = 64 << 10
	// RecordVersion is the version of the record value format this build
	// writes; DecodeRecord reads it and refuses others.
	RecordVersion = 1
)

// Earliest and latest occurredAt accepted: the range in which nanoseconds
// since the Unix epoch fit an int64, so the fold's arithmetic cannot overflow.
var (
	minOccurredAt = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxOccurredAt = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ValidSessionID reports whether id is 1-128 characters of [A-Za-z0-9._:-].
func ValidSessionID(id string) bool {
	if len(id) == 0 || len(id) > MaxSessionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !sessionIDChar(id[i]) {
			return false
		}
	}
	return true
}

func sessionIDChar(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

// DecodeOptions selects which optional fields an envelope may omit.
type DecodeOptions struct {
	// Ingest accepts envelopes from clients: eventId and occurredAt may be
	// absent (the caller assigns them; ID stays zero and OccurredAt stays
	// the zero time), and a payload with insignificant whitespace is copied
	// to its compact form. Without it every field a record must carry is
	// required and Payload aliases the input.
	Ingest bool
}

// DecodeRecord decodes a Kafka record value written by this project (or by
// any producer following DESIGN §3) into e. Every problem is reported in one
// *ValidationError; an unknown version also matches ErrUnsupportedVersion.
// e.Payload aliases value.
func DecodeRecord(value []byte, e *Event) error {
	return DecodeEnvelope(value, e, DecodeOptions{})
}

// DecodeEnvelope decodes and validates one envelope object into e, reporting
// every field error at once in a *ValidationError.
func DecodeEnvelope(b []byte, e *Event, opts DecodeOptions) error {
	*e = Event{}
	d := envelopeDecoder{ev: e, opts: opts}
	d.decode(b)
	if len(d.errs) > 0 {
		return &ValidationError{Errors: d.errs, version: d.badVersion && len(d.errs) == 1}
	}
	return nil
}

type envelopeDecoder struct {
	ev   *Event
	opts DecodeOptions
	errs []FieldError
	seen uint16
	// spans kept until all members are known, since payload checks depend
	// on the type, which may come after the payload.
	payload     []byte
	payloadKind jsonKind
	badVersion  bool
}

const (
	seenV = 1 << iota
	seenID
	seenSession
	seenType
	seenTime
	seenCorrelation
	seenPayload
)

func (d *envelopeDecoder) add(field, msg string) {
	d.errs = append(d.errs, FieldError{Field: field, Message: msg})
}

func (d *envelopeDecoder) decode(b []byte) {
	s := scanner{b: b}
	i := s.skipWS(0)
	if i >= len(b) || b[i] != '{' {
		if i >= len(b) {
			d.add("", "empty body: expected a JSON object")
		} else {
			d.add("", "expected a JSON object")
		}
		return
	}
	end, _, err := s.object(i, 1, d.member)
	if err != nil {
		if se, ok := err.(*syntaxError); ok {
			d.add("", fmt.Sprintf("malformed JSON at byte %d: %s", se.off, se.msg))
		} else if _, ok := err.(stopDecode); !ok {
			d.add("", err.Error())
		}
		return
	}
	if j := s.skipWS(end); j != len(b) {
		d.add("", fmt.Sprintf("malformed JSON at byte %d: data after the object", j))
		return
	}
	d.finish()
}

// stopDecode aborts the object scan without adding a syntax error (the field
// error has already been recorded).
type stopDecode struct{}

func (stopDecode) Error() string { return "stop" }

func (d *envelopeDecoder) once(bit uint16, field string) bool {
	if d.seen&bit != 0 {
		d.add(field, "duplicate field")
		return false
	}
	d.seen |= bit
	return true
}

func (d *envelopeDecoder) member(key []byte, keyEsc bool, val []byte, kind jsonKind) error {
	e := d.ev
	name := key[1 : len(key)-1]
	if keyEsc {
		name = []byte(unquote(key, true))
	}
	str := func(field string) (string, bool) {
		if kind != kindString {
			d.add(field, "must be a string, got "+kind.String())
			return "", false
		}
		_, esc, _ := (&scanner{b: val}).str(0)
		return unquote(val, esc), true
	}
	switch string(name) { // converted without allocating
	case "v":
		if !d.once(seenV, "v") {
			return nil
		}
		if kind != kindNumber {
			d.add("v", "must be a number, got "+kind.String())
			return nil
		}
		if string(val) != strconv.Itoa(RecordVersion) {
			d.badVersion = true
			d.add("v", fmt.Sprintf("unsupported version %s (this build reads %d): %v", val, RecordVersion, ErrUnsupportedVersion))
		}
	case "eventId":
		if !d.once(seenID, "eventId") {
			return nil
		}
		if kind != kindString {
			d.add("eventId", "must be a string, got "+kind.String())
			return nil
		}
		id, ok := ParseEventID(val[1 : len(val)-1])
		switch {
		case !ok:
			d.add("eventId", "must be a UUID in canonical form (8-4-4-4-12 hex digits)")
		case id.IsZero():
			d.add("eventId", "must not be the nil UUID")
		default:
			e.ID = id
		}
	case "sessionId":
		if !d.once(seenSession, "sessionId") {
			return nil
		}
		if v, ok := str("sessionId"); ok {
			if !ValidSessionID(v) {
				d.add("sessionId", "must be 1-128 characters of [A-Za-z0-9._:-]")
			} else {
				e.SessionID = v
			}
		}
	case "type":
		if !d.once(seenType, "type") {
			return nil
		}
		if kind != kindString {
			d.add("type", "must be a string, got "+kind.String())
			return nil
		}
		t, ok := ParseEventType(val[1 : len(val)-1])
		if !ok {
			d.add("type", fmt.Sprintf("unknown event type %s", truncate(string(val), 80)))
			return nil
		}
		e.Type = t
	case "occurredAt":
		if !d.once(seenTime, "occurredAt") {
			return nil
		}
		if kind != kindString {
			d.add("occurredAt", "must be a string, got "+kind.String())
			return nil
		}
		t, ok := parseRFC3339(val[1 : len(val)-1])
		switch {
		case !ok:
			d.add("occurredAt", "must be an RFC 3339 timestamp with a zone, such as 2026-11-29T06:00:00.25Z")
		case t.Before(minOccurredAt) || !t.Before(maxOccurredAt):
			d.add("occurredAt", "must be between 1970-01-01 and 2262-01-01")
		default:
			e.OccurredAt = t
		}
	case "correlationId":
		if !d.once(seenCorrelation, "correlationId") {
			return nil
		}
		if kind == kindNull {
			return nil
		}
		if v, ok := str("correlationId"); ok {
			if msg := checkCorrelationID(v); msg != "" {
				d.add("correlationId", msg)
			} else {
				e.CorrelationID = v
			}
		}
	case "payload":
		if !d.once(seenPayload, "payload") {
			return nil
		}
		d.payload, d.payloadKind = val, kind
	default:
		d.add(truncate(string(name), 64), "unknown field")
	}
	return nil
}

func checkCorrelationID(v string) string {
	n := utf8.RuneCountInString(v)
	if n == 0 || n > MaxCorrelationIDLen {
		return "must be 1-128 characters"
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return "must not contain control characters"
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (d *envelopeDecoder) finish() {
	e := d.ev
	if d.seen&seenID == 0 && !d.opts.Ingest {
		d.add("eventId", "is required")
	}
	if d.seen&seenSession == 0 {
		d.add("sessionId", "is required")
	}
	if d.seen&seenType == 0 {
		d.add("type", "is required")
	}
	if d.seen&seenTime == 0 && !d.opts.Ingest {
		d.add("occurredAt", "is required")
	}
	if e.CorrelationID == "" {
		e.CorrelationID = e.SessionID
	}
	switch d.payloadKind {
	case kindInvalid, kindNull:
		// absent
	case kindObject:
		p := d.payload
		if d.opts.Ingest {
			p = appendCompact(make([]byte, 0, len(p)), p)
		}
		if len(p) > MaxPayloadBytes {
			d.add("payload", fmt.Sprintf("is %d bytes encoded; the limit is %d", len(p), MaxPayloadBytes))
			return
		}
		if len(p) > 2 { // not "{}"
			e.Payload = p
		}
		d.payloadFields(p)
	default:
		d.add("payload", "must be an object, got "+d.payloadKind.String())
	}
	if e.Type == TimeoutExpired && e.Fields.Timeout == TimeoutNone && !d.hasError("payload.timeout") && !d.hasError("payload") {
		d.add("payload.timeout", "is required for TimeoutExpired: one of execution, inactivity, approval, recovery, cancellation")
	}
}

func (d *envelopeDecoder) hasError(field string) bool {
	for _, fe := range d.errs {
		if fe.Field == field {
			return true
		}
	}
	return false
}

// payloadFields reads the payload members the fold uses for the event's type
// and checks their types. Members the fold does not read are not inspected.
func (d *envelopeDecoder) payloadFields(p []byte) {
	e := d.ev
	var seen [6]bool
	names := [6]string{"goal", "predecessorSessionId", "reason", "mode", "timeout", "ok"}
	s := scanner{b: p}
	_, _, _ = s.object(0, 1, func(key []byte, keyEsc bool, val []byte, kind jsonKind) error {
		k := -1
		for i, n := range names {
			if keyIs(key, keyEsc, n) {
				k = i
				break
			}
		}
		if k < 0 || !readsPayloadField(e.Type, names[k]) {
			return nil
		}
		field := "payload." + names[k]
		if seen[k] {
			d.add(field, "duplicate field")
			return nil
		}
		seen[k] = true
		if kind == kindNull {
			return nil
		}
		if names[k] == "ok" {
			if kind != kindBool {
				d.add(field, "must be a boolean, got "+kind.String())
				return nil
			}
			e.Fields.ToolFailed = string(val) == "false"
			return nil
		}
		if kind != kindString {
			d.add(field, "must be a string, got "+kind.String())
			return nil
		}
		_, esc, _ := (&scanner{b: val}).str(0)
		v := unquote(val, esc)
		switch names[k] {
		case "goal":
			e.Fields.Goal = v
		case "predecessorSessionId":
			if !ValidSessionID(v) {
				d.add(field, "must be 1-128 characters of [A-Za-z0-9._:-]")
				return nil
			}
			e.Fields.PredecessorSessionID = v
		case "reason":
			e.Fields.Reason = v
		case "mode":
			switch v {
			case "graceful":
				e.Fields.Mode = CancelGraceful
			case "forced":
				e.Fields.Mode = CancelForced
			default:
				d.add(field, "must be graceful or forced")
			}
		case "timeout":
			t, ok := ParseTimeoutKind([]byte(v))
			if !ok {
				d.add(field, "must be one of execution, inactivity, approval, recovery, cancellation")
				return nil
			}
			e.Fields.Timeout = t
		}
		return nil
	})
}

// readsPayloadField reports whether the fold reads payload field name for
// events of type t (DESIGN §3).
func readsPayloadField(t EventType, name string) bool {
	switch name {
	case "goal", "predecessorSessionId":
		return t == SessionCreated
	case "reason":
		return t == SessionFailed || t == CancellationRequested
	case "mode":
		return t == CancellationRequested
	case "timeout":
		return t == TimeoutExpired
	case "ok":
		return t == ToolCompleted
	}
	return false
}

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
	dst = append(dst, e.Type.String()...)
	dst = append(dst, `","occurredAt":"`...)
	dst = e.OccurredAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","correlationId":`...)
	dst = appendQuoted(dst, e.CorrelationID)
	if len(e.Payload) > 0 {
		dst = append(dst, `,"payload":`...)
		dst = append(dst, e.Payload...)
	}
	return append(dst, '}')
}

// AppendCanonical appends the canonical bytes of e, the input of the digest
// chain: a tag byte, then the id, session id, type, occurredAt in
// nanoseconds, correlation id and payload, each variable-length part prefixed
// by its length. Two events have equal canonical bytes exactly when they have
// equal fields, whatever the JSON spelling they arrived in (the payload is
// compact JSON, as ingest writes it and as the record carries it).
func AppendCanonical(dst []byte, e *Event) []byte {
	dst = append(dst, 1)
	dst = append(dst, e.ID[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(e.SessionID)))
	dst = append(dst, e.SessionID...)
	dst = append(dst, byte(e.Type))
	dst = binary.AppendVarint(dst, e.OccurredAt.UnixNano())
	dst = binary.AppendUvarint(dst, uint64(len(e.CorrelationID)))
	dst = append(dst, e.CorrelationID...)
	dst = binary.AppendUvarint(dst, uint64(len(e.Payload)))
	return append(dst, e.Payload...)
}

// NewEvent builds an event of type t whose payload carries f. Only the fields
// the fold reads for t are kept, in Fields and in the payload alike, so the
// result equals what decoding its own record gives back.
func NewEvent(id EventID, sessionID string, t EventType, at time.Time, f Fields) Event {
	e := Event{ID: id, SessionID: sessionID, Type: t, OccurredAt: at.UTC(), CorrelationID: sessionID}
	var p []byte
	member := func(name string) {
		if len(p) == 0 {
			p = append(p, '{')
		} else {
			p = append(p, ',')
		}
		p = appendQuoted(p, name)
		p = append(p, ':')
	}
	switch t {
	case SessionCreated:
		e.Fields.Goal, e.Fields.PredecessorSessionID = f.Goal, f.PredecessorSessionID
		if f.Goal != "" {
			member("goal")
			p = appendQuoted(p, f.Goal)
		}
		if f.PredecessorSessionID != "" {
			member("predecessorSessionId")
			p = appendQuoted(p, f.PredecessorSessionID)
		}
	case SessionFailed, CancellationRequested:
		e.Fields.Reason = f.Reason
		if t == CancellationRequested {
			e.Fields.Mode = f.Mode
			member("mode")
			p = appendQuoted(p, f.Mode.String())
		}
		if f.Reason != "" {
			member("reason")
			p = appendQuoted(p, f.Reason)
		}
	case TimeoutExpired:
		e.Fields.Timeout = f.Timeout
		member("timeout")
		p = appendQuoted(p, f.Timeout.String())
	case ToolCompleted:
		e.Fields.ToolFailed = f.ToolFailed
		member("ok")
		p = strconv.AppendBool(p, !f.ToolFailed)
	}
	if len(p) > 0 {
		e.Payload = append(p, '}')
	}
	return e
}
