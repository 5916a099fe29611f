package fsm

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Fields are the payload fields the fold reads, and the one the system
// writes for the cascade (CancelledByParent). Each is meaningful only for
// the event types noted; payloadTable lists them by event type.
type Fields struct {
	// The members the fold reads on the common paths come first, so that
	// they share a cache line with the Event's own (see Event).
	Mode       CancelMode  // CancellationRequested.mode
	Timeout    TimeoutKind // TimeoutExpired.timeout
	ToolFailed bool        // ToolCompleted with ok == false
	// ArmedVersion (when HasArmedVersion) is TimeoutExpired.armedVersion,
	// the version at which the deadline was armed (docs/timeouts.md), and
	// Deadline is TimeoutExpired.deadline (zero when absent).
	HasArmedVersion bool
	// RequestID (when HasRequestID) is the approval events' requestId,
	// kept as written: ingest refuses one out of RequestIDRule; the fold
	// uses the request's eventId for an invalid one on ApprovalRequested,
	// and treats an invalid one on a decision as a mismatch.
	HasRequestID bool
	ArmedVersion uint64
	RequestID    string

	Goal                 string // SessionCreated.goal, ReplacementLinked.goal
	PredecessorSessionID string // SessionCreated.predecessorSessionId
	Reason               string // SessionFailed, CancellationRequested, ReplacementRefused and the approval events' reason
	Deadline             time.Time

	// SessionCreated additions (docs/lifecycle.md).
	Labels            []Label           // payload.labels, in document order
	Metadata          []byte            // payload.metadata, compact JSON object
	ParentSessionID   string            // payload.parentSessionId
	ParentClosePolicy ParentClosePolicy // payload.parentClosePolicy
	Timeouts          Timeouts          // payload.timeouts

	SuccessorSessionID string   // SessionReplaced.successorSessionId
	PredecessorDigest  [32]byte // ReplacementLinked.predecessorDigest

	// SessionFailed's structured failure (docs/lifecycle.md, "Structured
	// failures"). Category and Code are kept as written: ingest refuses
	// values out of their rules, and the fold maps another category to
	// unknown and drops an invalid code, for records from other producers.
	Category  string // SessionFailed.category
	Code      string // SessionFailed.code
	Retryable bool   // SessionFailed.retryable

	By string // ApprovalGranted.by, ApprovalDenied.by

	// CancelledByParent is CancellationRequested.parentSessionId, the
	// parent whose end cancels the session, which the system writes in the
	// cascade to children (docs/lifecycle.md, "Replacements and children").
	// The fold does not read it: NewEvent writes it in the payload and
	// leaves it out of the event's Fields, and the decoder leaves it unset.
	CancelledByParent string
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

// payloadKind is how a payload member is spelled and checked.
type payloadKind uint8

const (
	pkText      payloadKind = iota // a string; from clients at most bound bytes, which the fold cuts to
	pkSessionID                    // a string that is a session id
	pkString                       // a string that set parses (a name, a time, a digest)
	pkBool                         // true or false
	pkCount                        // a non-negative integer of at most 2^53-1
	pkObject                       // an object kept as it is; one over bound bytes is refused from clients and dropped from a record
	pkLabels                       // an object of label values (labels)
	pkTimeouts                     // an object of durations by timeout kind (timeouts)
)

// payloadValue is a member's value once its kind is checked: the text of a
// string, the value of a boolean or count, the bytes of an object.
type payloadValue struct {
	text string
	b    bool
	n    uint64
	raw  []byte
}

// payloadField is one payload member of one event type. The decoder reads,
// checks and stores a member from its row, and NewEvent writes the members
// of a type in the order of its rows.
type payloadField struct {
	typ   EventType
	name  string
	kind  payloadKind
	bound int // pkText and pkObject: the bytes a value may have
	// unread marks a member the system writes and the fold does not read:
	// the decoder leaves it alone and NewEvent writes it without keeping it
	// in the event's Fields.
	unread bool
	// ingest, for a string kind, checks a value from clients only
	// (DecodeOptions.Ingest) and returns why it is refused; a record from
	// another producer keeps the value and the fold bounds it.
	ingest func(v string) string
	// set stores a value that passed its kind's checks in f, or returns why
	// it is refused. pkLabels and pkTimeouts have none: their members are
	// checked one by one (envelopeDecoder.labels, envelopeDecoder.timeouts).
	set func(f *Fields, v payloadValue) string
	// put appends the member's JSON value taken from src to p and keeps
	// it in dst, or reports false, appending nothing, when src leaves the
	// member out.
	put func(dst, src *Fields, p []byte) ([]byte, bool)
}

// payloadTable lists the payload members, grouped by event type (see
// payloadOf) in the order NewEvent writes them.
var payloadTable = [...]payloadField{
	{typ: SessionCreated, name: "goal", kind: pkText, bound: MaxGoalBytes,
		set: func(f *Fields, v payloadValue) string { f.Goal = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) { return putText(&dst.Goal, src.Goal, p) }},
	{typ: SessionCreated, name: "predecessorSessionId", kind: pkSessionID,
		set: func(f *Fields, v payloadValue) string { f.PredecessorSessionID = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			return putText(&dst.PredecessorSessionID, src.PredecessorSessionID, p)
		}},
	{typ: SessionCreated, name: "labels", kind: pkLabels, put: putLabels},
	{typ: SessionCreated, name: "metadata", kind: pkObject, bound: MaxMetadataBytes,
		set: func(f *Fields, v payloadValue) string { f.Metadata = v.raw; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			if len(src.Metadata) == 0 {
				return p, false
			}
			n := len(p)
			p = appendCompact(p, src.Metadata)
			dst.Metadata = p[n:len(p):len(p)]
			return p, true
		}},
	{typ: SessionCreated, name: "parentSessionId", kind: pkSessionID,
		set: func(f *Fields, v payloadValue) string { f.ParentSessionID = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			return putText(&dst.ParentSessionID, src.ParentSessionID, p)
		}},
	{typ: SessionCreated, name: "parentClosePolicy", kind: pkString,
		set: func(f *Fields, v payloadValue) string {
			pol, ok := ParseParentClosePolicy(v.text)
			if !ok {
				return "must be cancel or abandon"
			}
			f.ParentClosePolicy = pol
			return ""
		},
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			if src.ParentClosePolicy == ParentCloseCancel {
				return p, false
			}
			dst.ParentClosePolicy = src.ParentClosePolicy
			return appendQuoted(p, src.ParentClosePolicy.String()), true
		}},
	{typ: SessionCreated, name: "timeouts", kind: pkTimeouts, put: putTimeouts},

	{typ: SessionFailed, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},
	{typ: SessionFailed, name: "category", kind: pkString,
		ingest: func(v string) string {
			if _, ok := ParseFailureCategory(v); !ok {
				return "must be " + FailureCategoryRule
			}
			return ""
		},
		set: func(f *Fields, v payloadValue) string { f.Category = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) { return putText(&dst.Category, src.Category, p) }},
	{typ: SessionFailed, name: "code", kind: pkString,
		ingest: func(v string) string {
			if !ValidFailureCode(v) {
				return "must match " + FailureCodeRule
			}
			return ""
		},
		set: func(f *Fields, v payloadValue) string { f.Code = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) { return putText(&dst.Code, src.Code, p) }},
	{typ: SessionFailed, name: "retryable", kind: pkBool,
		set: func(f *Fields, v payloadValue) string { f.Retryable = v.b; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			if !src.Retryable {
				return p, false
			}
			dst.Retryable = true
			return append(p, "true"...), true
		}},

	{typ: ApprovalRequested, name: "requestId", kind: pkString, ingest: checkRequestID, set: setRequestID, put: putRequestID},
	{typ: ApprovalRequested, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},
	{typ: ApprovalGranted, name: "requestId", kind: pkString, ingest: checkRequestID, set: setRequestID, put: putRequestID},
	{typ: ApprovalGranted, name: "by", kind: pkText, bound: MaxDeciderBytes, set: setBy, put: putBy},
	{typ: ApprovalGranted, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},
	{typ: ApprovalDenied, name: "requestId", kind: pkString, ingest: checkRequestID, set: setRequestID, put: putRequestID},
	{typ: ApprovalDenied, name: "by", kind: pkText, bound: MaxDeciderBytes, set: setBy, put: putBy},
	{typ: ApprovalDenied, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},

	{typ: CancellationRequested, name: "mode", kind: pkString,
		set: func(f *Fields, v payloadValue) string {
			m, ok := ParseCancelMode(v.text)
			if !ok {
				return "must be graceful or forced"
			}
			f.Mode = m
			return ""
		},
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			dst.Mode = src.Mode
			return appendQuoted(p, src.Mode.String()), true
		}},
	{typ: CancellationRequested, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},
	{typ: CancellationRequested, name: "parentSessionId", kind: pkSessionID, unread: true,
		put: func(_, src *Fields, p []byte) ([]byte, bool) {
			var discard string
			return putText(&discard, src.CancelledByParent, p)
		}},

	{typ: TimeoutExpired, name: "armedVersion", kind: pkCount,
		set: func(f *Fields, v payloadValue) string { f.ArmedVersion, f.HasArmedVersion = v.n, true; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			if !src.HasArmedVersion {
				return p, false
			}
			dst.ArmedVersion, dst.HasArmedVersion = src.ArmedVersion, true
			return strconv.AppendUint(p, src.ArmedVersion, 10), true
		}},
	{typ: TimeoutExpired, name: "deadline", kind: pkString,
		set: func(f *Fields, v payloadValue) string {
			t, ok := parseRFC3339([]byte(v.text))
			if !ok || t.Before(minOccurredAt) || !t.Before(maxOccurredAt) {
				return "must be an RFC 3339 timestamp with a zone between 1970 and 2262"
			}
			f.Deadline = t
			return ""
		},
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			if src.Deadline.IsZero() {
				return p, false
			}
			dst.Deadline = src.Deadline.UTC()
			p = append(p, '"')
			p = dst.Deadline.AppendFormat(p, time.RFC3339Nano)
			return append(p, '"'), true
		}},
	{typ: TimeoutExpired, name: "timeout", kind: pkString,
		set: func(f *Fields, v payloadValue) string {
			k, ok := ParseTimeoutKind([]byte(v.text))
			if !ok {
				return "must be one of " + timeoutKindList(", ")
			}
			f.Timeout = k
			return ""
		},
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			dst.Timeout = src.Timeout
			return appendQuoted(p, src.Timeout.String()), true
		}},

	{typ: ToolCompleted, name: "ok", kind: pkBool,
		set: func(f *Fields, v payloadValue) string { f.ToolFailed = !v.b; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			dst.ToolFailed = src.ToolFailed
			return strconv.AppendBool(p, !src.ToolFailed), true
		}},

	{typ: SessionReplaced, name: "successorSessionId", kind: pkSessionID,
		set: func(f *Fields, v payloadValue) string { f.SuccessorSessionID = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			dst.SuccessorSessionID = src.SuccessorSessionID
			return appendQuoted(p, src.SuccessorSessionID), true
		}},

	{typ: ReplacementLinked, name: "predecessorDigest", kind: pkString,
		set: func(f *Fields, v payloadValue) string {
			if len(v.text) != 64 {
				return "must be 64 hex digits (a SHA-256 digest)"
			}
			if _, err := hex.Decode(f.PredecessorDigest[:], []byte(v.text)); err != nil {
				return "must be 64 hex digits (a SHA-256 digest)"
			}
			return ""
		},
		put: func(dst, src *Fields, p []byte) ([]byte, bool) {
			dst.PredecessorDigest = src.PredecessorDigest
			return appendQuoted(p, hex.EncodeToString(src.PredecessorDigest[:])), true
		}},
	{typ: ReplacementLinked, name: "goal", kind: pkText, bound: MaxGoalBytes,
		set: func(f *Fields, v payloadValue) string { f.Goal = v.text; return "" },
		put: func(dst, src *Fields, p []byte) ([]byte, bool) { return putText(&dst.Goal, src.Goal, p) }},

	{typ: ReplacementRefused, name: "reason", kind: pkText, bound: MaxReasonBytes, set: setReason, put: putReason},
}

// payloadOf is, per event type, its rows of payloadTable; a type with none
// skips the payload scan.
var payloadOf = func() (of [numEventTypes][]payloadField) {
	for i := 0; i < len(payloadTable); {
		j := i
		for j < len(payloadTable) && payloadTable[j].typ == payloadTable[i].typ {
			j++
		}
		if of[payloadTable[i].typ] != nil {
			panic("fsm: the payload members of " + payloadTable[i].typ.String() + " are not together")
		}
		of[payloadTable[i].typ] = payloadTable[i:j:j]
		i = j
	}
	return of
}()

func setReason(f *Fields, v payloadValue) string { f.Reason = v.text; return "" }

func setBy(f *Fields, v payloadValue) string { f.By = v.text; return "" }

func putBy(dst, src *Fields, p []byte) ([]byte, bool) { return putText(&dst.By, src.By, p) }

func checkRequestID(v string) string {
	if !ValidRequestID(v) {
		return "must match " + RequestIDRule
	}
	return ""
}

func setRequestID(f *Fields, v payloadValue) string {
	f.RequestID, f.HasRequestID = v.text, true
	return ""
}

func putRequestID(dst, src *Fields, p []byte) ([]byte, bool) {
	if !src.HasRequestID && src.RequestID == "" {
		return p, false
	}
	dst.RequestID, dst.HasRequestID = src.RequestID, true
	return appendQuoted(p, src.RequestID), true
}

func putReason(dst, src *Fields, p []byte) ([]byte, bool) {
	dst.Reason = src.Reason
	var discard string
	return putText(&discard, src.Reason, p)
}

// putText keeps a string member in *dst and appends it, unless it is empty.
func putText(dst *string, v string, p []byte) ([]byte, bool) {
	if v == "" {
		return p, false
	}
	*dst = v
	return appendQuoted(p, v), true
}

func putLabels(dst, src *Fields, p []byte) ([]byte, bool) {
	if len(src.Labels) == 0 {
		return p, false
	}
	dst.Labels = src.Labels
	for i, l := range src.Labels {
		if i == 0 {
			p = append(p, '{')
		} else {
			p = append(p, ',')
		}
		p = appendQuoted(p, l.Key)
		p = append(p, ':')
		p = appendQuoted(p, l.Value)
	}
	return append(p, '}'), true
}

func putTimeouts(dst, src *Fields, p []byte) ([]byte, bool) {
	if src.Timeouts == (Timeouts{}) {
		return p, false
	}
	dst.Timeouts = src.Timeouts
	sep := byte('{')
	for _, k := range TimeoutKinds() {
		if src.Timeouts[k] != 0 {
			p = append(p, sep)
			sep = ','
			p = appendQuoted(p, k.String())
			p = append(p, ':')
			p = appendQuoted(p, src.Timeouts[k].String())
		}
	}
	return append(p, '}'), true
}

// timeoutKindList names the timeout kinds for a message, the last after
// last: "execution, inactivity, approval, recovery or cancellation".
func timeoutKindList(last string) string {
	var b strings.Builder
	for i, k := range TimeoutKinds() {
		switch {
		case i == NumTimeoutKinds-2:
			b.WriteString(last)
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(k.String())
	}
	return b.String()
}

// payloadFields reads the payload members the fold uses for the event's type
// (its rows of payloadTable) and checks them. Members the fold does not read
// are not inspected.
func (d *envelopeDecoder) payloadFields(p []byte) {
	rows := payloadOf[d.ev.Type]
	if len(rows) == 0 {
		return
	}
	var seen uint16
	s := scanner{b: p}
	_, _, _ = s.object(0, 1, func(key []byte, keyEsc bool, val []byte, kind jsonKind) error {
		k := -1
		for i := range rows {
			if !rows[i].unread && keyIs(key, keyEsc, rows[i].name) {
				k = i
				break
			}
		}
		if k < 0 {
			return nil
		}
		field := "payload." + rows[k].name
		if seen&(1<<k) != 0 {
			d.add(field, "duplicate field")
			return nil
		}
		seen |= 1 << k
		if kind != kindNull {
			d.payloadMember(&rows[k], field, val, kind)
		}
		return nil
	})
}

// payloadMember checks one member against its row and stores it.
func (d *envelopeDecoder) payloadMember(pf *payloadField, field string, val []byte, kind jsonKind) {
	var v payloadValue
	switch pf.kind {
	case pkLabels:
		d.labels(field, val, kind)
		return
	case pkTimeouts:
		d.timeouts(field, val, kind)
		return
	case pkBool:
		if kind != kindBool {
			d.add(field, "must be a boolean, got "+kind.String())
			return
		}
		v.b = string(val) == "true"
	case pkCount:
		n, ok := d.count(field, val, kind)
		if !ok {
			return
		}
		v.n = n
	case pkObject:
		if kind != kindObject {
			d.add(field, "must be an object, got "+kind.String())
			return
		}
		if len(val) > pf.bound {
			if d.opts.Ingest {
				d.add(field, fmt.Sprintf("is %d bytes encoded; the limit is %d", len(val), pf.bound))
			}
			return // dropped: see the package doc
		}
		v.raw = val
	default: // the string kinds
		if kind != kindString {
			d.add(field, "must be a string, got "+kind.String())
			return
		}
		_, esc, _ := (&scanner{b: val}).str(0)
		v.text = unquote(val, esc)
		switch {
		case pf.kind == pkText && !d.withinBound(field, v.text, pf.bound):
			return
		case pf.kind == pkSessionID && !ValidSessionID(v.text):
			d.add(field, "must be "+SessionIDRule)
			return
		case pf.kind == pkSessionID && d.opts.Ingest && !ValidNewSessionID(v.text):
			d.add(field, "must be "+NewSessionIDRule+` ("." and ".." are path segments)`)
			return
		case pf.ingest != nil && d.opts.Ingest:
			if msg := pf.ingest(v.text); msg != "" {
				d.add(field, msg)
				return
			}
		}
	}
	if msg := pf.set(&d.ev.Fields, v); msg != "" {
		d.add(field, msg)
	}
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
			d.add(f, "unknown timeout kind: want "+timeoutKindList(" or "))
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
// result equals what decoding its own record gives back, but for
// CancelledByParent, which is written and not kept.
func NewEvent(id EventID, sessionID string, t EventType, at time.Time, f Fields) Event {
	e := Event{ID: id, SessionID: sessionID, Type: t, OccurredAt: at.UTC(), CorrelationID: sessionID}
	var p []byte
	if int(t) < numEventTypes {
		for i := range payloadOf[t] {
			pf := &payloadOf[t][i]
			n := len(p)
			if n == 0 {
				p = append(p, '{')
			} else {
				p = append(p, ',')
			}
			p = appendQuoted(p, pf.name)
			p = append(p, ':')
			var ok bool
			if p, ok = pf.put(&e.Fields, &f, p); !ok {
				p = p[:n]
			}
		}
	}
	if len(p) > 0 {
		e.Payload = append(p, '}')
	}
	return e
}
