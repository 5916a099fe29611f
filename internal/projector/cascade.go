package projector

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The reasons of the CancellationRequested a child gets when its parent
// closes: ReasonParentCompleted when the parent completed,
// ReasonParentCancelled when it was cancelled (entered CANCELLING) or
// failed. A child created after its parent had closed is cancelled at its
// creation with ReasonParentClosed (docs/lifecycle.md, "Replacements and
// children"), whether the parent is
// still in Redis ("after" by the events' occurredAt, childReason) or
// archived (its tombstone).
const (
	ReasonParentCancelled = "parent_cancelled"
	ReasonParentCompleted = "parent_completed"
	ReasonParentClosed    = "parent_closed"
)

// closeReason returns the reason a child's cancellation gives for its
// parent's close into st.
func closeReason(st fsm.State) string {
	if st == fsm.StateCompleted {
		return ReasonParentCompleted
	}
	return ReasonParentCancelled
}

// childReason returns the reason of the cancellation of a child created at
// created by its parent's close at closed, which gives reason:
// ReasonParentClosed when the child was created after the close. It
// compares the events' occurredAt, not the order in which the fold met
// them (the child and its parent may be on different partitions), so
// whichever path cancels the child (its parent's cascade, or its own
// creation) gives the same reason, and so does a fold again.
func childReason(created, closed time.Time, reason string) string {
	if created.After(closed) {
		return ReasonParentClosed
	}
	return reason
}

// cascadePage is how many children a cascade handles at once: their
// snapshots are read cascadePage at a time, and a parent's children index
// is read in pages of about as many (ChildrenPages); cascadeParents is how
// many parents' indexes one round trip reads. With the Kafka client's
// bounded produce buffer, they bound what a cascade holds in memory,
// however many children a parent has and however many parents end in one
// batch.
const (
	cascadePage    = 256
	cascadeParents = 64
)

// family is what a noted record means for cancellation reaching children
// (docs/lifecycle.md, "Replacements and children"): a child's creation names
// its parent, a session that enters CANCELLING, COMPLETED, FAILED or
// CANCELLED cancels its children (no orphans), a session whose graceful
// cancellation escalates to forced escalates its children's, and a child
// that ends leaves its parent's index.
//
// Children are known from the index in Redis (projstore.Store.AddChildren,
// ChildrenPages): a child's creation adds it before the child's parent is
// read, and a parent's end is stored (its snapshot) before its children are
// read, so whichever of the two comes second sees the other, across
// partitions and projectors: a child created after its parent closed is
// cancelled by its own creation. A child cancelled by both gets the same
// event twice (its id is derived from the child and the parent's event that
// entered CANCELLING, or FAILED or CANCELLED when it did not pass through
// CANCELLING: the event itself, or the parent's transition into that
// state), which its fold sees as a duplicate; its reason is the same on
// both paths (childReason): parent_closed for a child created after its
// parent closed, else the parent's close's (closeReason). A child that ends (a terminal state)
// is removed from the index (projstore.Store.RemoveChildren), so the index
// holds the children a parent's end may still have to reach.
type family struct {
	parent string                // a child's creation: the parent it names
	policy fsm.ParentClosePolicy // the child's parentClosePolicy
	// ended: the session entered CANCELLING or COMPLETED, or FAILED or
	// CANCELLED from a state other than CANCELLING (from CANCELLING, its
	// entering CANCELLING already cancelled its children).
	ended bool
	// escalates: a forced CancellationRequested escalated the session's
	// graceful CANCELLING (CANCELLING -> CANCELLING); ended is set too, and
	// the children it reaches include those still graceful CANCELLING.
	escalates bool
	mode      fsm.CancelMode // the session's cancellation mode (graceful when none)
	reason    string         // the children's cancellation reason (closeReason)
	leaves    string         // the session ended: the parent whose children index it leaves
}

// cascades reports whether entering st cancels a session's children:
// every close does (CANCELLING, and each terminal state).
func cascades(st fsm.State) bool {
	return st == fsm.StateCancelling || st.Terminal()
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
	if out.from == out.to {
		if escalation(e, s, out) {
			return &family{ended: true, escalates: true, mode: fsm.CancelForced, reason: closeReason(out.to)}
		}
		return nil
	}
	var f family
	if cascades(out.to) && !cascades(out.from) {
		f.ended, f.reason = true, closeReason(out.to)
		if s.Cancellation.Requested {
			f.mode = s.Cancellation.Mode
		}
	}
	if p := s.ParentSessionID; out.to.Terminal() && p != "" && p != e.SessionID && fsm.ValidSessionID(p) {
		f.leaves = p
	}
	if !f.ended && f.leaves == "" {
		return nil
	}
	return &f
}

// escalation reports whether e, folded into s with out, escalated a
// graceful CANCELLING to forced: an applied CancellationRequested that
// left the session CANCELLING is one (the fold rejects any other there).
func escalation(e *fsm.Event, s *snapshot.Snapshot, out outcome) bool {
	return e.Type == fsm.CancellationRequested && out.from == fsm.StateCancelling && out.to == fsm.StateCancelling &&
		s.Cancellation.Mode == fsm.CancelForced
}

// cascade records the batch's new children in the index and takes its
// ended children out of it, then emits the CancellationRequested records
// of the children to cancel: the children of the sessions that ended in
// the batch (reach), and the new children whose parent had already ended.
// It runs after the batch's snapshots are stored and before its
// checkpoints, and retries Redis until ctx ends. Everything it does is
// idempotent, so a batch written again after a crash does it all again
// (see reach).
func (d *derived) cascade(ctx context.Context, store Store, job *flushJob, emit func(*kgo.Record)) error {
	var links, left []projstore.ChildLink
	var born, ended []*change
	for _, fb := range job.changes {
		if job.stale[fb.partition] || job.lost[fb.partition] {
			continue // a newer owner has it, or it is rebuilt: its children are recorded and reached then
		}
		for i := range fb.changes {
			ch := &fb.changes[i]
			switch {
			case ch.fam == nil:
			case ch.fam.parent != "":
				links = append(links, projstore.ChildLink{Parent: ch.fam.parent, Child: ch.session})
				if ch.fam.policy != fsm.ParentCloseAbandon {
					born = append(born, ch)
				}
			default:
				if ch.fam.leaves != "" {
					left = append(left, projstore.ChildLink{Parent: ch.fam.leaves, Child: ch.session})
				}
				if ch.fam.ended {
					ended = append(ended, ch)
				}
			}
		}
	}
	if len(links) == 0 && len(left) == 0 && len(ended) == 0 {
		return nil
	}
	// Added before removed: a child created and ended in one batch (its
	// events are on one partition, in order) is left out of the index.
	if err := retry(ctx, d.log, "recording children", func(ctx context.Context) error { return store.AddChildren(ctx, links) }); err != nil {
		return err
	}
	if err := retry(ctx, d.log, "removing ended children", func(ctx context.Context) error { return store.RemoveChildren(ctx, left) }); err != nil {
		return err
	}
	if err := d.reach(ctx, store, ended, emit); err != nil {
		return err
	}
	for len(born) > 0 {
		page := born[:min(len(born), cascadePage)]
		born = born[len(page):]
		parents := make([]string, len(page))
		for i, ch := range page {
			parents[i] = ch.fam.parent
		}
		var snaps []*snapshot.Snapshot
		var tombs []*projstore.Tombstone
		if err := retry(ctx, d.log, "reading parents", func(ctx context.Context) (err error) {
			if snaps, err = store.GetMany(ctx, parents); err != nil {
				return err
			}
			tombs, err = store.Tombstones(ctx, parents)
			return err
		}); err != nil {
			return err
		}
		for i, p := range snaps {
			if p == nil {
				if t := tombs[i]; t != nil {
					// An archived parent (docs/lifecycle.md): it closed, so the
					// child is cancelled as by a parent still in Redis,
					// parent_closed whatever its occurredAt says: its
					// creation is folded after the parent left Redis, and
					// no cascade of the parent can reach it any more.
					emit(cancelRecord(d.eventsTopic, page[i].session, t.SessionID, tombstoneTrigger(t), t.Ended,
						fsm.CancelGraceful, ReasonParentClosed, page[i].headers))
				}
				continue
			}
			if !cascades(p.State) || p.NumTransitions() == 0 {
				continue
			}
			entered := closedBy(p)
			mode := fsm.CancelGraceful
			if p.Cancellation.Requested {
				mode = p.Cancellation.Mode
			}
			closed := time.Unix(0, entered.At)
			emit(cancelRecord(d.eventsTopic, page[i].session, p.ID, entered.EventID, closed, mode,
				childReason(page[i].at, closed, closeReason(entered.To)), page[i].headers))
		}
	}
	return nil
}

// reach emits the cancellations of the children of the sessions in ended,
// in pages: it reads the parents' children indexes cascadeParents at a
// time (one page each, ChildrenPages), queues the children found, and
// handles them cascadePage at a time (cancelPage), the parents with more
// pages going on from their cursors, so what it holds stays bounded
// however many children there are.
//
// Its progress is kept nowhere: a crash in the middle (or anywhere before
// the batch's checkpoints) makes the restart fold the batch again, and
// note the parent's end again (from the outbox, when its snapshot was
// stored), so the cascade starts over from the start of the index. That
// is idempotent: a child reached before the crash whose cancellation is
// folded is CANCELLING and is skipped; one whose cancellation is still in
// the log gets the same event again (same id), a duplicate. It is bounded:
// one pass over the index, which holds no ended child, in the same pages.
func (d *derived) reach(ctx context.Context, store Store, ended []*change, emit func(*kgo.Record)) error {
	type scan struct {
		parent *change
		cursor string
	}
	var more []scan // parents whose index has pages left
	var kids []string
	var of []*change // the parent of each of kids
	handle := func(all bool) error {
		for len(kids) >= cascadePage || (all && len(kids) > 0) {
			n := min(len(kids), cascadePage)
			if err := d.cancelPage(ctx, store, kids[:n], of[:n], emit); err != nil {
				return err
			}
			kids, of = append(kids[:0], kids[n:]...), append(of[:0], of[n:]...)
		}
		return nil
	}
	for len(ended) > 0 || len(more) > 0 {
		var from []projstore.ChildrenCursor
		var who []*change
		for len(from) < cascadeParents && len(more) > 0 {
			sc := more[len(more)-1]
			more = more[:len(more)-1]
			from, who = append(from, projstore.ChildrenCursor{Parent: sc.parent.session, Cursor: sc.cursor}), append(who, sc.parent)
		}
		for len(from) < cascadeParents && len(ended) > 0 {
			from, who = append(from, projstore.ChildrenCursor{Parent: ended[0].session}), append(who, ended[0])
			ended = ended[1:]
		}
		var pages [][]string
		var next []string
		if err := retry(ctx, d.log, "reading children", func(ctx context.Context) (err error) {
			pages, next, err = store.ChildrenPages(ctx, from, cascadePage)
			return err
		}); err != nil {
			return err
		}
		for i, page := range pages {
			for _, k := range page {
				kids, of = append(kids, k), append(of, who[i])
			}
			if next[i] != "" {
				more = append(more, scan{parent: who[i], cursor: next[i]})
			}
		}
		if err := handle(false); err != nil {
			return err
		}
	}
	return handle(true)
}

// cancelPage reads the snapshots of kids (at most cascadePage), each a
// child of the session of the same index of of, and emits the
// cancellation of each one still to cancel: stored, neither CANCELLING
// (by its own cancellation, or already by this one) nor ended, not
// abandoned, and still naming that parent. Sending one to a child that
// is CANCELLING or ended would only record a rejection; but a parent's
// escalation to forced (family.escalates) reaches its children still
// graceful CANCELLING too, whose forced cancellation escalates them in
// turn. That one's id is derived from the escalating event, so it is not
// a duplicate of the graceful one, which was derived from the parent's
// entry into CANCELLING.
func (d *derived) cancelPage(ctx context.Context, store Store, kids []string, of []*change, emit func(*kgo.Record)) error {
	if d.pageRead != nil {
		d.pageRead(len(kids))
	}
	var snaps []*snapshot.Snapshot
	if err := retry(ctx, d.log, "reading children", func(ctx context.Context) (err error) {
		snaps, err = store.GetMany(ctx, kids)
		return err
	}); err != nil {
		return err
	}
	for i, k := range snaps {
		ch := of[i]
		escalate := ch.fam.escalates && k != nil && k.State == fsm.StateCancelling && k.Cancellation.Mode != fsm.CancelForced
		if k == nil || k.State.Terminal() || (k.State == fsm.StateCancelling && !escalate) ||
			k.ParentClosePolicy == fsm.ParentCloseAbandon || k.ParentSessionID != ch.session {
			continue
		}
		reason := ch.fam.reason
		if !ch.fam.escalates {
			reason = childReason(time.Unix(0, k.CreatedAt), ch.at, reason)
		}
		emit(cancelRecord(d.eventsTopic, k.ID, ch.session, ch.id, ch.at, ch.fam.mode, reason, ch.headers))
	}
	if d.crash.at(crashCascadePage) {
		return errCrashed
	}
	return nil
}

// closedBy returns the transition by which parent's end cancelled its
// children: the one into CANCELLING when it went on from there to FAILED
// or CANCELLED, else its latest. A child created afterwards thus gets the
// same event as it would have from its parent's cascade.
func closedBy(parent *snapshot.Snapshot) fsm.Transition {
	i := parent.NumTransitions() - 1
	t := parent.TransitionAt(i)
	if t.From == fsm.StateCancelling && i > 0 {
		if prev := parent.TransitionAt(i - 1); prev.To == fsm.StateCancelling {
			return prev
		}
	}
	return t
}

// tombstoneTrigger is the trigger of the cancellation of a child created
// after its parent was archived: the parent's tombstone keeps no event id,
// so one is derived from the parent and its final version, the same
// every time the child's creation is folded (a second one is a
// duplicate).
func tombstoneTrigger(t *projstore.Tombstone) fsm.EventID {
	var v fsm.EventID
	binary.BigEndian.PutUint64(v[8:], t.Version)
	return derivedID(fsm.SessionCompleted, t.SessionID, v)
}

// cancelRecord returns the CancellationRequested record of child for the
// end of parent (the parent's event trigger, at its occurredAt), with the
// system's origin header beside the event type and the trace context.
func cancelRecord(topic, child, parent string, trigger fsm.EventID, at time.Time, mode fsm.CancelMode, reason string,
	trace []kgo.RecordHeader) *kgo.Record {
	e := fsm.NewEvent(derivedID(fsm.CancellationRequested, child, trigger), child, fsm.CancellationRequested, at,
		fsm.Fields{Reason: reason, Mode: mode, CancelledByParent: parent})
	headers := make([]kgo.RecordHeader, 0, 2+len(trace))
	headers = append(headers, kgo.RecordHeader{Key: kafka.HeaderEventType, Value: []byte(fsm.CancellationRequested.String())},
		kafka.SystemHeader())
	headers = append(headers, trace...)
	return &kgo.Record{Topic: topic, Key: []byte(child), Value: fsm.AppendRecord(nil, &e), Headers: headers}
}
