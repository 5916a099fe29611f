package fsm

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

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
