package client

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"strconv"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// HistoryEntry is one event of a session's history (pkg/wire.HistoryEntry):
// its version, position, id, type, time, and what the fold did with it,
// Outcome being "applied", "rejected" (with Reason), "duplicate" or
// "superseded" (wire.Applied, wire.Rejected, wire.Duplicate,
// wire.Superseded).
type HistoryEntry = wire.HistoryEntry

// HistoryPage is one page of a session's history.
type HistoryPage struct {
	History []HistoryEntry
	// Next is the cursor of the next page, to pass as History's after;
	// "" on the last page.
	Next string
}

// History reads one page of a session's whole history, every event the
// service folded for it in the log's order (README, "HTTP API", GET
// /v1/sessions/{id}/history): the first page with after "", the next ones
// with the previous page's Next. limit is
// the page's size, 1-1000, or 0 for the service's default (100). Errors are
// Get's: ErrNotFound for an unknown session, a *StatusError for another
// refusal (a 400 for a cursor the service cannot resume from), a
// *ReadError for what retries did not cure.
func (c *Client) History(ctx context.Context, sessionID, after string, limit int) (*HistoryPage, error) {
	if !fsm.ValidNewSessionID(sessionID) {
		return nil, fmt.Errorf("client: history: %w", sessionIDError(sessionID))
	}
	if limit < 0 || limit > 1000 {
		return nil, fmt.Errorf("client: history: limit %d: must be from 1 to 1000, or 0 for the service's default", limit)
	}
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	u := c.query.JoinPath("v1", "sessions", sessionID, "history")
	u.RawQuery = q.Encode()
	var ans wire.HistoryPage
	for attempt := 1; ; attempt++ {
		err := c.getJSON(ctx, "history", u, 0, &ans)
		if err == nil {
			break
		}
		if !c.retryRead(ctx, err, attempt) {
			return nil, readError(ctx, "history", sessionID, attempt, err)
		}
	}
	p := &HistoryPage{History: ans.History}
	if ans.Next != nil {
		p.Next = *ans.Next
	}
	return p, nil
}

// HistoryPages returns a session's whole history page by page, in order,
// one request each (History with each page's Next), limit as History's.
// Stop ranging to stop reading; an error is yielded once, and ends it.
func (c *Client) HistoryPages(ctx context.Context, sessionID string, limit int) iter.Seq2[*HistoryPage, error] {
	return func(yield func(*HistoryPage, error) bool) {
		after := ""
		for {
			p, err := c.History(ctx, sessionID, after, limit)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(p, nil) || p.Next == "" {
				return
			}
			after = p.Next
		}
	}
}
