package fsm

import (
	"bytes"
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

// Event is one lifecycle or execution event: the envelope of
// docs/lifecycle.md.
//
// Payload holds the payload object as compact JSON (nil when absent). Fields
// holds what the fold reads from it; the decoders fill both, and code that
// builds an Event by hand must keep them consistent (NewEvent does).
type Event struct {
	ID        EventID
	SessionID string
	Type      EventType
	// Custom is the type name x.<vendor>.<Name> when Type is EventCustom,
	// and empty otherwise.
	Custom        string
	OccurredAt    time.Time // always UTC
	CorrelationID string    // defaults to SessionID
	// ExpectedVersion, when HasExpectedVersion is set, is the session
	// version the producer expects (docs/lifecycle.md): the fold rejects the
	// event version_conflict when the session's version differs.
	ExpectedVersion    uint64
	HasExpectedVersion bool
	Payload            []byte
	Fields             Fields
}

// TypeName returns the wire spelling of the event's type: Custom for a
// custom event, Type.String() otherwise.
func (e *Event) TypeName() string {
	if e.Type == EventCustom {
		return e.Custom
	}
	return e.Type.String()
}

// Fields are the payload fields the fold reads. Each is meaningful only for
// the event types noted.
type Fields struct {
	Goal                 string      // SessionCreated.goal
	PredecessorSessionID string      // SessionCreated.predecessorSessionId
	Reason               string      // SessionFailed.reason, CancellationRequested.reason, ReplacementRefused.reason
	Mode                 CancelMode  // CancellationRequested.mode
	Timeout              TimeoutKind // TimeoutExpired.timeout
	ToolFailed           bool        // ToolCompleted with ok == false

	// ArmedVersion (when HasArmedVersion) is TimeoutExpired.armedVersion,
	// the version at which the deadline was armed (docs/timeouts.md), and
	// Deadline is TimeoutExpired.deadline (zero when absent).
	ArmedVersion    uint64
	HasArmedVersion bool
	Deadline        time.Time

	// SessionCreated additions (docs/lifecycle.md).
	Labels            []Label           // payload.labels, in document order
	Metadata          []byte            // payload.metadata, compact JSON object
	ParentSessionID   string            // payload.parentSessionId
	ParentClosePolicy ParentClosePolicy // payload.parentClosePolicy
	Timeouts          Timeouts          // payload.timeouts

	SuccessorSessionID string   // SessionReplaced.successorSessionId
	PredecessorDigest  [32]byte // ReplacementLinked.predecessorDigest
}

// Label is one labels pair of a SessionCreated payload.
type Label struct {
	Key   string
	Value string
}

// Timeouts holds a session's own timeout durations by kind (index
// TimeoutExecution..TimeoutCancellation; index 0 is unused). Zero means the
// session names none for that kind.
type Timeouts [NumTimeoutKinds]time.Duration

// ParentClosePolicy says what happens to a child when its parent ends
// (docs/lifecycle.md, "Replacements and children").
type ParentClosePolicy uint8

// Parent close policies. ParentCloseCancel is the default.
const (
	ParentCloseCancel ParentClosePolicy = iota
	ParentCloseAbandon
)

// String returns "cancel" or "abandon".
func (p ParentClosePolicy) String() string {
	if p == ParentCloseAbandon {
		return "abandon"
	}
	return "cancel"
}

// ParseParentClosePolicy returns the policy spelled name ("cancel" or
// "abandon").
func ParseParentClosePolicy(name string) (ParentClosePolicy, bool) {
	switch name {
	case "cancel":
		return ParentCloseCancel, true
	case "abandon":
		return ParentCloseAbandon, true
	}
	return ParentCloseCancel, false
}

// Limits of the envelope (docs/lifecycle.md).
const (
	MaxSessionIDLen     = 128
	MaxCorrelationIDLen = 128
	MaxPayloadBytes     = 64 << 10
	// MaxGoalBytes and MaxReasonBytes bound the text a session keeps
	// (docs/lifecycle.md): ingest refuses longer values, and the fold cuts longer
	// values written by other producers at that size on a UTF-8 boundary,
	// so that a snapshot stays small whatever reaches the topic.
	MaxGoalBytes   = 4 << 10
	MaxReasonBytes = 1 << 10
	// Bounds of the SessionCreated additions (docs/lifecycle.md), enforced like
	// the text bounds: ingest refuses, the fold cuts or drops.
	MaxLabels          = 16
	MaxLabelKeyLen     = 63
	MaxLabelValueBytes = 256
	MaxMetadataBytes   = 4 << 10
	MinTimeout         = time.Second
	MaxTimeout         = 720 * time.Hour
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

// SessionIDRule and LabelKeyRule say in words what ValidSessionID and
// ValidLabelKey accept, for the messages that refuse a value.
const (
	SessionIDRule = "1-128 characters of [A-Za-z0-9._:-]"
	LabelKeyRule  = "[a-z0-9][a-z0-9._/-]{0,62}"
)

// ValidSessionID reports whether id is SessionIDRule: 1-128 characters of
// [A-Za-z0-9._:-].
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
	// the zero time), a payload with insignificant whitespace is copied to
	// its compact form, and the goal and reasons are held to MaxGoalBytes
	// and MaxReasonBytes; an eventId in the space reserved for the ids
	// the system derives (EventID.Reserved) and the types the system alone
	// produces are refused. Without it every field a record must carry is
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
			if !ValidSessionID(v) {
				d.add("sessionId", "must be "+SessionIDRule)
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

// payloadNames are the payload members the fold reads, by index; a
// payloadField's bit in fieldsOf says which event types read it.
var payloadNames = [...]string{"goal", "predecessorSessionId", "reason", "mode", "timeout", "ok",
	"armedVersion", "deadline", "labels", "metadata", "parentSessionId", "parentClosePolicy", "timeouts",
	"successorSessionId", "predecessorDigest"}

const (
	pfGoal = iota
	pfPredecessor
	pfReason
	pfMode
	pfTimeout
	pfOK
	pfArmedVersion
	pfDeadline
	pfLabels
	pfMetadata
	pfParent
	pfParentClosePolicy
	pfTimeouts
	pfSuccessor
	pfPredecessorDigest
	numPayloadFields
)

// fieldsOf is, per event type, the set of payload members the fold reads
// (bit i for payloadNames[i]); a type with none skips the payload scan.
var fieldsOf = [numEventTypes]uint16{
	SessionCreated: 1<<pfGoal | 1<<pfPredecessor | 1<<pfLabels | 1<<pfMetadata | 1<<pfParent |
		1<<pfParentClosePolicy | 1<<pfTimeouts,
	SessionFailed:         1 << pfReason,
	CancellationRequested: 1<<pfReason | 1<<pfMode,
	TimeoutExpired:        1<<pfTimeout | 1<<pfArmedVersion | 1<<pfDeadline,
	ToolCompleted:         1 << pfOK,
	SessionReplaced:       1 << pfSuccessor,
	ReplacementLinked:     1 << pfPredecessorDigest,
	ReplacementRefused:    1 << pfReason,
}

// payloadFields reads the payload members the fold uses for the event's type
// and checks their types. Members the fold does not read are not inspected.
func (d *envelopeDecoder) payloadFields(p []byte) {
	e := d.ev
	want := fieldsOf[e.Type]
	if want == 0 {
		return
	}
	var seen uint16
	s := scanner{b: p}
	_, _, _ = s.object(0, 1, func(key []byte, keyEsc bool, val []byte, kind jsonKind) error {
		k := -1
		for i, n := range payloadNames {
			if want&(1<<i) != 0 && keyIs(key, keyEsc, n) {
				k = i
				break
			}
		}
		if k < 0 {
			return nil
		}
		field := "payload." + payloadNames[k]
		if seen&(1<<k) != 0 {
			d.add(field, "duplicate field")
			return nil
		}
		seen |= 1 << k
		if kind == kindNull {
			return nil
		}
		switch k {
		case pfOK:
			if kind != kindBool {
				d.add(field, "must be a boolean, got "+kind.String())
				return nil
			}
			e.Fields.ToolFailed = string(val) == "false"
			return nil
		case pfArmedVersion:
			if v, ok := d.count(field, val, kind); ok {
				e.Fields.ArmedVersion, e.Fields.HasArmedVersion = v, true
			}
			return nil
		case pfLabels:
			d.labels(field, val, kind)
			return nil
		case pfMetadata:
			if kind != kindObject {
				d.add(field, "must be an object, got "+kind.String())
				return nil
			}
			if len(val) > MaxMetadataBytes {
				if d.opts.Ingest {
					d.add(field, fmt.Sprintf("is %d bytes encoded; the limit is %d", len(val), MaxMetadataBytes))
				}
				return nil // dropped: see the package doc
			}
			e.Fields.Metadata = val
			return nil
		case pfTimeouts:
			d.timeouts(field, val, kind)
			return nil
		}
		if kind != kindString {
			d.add(field, "must be a string, got "+kind.String())
			return nil
		}
		_, esc, _ := (&scanner{b: val}).str(0)
		v := unquote(val, esc)
		switch k {
		case pfGoal:
			if !d.withinBound(field, v, MaxGoalBytes) {
				return nil
			}
			e.Fields.Goal = v
		case pfPredecessor, pfParent, pfSuccessor:
			if !ValidSessionID(v) {
				d.add(field, "must be "+SessionIDRule)
				return nil
			}
			switch k {
			case pfPredecessor:
				e.Fields.PredecessorSessionID = v
			case pfParent:
				e.Fields.ParentSessionID = v
			default:
				e.Fields.SuccessorSessionID = v
			}
		case pfReason:
			if !d.withinBound(field, v, MaxReasonBytes) {
				return nil
			}
			e.Fields.Reason = v
		case pfMode:
			switch v {
			case "graceful":
				e.Fields.Mode = CancelGraceful
			case "forced":
				e.Fields.Mode = CancelForced
			default:
				d.add(field, "must be graceful or forced")
			}
		case pfParentClosePolicy:
			switch v {
			case "cancel":
				e.Fields.ParentClosePolicy = ParentCloseCancel
			case "abandon":
				e.Fields.ParentClosePolicy = ParentCloseAbandon
			default:
				d.add(field, "must be cancel or abandon")
			}
		case pfTimeout:
			t, ok := ParseTimeoutKind([]byte(v))
			if !ok {
				d.add(field, "must be one of execution, inactivity, approval, recovery, cancellation")
				return nil
			}
			e.Fields.Timeout = t
		case pfDeadline:
			t, ok := parseRFC3339([]byte(v))
			if !ok || t.Before(minOccurredAt) || !t.Before(maxOccurredAt) {
				d.add(field, "must be an RFC 3339 timestamp with a zone between 1970 and 2262")
				return nil
			}
			e.Fields.Deadline = t
		case pfPredecessorDigest:
			if len(v) != 64 {
				d.add(field, "must be 64 hex digits (a SHA-256 digest)")
				return nil
			}
			if _, err := hex.Decode(e.Fields.PredecessorDigest[:], []byte(v)); err != nil {
				d.add(field, "must be 64 hex digits (a SHA-256 digest)")
			}
		}
		return nil
	})
}

// ValidLabelKey reports whether k is a label key: LabelKeyRule,
// [a-z0-9][a-z0-9._/-]{0,62}.
func ValidLabelKey(k string) bool {
	if len(k) == 0 || len(k) > MaxLabelKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '/' || c == '-')) {
			return false
		}
	}
	return true
}

// labels reads payload.labels. From clients every bound is a field error;
// in a record the pairs are kept as written and the fold bounds them.
func (d *envelopeDecoder) labels(field string, val []byte, kind jsonKind) {
	if kind != kindObject {
		d.add(field, "must be an object of string values, got "+kind.String())
		return
	}
	var out []Label
	s := scanner{b: val}
	_, _, _ = s.object(0, 1, func(key []byte, keyEsc bool, v []byte, vk jsonKind) error {
		k := unquote(key, keyEsc)
		f := field + "." + truncate(k, 64)
		if vk != kindString {
			d.add(f, "must be a string, got "+vk.String())
			return nil
		}
		_, esc, _ := (&scanner{b: v}).str(0)
		value := unquote(v, esc)
		if d.opts.Ingest {
			switch {
			case !ValidLabelKey(k):
				d.add(f, "key must match "+LabelKeyRule)
				return nil
			case len(value) > MaxLabelValueBytes:
				d.add(f, fmt.Sprintf("is %d bytes; the limit is %d", len(value), MaxLabelValueBytes))
				return nil
			}
			for _, l := range out {
				if l.Key == k {
					d.add(f, "duplicate label")
					return nil
				}
			}
		}
		out = append(out, Label{Key: k, Value: value})
		return nil
	})
	if d.opts.Ingest && len(out) > MaxLabels {
		d.add(field, fmt.Sprintf("has %d labels; the limit is %d", len(out), MaxLabels))
		return
	}
	d.ev.Fields.Labels = out
}

// timeouts reads payload.timeouts: an object of Go duration strings by kind.
// A kind that is not one of the five or a string that is not a duration is
// an error in a record too; a duration outside MinTimeout..MaxTimeout is
// refused from clients and dropped from a record.
func (d *envelopeDecoder) timeouts(field string, val []byte, kind jsonKind) {
	if kind != kindObject {
		d.add(field, "must be an object of durations by kind, got "+kind.String())
		return
	}
	s := scanner{b: val}
	_, _, _ = s.object(0, 1, func(key []byte, keyEsc bool, v []byte, vk jsonKind) error {
		name := unquote(key, keyEsc)
		f := field + "." + truncate(name, 64)
		k, ok := ParseTimeoutKind([]byte(name))
		if !ok {
			d.add(f, "unknown timeout kind: want execution, inactivity, approval, recovery or cancellation")
			return nil
		}
		if vk != kindString {
			d.add(f, "must be a duration string such as \"90s\", got "+vk.String())
			return nil
		}
		dur, err := time.ParseDuration(unquote(v, true))
		switch {
		case err != nil:
			d.add(f, "must be a Go duration string such as \"90s\" or \"2h\"")
		case dur < MinTimeout || dur > MaxTimeout:
			if d.opts.Ingest {
				d.add(f, "must be from 1s to 720h")
			}
		default:
			d.ev.Fields.Timeouts[k] = dur
		}
		return nil
	})
}

// withinBound reports whether text kept by the snapshot fits its bound,
// counted in bytes of the decoded UTF-8, and records a field error when it
// does not. Only envelopes from clients are held to it: a record written by
// another producer still decodes, and the fold cuts the text
// (docs/lifecycle.md).
func (d *envelopeDecoder) withinBound(field, v string, limit int) bool {
	if !d.opts.Ingest || len(v) <= limit {
		return true
	}
	d.add(field, fmt.Sprintf("is %d bytes; the limit is %d", len(v), limit))
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
		if len(f.Labels) > 0 {
			e.Fields.Labels = f.Labels
			member("labels")
			for i, l := range f.Labels {
				if i == 0 {
					p = append(p, '{')
				} else {
					p = append(p, ',')
				}
				p = appendQuoted(p, l.Key)
				p = append(p, ':')
				p = appendQuoted(p, l.Value)
			}
			p = append(p, '}')
		}
		if len(f.Metadata) > 0 {
			member("metadata")
			n := len(p)
			p = appendCompact(p, f.Metadata)
			e.Fields.Metadata = p[n:len(p):len(p)]
		}
		if f.ParentSessionID != "" {
			e.Fields.ParentSessionID = f.ParentSessionID
			member("parentSessionId")
			p = appendQuoted(p, f.ParentSessionID)
		}
		if f.ParentClosePolicy != ParentCloseCancel {
			e.Fields.ParentClosePolicy = f.ParentClosePolicy
			member("parentClosePolicy")
			p = appendQuoted(p, f.ParentClosePolicy.String())
		}
		if f.Timeouts != (Timeouts{}) {
			e.Fields.Timeouts = f.Timeouts
			member("timeouts")
			sep := byte('{')
			for k := TimeoutExecution; int(k) < NumTimeoutKinds; k++ {
				if f.Timeouts[k] != 0 {
					p = append(p, sep)
					sep = ','
					p = appendQuoted(p, k.String())
					p = append(p, ':')
					p = appendQuoted(p, f.Timeouts[k].String())
				}
			}
			p = append(p, '}')
		}
	case SessionReplaced:
		e.Fields.SuccessorSessionID = f.SuccessorSessionID
		member("successorSessionId")
		p = appendQuoted(p, f.SuccessorSessionID)
	case ReplacementLinked:
		e.Fields.PredecessorDigest = f.PredecessorDigest
		member("predecessorDigest")
		p = appendQuoted(p, hex.EncodeToString(f.PredecessorDigest[:]))
	case SessionFailed, CancellationRequested, ReplacementRefused:
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
		if f.HasArmedVersion {
			e.Fields.ArmedVersion, e.Fields.HasArmedVersion = f.ArmedVersion, true
			member("armedVersion")
			p = strconv.AppendUint(p, f.ArmedVersion, 10)
		}
		if !f.Deadline.IsZero() {
			e.Fields.Deadline = f.Deadline.UTC()
			member("deadline")
			p = append(p, '"')
			p = e.Fields.Deadline.AppendFormat(p, time.RFC3339Nano)
			p = append(p, '"')
		}
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

// NewCustomEvent builds a custom event of type name (x.<vendor>.<Name>; see
// ValidCustomType) with payload, a compact JSON object or nil.
func NewCustomEvent(id EventID, sessionID, name string, at time.Time, payload []byte) Event {
	return Event{ID: id, SessionID: sessionID, Type: EventCustom, Custom: name, OccurredAt: at.UTC(),
		CorrelationID: sessionID, Payload: payload}
}
