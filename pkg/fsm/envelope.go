package fsm

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// DecodeOptions selects which optional fields an envelope may omit.
type DecodeOptions struct {
	// Ingest accepts envelopes from clients: eventId and occurredAt may be
	// absent (the caller assigns them; ID stays zero and OccurredAt stays
	// the zero time), a payload with insignificant whitespace is copied to
	// its compact form, and the goal and reasons are held to MaxGoalBytes
	// and MaxReasonBytes; an eventId in the space reserved for the ids
	// the system derives (EventID.Reserved) and the types the system alone
	// produces are refused, and so is a session id of dots alone
	// (ValidNewSessionID). Without it every field a record must carry is
	// required and Payload aliases the input.
	Ingest bool
}

// DecodeRecord decodes a Kafka record value written by this project (or by
// any producer following docs/lifecycle.md) into e. Every problem is reported
// in one *ValidationError; an unknown version also matches
// ErrUnsupportedVersion. e.Payload aliases value.
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
	seenExpected
	seenSentBy
)

// maxCount is the largest version or count an envelope may carry: 2^53-1,
// the largest integer every JSON reader holds exactly.
const maxCount = 1<<53 - 1

// count reads a non-negative integer member (a version), recording a field
// error when val is anything else.
func (d *envelopeDecoder) count(field string, val []byte, kind jsonKind) (uint64, bool) {
	if kind != kindNumber {
		d.add(field, "must be a non-negative integer, got "+kind.String())
		return 0, false
	}
	v, err := strconv.ParseUint(string(val), 10, 64)
	if err != nil || v > maxCount {
		d.add(field, "must be a non-negative integer of at most 2^53-1")
		return 0, false
	}
	return v, true
}

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
	// text is the content of a string value that is parsed further: the
	// span between the quotes, or its unescaped copy when it has escapes,
	// so that any JSON spelling means what encoding/json reads.
	text := func() []byte {
		if bytes.IndexByte(val, '\\') < 0 {
			return val[1 : len(val)-1]
		}
		return []byte(unquote(val, true))
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
		id, ok := ParseEventID(text())
		switch {
		case !ok:
			d.add("eventId", "must be a UUID in canonical form (8-4-4-4-12 hex digits)")
		case id.IsZero():
			d.add("eventId", "must not be the nil UUID")
		case id.Reserved() && d.opts.Ingest:
			d.add("eventId", "is reserved for events the system derives (UUID version 8 starting 636f7272-6578-8); "+
				"leave it out or send a UUIDv7 or UUIDv4")
		default:
			e.ID = id
		}
	case "sessionId":
		if !d.once(seenSession, "sessionId") {
			return nil
		}
		if v, ok := str("sessionId"); ok {
			switch {
			case !ValidSessionID(v):
				d.add("sessionId", "must be "+SessionIDRule)
			case d.opts.Ingest && !ValidNewSessionID(v):
				d.add("sessionId", "must be "+NewSessionIDRule+` ("." and ".." are path segments)`)
			default:
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
		name := text()
		t, ok := ParseEventType(name)
		switch {
		case ok && t.System() && d.opts.Ingest:
			d.add("type", t.String()+" is produced by the system only")
			return nil
		case ok:
			e.Type = t
		case ValidCustomType(name):
			e.Type, e.Custom = EventCustom, string(name)
		default:
			d.add("type", fmt.Sprintf("unknown event type %s", truncate(string(val), 80)))
		}
	case "occurredAt":
		if !d.once(seenTime, "occurredAt") {
			return nil
		}
		if kind != kindString {
			d.add("occurredAt", "must be a string, got "+kind.String())
			return nil
		}
		t, ok := parseRFC3339(text())
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
	case "expectedVersion":
		if !d.once(seenExpected, "expectedVersion") || kind == kindNull {
			return nil
		}
		if v, ok := d.count("expectedVersion", val, kind); ok {
			e.ExpectedVersion, e.HasExpectedVersion = v, true
		}
	case "sentBy":
		if !d.once(seenSentBy, "sentBy") || kind == kindNull {
			return nil
		}
		if d.opts.Ingest {
			d.add("sentBy", "is set by ingest to the sending token's name; a client cannot send it")
			return nil
		}
		if v, ok := str("sentBy"); ok {
			e.SentBy = v
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
		d.add("payload.timeout", "is required for TimeoutExpired: one of "+timeoutKindList(", "))
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
