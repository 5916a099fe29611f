package projector

import (
	"context"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReasonParentCancelled is the reason of the CancellationRequested a child
// gets when its parent is cancelled or fails.
const ReasonParentCancelled = "parent_cancelled"

// MaxCascadeChildren bounds the children one parent's end cancels (read
// from the children index); more are logged and left alone.
const MaxCascadeChildren = 10000

// family is what a noted record means for cancellation reaching children
// (docs/lifecycle.md, "Replacements and children"): a child's creation names
// its parent, and a session that enters CANCELLING, FAILED or CANCELLED
// cancels its children.
//
// Children are known from the index in Redis (snapshot.Store.AddChildren,
// Children): a child's creation adds it before the child's parent is read,
// and a parent's end is stored (its snapshot) before its children are read,
// so whichever of the two comes second sees the other, across partitions
// and projectors: a child created after its parent ended is cancelled by
// its own creation. A child cancelled by both gets the same event twice
// (its id is derived from the child and the parent's event that entered
// the state: the event itself, or the parent's latest transition), which
// its fold sees as a duplicate.
type family struct {
	parent string                // a child's creation: the parent it names
	policy fsm.ParentClosePolicy // the child's parentClosePolicy
	ended  bool                  // the session entered CANCELLING, FAILED or CANCELLED
	mode   fsm.CancelMode        // the session's cancellation mode (graceful when none)
}

// cascades reports whether entering st cancels a session's children.
func cascades(st fsm.State) bool {
	return st == fsm.StateCancelling || st == fsm.StateFailed || st == fsm.StateCancelled
}

// familyOf returns what e, folded into s with out, means for parents and
// children, or nil.
func familyOf(e *fsm.Event, s *snapshot.Snapshot, out outcome) *family {
	if out.orphan || out.rejected {
		return nil
	}
	if e.Type == fsm.SessionCreated && out.from == fsm.StateNone {
		if p := e.Fields.ParentSessionID; p != "" && p != e.SessionID && fsm.ValidSessionID(p) {
			return &family{parent: p, policy: e.Fields.ParentClosePolicy}
		}
		return nil
	}
	if out.from == out.to || !cascades(out.to) {
		return nil
	}
	f := &family{ended: true}
	if s.Cancellation.Requested {
		f.mode = s.Cancellation.Mode
	}
	return f
}

// cascade records the batch's new children in the index, then returns the
// CancellationRequested records of the children to cancel: the children of
// the sessions that ended in the batch, and the new children whose parent
// had already ended. It runs after the batch's snapshots are stored, and
// retries Redis until ctx ends.
func (d *derived) cascade(ctx context.Context, store *snapshot.Store, job *flushJob) ([]*kgo.Record, error) {
	var links []snapshot.ChildLink
	var born, ended []*change
	for _, fb := range job.changes {
		for i := range fb.changes {
			ch := &fb.changes[i]
			switch {
			case ch.fam == nil:
			case ch.fam.parent != "":
				links = append(links, snapshot.ChildLink{Parent: ch.fam.parent, Child: ch.session})
				if ch.fam.policy != fsm.ParentCloseAbandon {
					born = append(born, ch)
				}
			case ch.fam.ended:
				ended = append(ended, ch)
			}
		}
	}
	if len(links) == 0 && len(ended) == 0 {
		return nil, nil
	}
	if err := d.retry(ctx, "recording children", func() error { return store.AddChildren(ctx, links) }); err != nil {
		return nil, err
	}
	var out []*kgo.Record
	if len(ended) > 0 {
		parents := make([]string, len(ended))
		for i, ch := range ended {
			parents[i] = ch.session
		}
		var kids [][]string
		var cut []bool
		if err := d.retry(ctx, "reading children", func() (err error) {
			kids, cut, err = store.Children(ctx, parents, MaxCascadeChildren)
			return err
		}); err != nil {
			return nil, err
		}
		var all []string
		var of []*change // the parent of each of all
		for i, ch := range ended {
			if cut[i] {
				d.log.Warn("a session has more children than are cancelled with it", "session", ch.session, "cancelled", MaxCascadeChildren)
			}
			for _, k := range kids[i] {
				all, of = append(all, k), append(of, ch)
			}
		}
		var snaps []*snapshot.Snapshot
		if err := d.retry(ctx, "reading children", func() (err error) {
			snaps, err = store.GetMany(ctx, all)
			return err
		}); err != nil {
			return nil, err
		}
		for i, k := range snaps {
			ch := of[i]
			if k == nil || k.State.Terminal() || k.ParentClosePolicy == fsm.ParentCloseAbandon || k.ParentSessionID != ch.session {
				continue
			}
			out = append(out, cancelRecord(d.eventsTopic, k.ID, ch.session, ch.id, ch.at, ch.fam.mode, ch.headers))
		}
	}
	if len(born) > 0 {
		parents := make([]string, len(born))
		for i, ch := range born {
			parents[i] = ch.fam.parent
		}
		var snaps []*snapshot.Snapshot
		if err := d.retry(ctx, "reading parents", func() (err error) {
			snaps, err = store.GetMany(ctx, parents)
			return err
		}); err != nil {
			return nil, err
		}
		for i, p := range snaps {
			if p == nil || !cascades(p.State) || p.NumTransitions() == 0 {
				continue
			}
			entered := p.TransitionAt(p.NumTransitions() - 1) // the event that entered the parent's state
			mode := fsm.CancelGraceful
			if p.Cancellation.Requested {
				mode = p.Cancellation.Mode
			}
			out = append(out, cancelRecord(d.eventsTopic, born[i].session, p.ID, entered.EventID, time.Unix(0, entered.At), mode, born[i].headers))
		}
	}
	return out, nil
}

// cancelRecord returns the CancellationRequested record of child for the
// end of parent (the parent's event trigger, at its occurredAt), with the
// system's origin header beside the event type and the trace context.
func cancelRecord(topic, child, parent string, trigger fsm.EventID, at time.Time, mode fsm.CancelMode, trace []kgo.RecordHeader) *kgo.Record {
	e := fsm.NewEvent(derivedID(fsm.CancellationRequested, child, trigger), child, fsm.CancellationRequested, at,
		fsm.Fields{Reason: ReasonParentCancelled, Mode: mode})
	p := e.Payload[: len(e.Payload)-1 : len(e.Payload)-1] // NewEvent's object, without its closing brace
	p = append(p, `,"parentSessionId":`...)
	e.Payload = append(strconv.AppendQuote(p, parent), '}')
	headers := make([]kgo.RecordHeader, 0, 2+len(trace))
	headers = append(headers, kgo.RecordHeader{Key: kafka.HeaderEventType, Value: []byte(fsm.CancellationRequested.String())},
		kafka.SystemHeader())
	headers = append(headers, trace...)
	return &kgo.Record{Topic: topic, Key: []byte(child), Value: fsm.AppendRecord(nil, &e), Headers: headers}
}

// retry runs op until it succeeds or ctx ends.
func (d *derived) retry(ctx context.Context, what string, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		d.log.Warn(what, "err", err, "attempt", attempt)
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}
