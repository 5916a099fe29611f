package fsm

import "time"

// Event is one lifecycle or execution event: the envelope of
// docs/lifecycle.md.
//
// Payload holds the payload object as compact JSON (nil when absent). Fields
// holds what the fold reads from it; the decoders fill both, and code that
// builds an Event by hand must keep them consistent (NewEvent does).
type Event struct {
	// The fields come in the order the fold reads them: those it reads
	// for every event (the digest chain's canonical bytes, the checks)
	// fill the struct's first two cache lines, Fields' own first members
	// included, and those only a few event types carry come after
	// (BenchmarkReducerAgainstFirst: 1.29 of the first release's cost
	// per event in this order, 1.33 with the fields as they were added).
	ID        EventID
	SessionID string
	Type      EventType
	// ExpectedVersion, when HasExpectedVersion is set, is the session
	// version the producer expects (docs/lifecycle.md): the fold rejects the
	// event version_conflict when the session's version differs.
	HasExpectedVersion bool
	ExpectedVersion    uint64
	OccurredAt         time.Time // always UTC
	CorrelationID      string    // defaults to SessionID
	Payload            []byte
	Fields             Fields
	// Custom is the type name x.<vendor>.<Name> when Type is EventCustom,
	// and empty otherwise.
	Custom string
	// SentBy is the name of the token that sent an approval decision
	// through ingest, beside the payload's "by" (who decided, as the
	// producer wrote it: a producer may decide on someone's behalf).
	// Ingest sets it from the request's token and refuses it in a client's
	// envelope; the record member "sentBy" carries it. It is not part of
	// the canonical bytes: it says who carried the event, not what happened.
	SentBy string
}

// TypeName returns the wire spelling of the event's type: Custom for a
// custom event, Type.String() otherwise.
func (e *Event) TypeName() string {
	if e.Type == EventCustom {
		return e.Custom
	}
	return e.Type.String()
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

// NewSessionIDRule says in words what ValidNewSessionID accepts.
const NewSessionIDRule = SessionIDRule + ", not only dots"

// ValidNewSessionID reports whether a producer may name session id (ingest
// and pkg/client refuse any other): ValidSessionID, and not dots alone.
// "." and ".." are path segments that URL paths and S3 rewrite, so such a
// session could be neither read at /v1/sessions/{id} nor archived under
// its own key. Records already in the log are read with ValidSessionID, as
// before.
func ValidNewSessionID(id string) bool {
	if !ValidSessionID(id) {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] != '.' {
			return true
		}
	}
	return false
}

func sessionIDChar(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

// NewCustomEvent builds a custom event of type name (x.<vendor>.<Name>; see
// ValidCustomType) with payload, a compact JSON object or nil.
func NewCustomEvent(id EventID, sessionID, name string, at time.Time, payload []byte) Event {
	return Event{ID: id, SessionID: sessionID, Type: EventCustom, Custom: name, OccurredAt: at.UTC(),
		CorrelationID: sessionID, Payload: payload}
}
