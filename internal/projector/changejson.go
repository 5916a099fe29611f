package projector

import (
	"strconv"
	"time"

	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
)

// appendChangeJSON appends the record value of ch on partition: the same
// bytes as feed.Change.AppendJSON of ch.feedChange(partition), several
// times faster. The feed writes a record per transition, and encoding/json's
// reflection was most of what the feed cost the projector. It writes the
// members itself only when no string needs escaping (printable ASCII
// without '"' or '\\'), the labels are in strictly increasing key order (as
// the fold keeps them, and as encoding/json orders a map) and the time is
// in encoding/json's range; otherwise it calls AppendJSON.
// TestAppendChangeJSON holds the two equal.
func appendChangeJSON(dst []byte, ch *change, partition int32) []byte {
	if !plainChange(ch) {
		c := ch.feedChange(partition)
		return c.AppendJSON(dst)
	}
	dst = append(dst, `{"sessionId":"`...)
	dst = append(dst, ch.session...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendUint(dst, ch.out.version, 10)
	dst = append(dst, `,"position":{"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, ch.source, 10)
	dst = append(dst, `},"eventId":"`...)
	dst = ch.id.AppendText(dst)
	dst = append(dst, `","type":"`...)
	dst = append(dst, ch.typ...)
	dst = append(dst, `","occurredAt":"`...)
	dst = ch.at.UTC().AppendFormat(dst, time.RFC3339Nano)
	if ch.out.rejected {
		dst = append(dst, `","outcome":"`+feed.Rejected+`","reason":"`...)
		dst = append(dst, ch.out.reason.String()...)
	} else {
		dst = append(dst, `","outcome":"`+feed.Applied...)
	}
	dst = append(dst, '"')
	if ch.out.from != fsm.StateNone {
		dst = append(dst, `,"from":"`...)
		dst = append(dst, ch.out.from.String()...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"to":"`...)
	dst = append(dst, ch.out.to.String()...)
	dst = append(dst, `","terminal":`...)
	dst = strconv.AppendBool(dst, ch.out.terminal)
	if len(ch.labels) > 0 {
		dst = append(dst, `,"labels":{`...)
		for i, l := range ch.labels {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '"')
			dst = append(dst, l.Key...)
			dst = append(dst, `":"`...)
			dst = append(dst, l.Value...)
			dst = append(dst, '"')
		}
		dst = append(dst, '}')
	}
	dst = appendMember(dst, "parentSessionId", ch.parent)
	dst = appendMember(dst, "correlationId", ch.correlation)
	return append(dst, '}')
}

// appendMember appends ,"name":"value" unless value is empty (omitempty).
func appendMember(dst []byte, name, value string) []byte {
	if value == "" {
		return dst
	}
	dst = append(dst, `,"`...)
	dst = append(dst, name...)
	dst = append(dst, `":"`...)
	dst = append(dst, value...)
	return append(dst, '"')
}

// plainChange reports whether appendChangeJSON may write ch itself. The
// event id, states, outcome and reason are plain by construction.
func plainChange(ch *change) bool {
	if y := ch.at.UTC().Year(); y < 0 || y > 9999 {
		return false
	}
	if !plain(ch.session) || !plain(ch.typ) || !plain(ch.parent) || !plain(ch.correlation) {
		return false
	}
	for i, l := range ch.labels {
		if !plain(l.Key) || !plain(l.Value) || (i > 0 && ch.labels[i-1].Key >= l.Key) {
			return false
		}
	}
	return true
}

// plain reports whether s is printable ASCII without '"' or '\\', which
// encoding/json writes as it is.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}
