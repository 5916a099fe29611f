package projector

import (
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReasonUnknownPredecessor is the reason of the ReplacementRefused a
// successor gets when its predecessor does not exist.
const ReasonUnknownPredecessor = fsm.RefusalUnknownPredecessor

// reaction is an event the projector derives from a folded one, for
// another session (replacement linking, docs/lifecycle.md):
//
//   - a successor's applied SessionCreated naming predecessorSessionId
//     gives SessionReplaced {"successorSessionId"} for the predecessor;
//   - the predecessor's SessionReplaced gives the successor
//     ReplacementLinked {"predecessorDigest", "goal"} when applied (the
//     predecessor's digest after it, and its goal), ReplacementRefused
//     {"reason"} when rejected (the first condition of
//     fsm.ReplacementRefusal that failed), and ReplacementRefused
//     {"reason": "unknown_predecessor"} when there is no predecessor (the
//     record is an orphan, which is not set aside as a dead letter).
//
// The event's id is derived from its type, the session it is for and the
// event it derives from (derivedID), and its occurredAt is that event's,
// so producing it again after a crash gives a duplicate that the fold
// recognises.
type reaction struct {
	kind   fsm.EventType // 0: none
	target string
	fields fsm.Fields
}

// reactionOf returns the event derived from e given what the fold did
// with it, or nil.
func reactionOf(e *fsm.Event, out outcome) *reaction {
	switch e.Type {
	case fsm.SessionCreated:
		if out.orphan || out.rejected || out.from != fsm.StateNone || e.Fields.PredecessorSessionID == "" ||
			!fsm.ValidSessionID(e.Fields.PredecessorSessionID) {
			return nil
		}
		return &reaction{kind: fsm.SessionReplaced, target: e.Fields.PredecessorSessionID,
			fields: fsm.Fields{SuccessorSessionID: e.SessionID}}
	case fsm.SessionReplaced:
		if !fsm.ValidSessionID(e.Fields.SuccessorSessionID) {
			return nil
		}
		r := &reaction{kind: fsm.ReplacementRefused, target: e.Fields.SuccessorSessionID}
		switch {
		case out.orphan:
			r.fields.Reason = ReasonUnknownPredecessor
		case out.rejected:
			r.fields.Reason = out.refusal
			if r.fields.Reason == "" { // an outbox entry written before refusals were kept
				r.fields.Reason = out.reason.String()
			}
		case out.hasDigest:
			r.kind, r.fields.PredecessorDigest, r.fields.Goal = fsm.ReplacementLinked, out.digest, out.goal
		default:
			return nil
		}
		return r
	}
	return nil
}

// record returns the derived event's record for the events topic, keyed
// by its session (the client's key hash puts it on that session's
// partition), with the event type, the system's origin and the source
// record's trace context in its headers.
func (r reaction) record(topic string, ch *change) kgo.Record {
	e := fsm.NewEvent(derivedID(r.kind, r.target, ch.id), r.target, r.kind, ch.at, r.fields)
	headers := make([]kgo.RecordHeader, 0, 2+len(ch.headers))
	headers = append(headers, kgo.RecordHeader{Key: kafka.HeaderEventType, Value: []byte(r.kind.String())}, kafka.SystemHeader())
	headers = append(headers, ch.headers...)
	return kgo.Record{Topic: topic, Partition: -1, Key: []byte(r.target), Value: fsm.AppendRecord(nil, &e), Headers: headers}
}

// derivedID is the id of the event of type kind for session target derived
// from the event trigger (fsm.DeriveEventID over the three), in the space
// reserved for the ids the system derives.
func derivedID(kind fsm.EventType, target string, trigger fsm.EventID) fsm.EventID {
	return fsm.DeriveEventID(kind.String(), target, string(trigger[:]))
}
