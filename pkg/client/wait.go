package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/fsm"
)

// Status is what the fold did with an event, as far as a snapshot tells.
type Status string

// Statuses of an Outcome.
const (
	// Applied: the event's id is not among the session's kept rejections
	// once the session is folded past it (see SendAndWait for what this
	// cannot tell apart).
	Applied Status = "applied"
	// Rejected: the snapshot's rejections hold the event's id; Reason says
	// why (invalid_transition, after_terminal, version_conflict, ...).
	Rejected Status = "rejected"
	// UnknownSession: the session has no snapshot once folded past the
	// event: it has no SessionCreated, so the event went to the dead-letter
	// topic (unknown_session).
	UnknownSession Status = "unknown_session"
)

// Outcome is what became of one event sent by SendAndWait.
type Outcome struct {
	EventID  string
	Accepted Accepted // where ingest wrote it
	Status   Status
	Reason   string // the rejection's reason, with Rejected
	// Snapshot is the session's snapshot read at or after the event's
	// position, shared by the outcomes of one session's events (nil with
	// UnknownSession).
	Snapshot *Snapshot
}

// SendAndWait sends events like Send, then reads each session they touch
// once the projector has folded it at least up to the session's last event
// of the call (Get with MinPosition), and returns one Outcome per event, in
// the order given.
//
// What the snapshot can tell, and what it cannot:
//   - An event whose id is among the snapshot's rejections (the last 16 of
//     the session) is Rejected, with the fold's reason; this includes an
//     event resent after a rejection (the resend is a duplicate and the
//     original rejection stands).
//   - Otherwise it is reported Applied. That is exact when the event was
//     folded as new and the session had at most 16 rejections after it;
//     it is also what is reported for an event that was a duplicate of an
//     applied original (its effect is the original's), for a TimeoutExpired
//     that was superseded (not applied; counters.supersededTimeouts shows
//     it), and for a rejected event pushed out of the 16 kept rejections
//     by later ones, when the read comes after those (many rejections of
//     one session in one call, or concurrent writers to the session).
//   - UnknownSession: the session has no snapshot, so the event was an
//     orphan.
//
// The snapshot may already include events sent after these by others;
// compare Snapshot.Version if that matters. Send's errors are returned as
// they are, with no outcomes; a read's error is returned with the outcomes
// decided so far (the others have the zero Status).
func (c *Client) SendAndWait(ctx context.Context, events ...Event) ([]Outcome, error) {
	res, err := c.Send(ctx, events...)
	if err != nil {
		return nil, err
	}
	out := make([]Outcome, len(events))
	last := map[string]Position{}
	var order []string
	for i, a := range res.Accepted {
		out[i].EventID, out[i].Accepted = events[i].ID, a
		sid := events[i].SessionID
		p, seen := last[sid]
		if !seen {
			order = append(order, sid)
		}
		if !seen || p.Offset < a.Offset {
			last[sid] = a.Position()
		}
	}
	snaps := make(map[string]*Snapshot, len(order))
	for _, sid := range order {
		s, err := c.Get(ctx, sid, MinPosition(last[sid]))
		switch {
		case errors.Is(err, ErrNotFound):
			s = nil
		case err != nil:
			return out, err
		}
		snaps[sid] = s
	}
	for i := range out {
		s := snaps[events[i].SessionID]
		out[i].Snapshot = s
		if s == nil {
			out[i].Status = UnknownSession
			continue
		}
		out[i].Status = Applied
		for _, r := range s.Rejections {
			if r.EventID == out[i].EventID {
				out[i].Status, out[i].Reason = Rejected, r.Reason
				break
			}
		}
	}
	return out, nil
}

// Polling interval of AwaitState: from awaitMinPoll, doubling up to
// awaitMaxPoll.
const (
	awaitMinPoll = 10 * time.Millisecond
	awaitMaxPoll = 500 * time.Millisecond
)

// AwaitState waits until the session is in one of states (names such as
// "CANCELLED"; at least one) and returns its snapshot. It is how to wait for
// what the projector derives rather than what the caller sent, and so has no
// position to wait for: a child cancelled with its parent, a timeout that
// fired. It reads the snapshot (Get) every 10 ms at first, backing off to
// every 500 ms, and a session that does not exist yet is waited for too.
//
// A session that ends in a state not among states never reaches one: that
// is an error matching ErrEnded, returned with the final snapshot. The
// context bounds the wait; when it ends the error is a *ReadError. Get's
// other errors are returned as they are; an unknown state name or session
// id is refused before any I/O.
func (c *Client) AwaitState(ctx context.Context, sessionID string, states ...string) (*Snapshot, error) {
	if !fsm.ValidNewSessionID(sessionID) {
		return nil, fmt.Errorf("client: await: %w", sessionIDError(sessionID))
	}
	if len(states) == 0 {
		return nil, errors.New("client: await: no state to wait for")
	}
	for _, s := range states {
		if _, ok := fsm.ParseState(s); !ok {
			return nil, fmt.Errorf("client: await %s: %q is not a state", sessionID, s)
		}
	}
	poll := awaitMinPoll
	for reads := 1; ; reads++ {
		s, err := c.Get(ctx, sessionID)
		switch {
		case err == nil:
			if slices.Contains(states, s.State) {
				return s, nil
			}
			if s.Terminal {
				return s, fmt.Errorf("client: await %s: %w as %s, not %s", sessionID, ErrEnded, s.State, strings.Join(states, " or "))
			}
			err = fmt.Errorf("state %s, not %s", s.State, strings.Join(states, " or "))
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
		if werr := backoff.Sleep(ctx, poll); werr != nil {
			return nil, &ReadError{Op: "await", SessionID: sessionID, Attempts: reads, Err: errors.Join(err, werr)}
		}
		poll = min(2*poll, awaitMaxPoll)
	}
}
