package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Snapshot is a session's read model as the query service serves it
// (docs/lifecycle.md, "The snapshot"): the JSON members, typed
// (wire.Snapshot, the shape pkg/snapshot encodes). Members a newer service
// adds are ignored.
type Snapshot = wire.Snapshot

// The members of a Snapshot (pkg/wire's types).
type (
	Counters         = wire.Counters         // a snapshot's counters
	Transition       = wire.Transition       // one applied state change
	Rejection        = wire.Rejection        // one rejected event and why
	Approval         = wire.Approval         // the approval member
	PendingApproval  = wire.PendingApproval  // an approval request waiting for a decision
	ApprovalDecision = wire.ApprovalDecision // how one approval request ended
	Failure          = wire.Failure          // why and when a session failed
	Cancellation     = wire.Cancellation     // a session's cancellation
	Recovery         = wire.Recovery         // a session's last recovery
	Replacement      = wire.Replacement      // the link of a successor to its predecessor
	Deadline         = wire.Deadline         // the earliest armed deadline
	Annotation       = wire.Annotation       // one applied custom event
)

type getSettings struct {
	min     *Position
	wait    time.Duration
	waitSet bool
	asOf    string // "": the session now
}

// MinPosition makes Get read your writes: the answer includes every event
// of the session up to p (the position Send returned for its last event).
// Get waits for the projector, in rounds of at most the Wait option's
// duration (default 10s, the service's most), until the context ends.
func MinPosition(p Position) GetOpt { return getOpt(func(g *getSettings) { g.min = &p }) }

// AsOfVersion makes Get answer the session as it was right after version v
// (README, "HTTP API"), folded again from the log; Snapshot.AsOf says so. A
// version beyond the session's is a *StatusError 400; a session whose
// first events left the log, a *StatusError 409. It cannot be combined
// with MinPosition.
func AsOfVersion(v uint64) GetOpt {
	return getOpt(func(g *getSettings) { g.asOf = strconv.FormatUint(v, 10) })
}

// AsOfTime makes Get answer the session as it was right after the last
// event applied at or before t; a time before the session is ErrNotFound.
// Otherwise as AsOfVersion.
func AsOfTime(t time.Time) GetOpt {
	return getOpt(func(g *getSettings) { g.asOf = t.UTC().Format(time.RFC3339Nano) })
}

// Wait sets how long one waiting read may wait on the service (default 10s,
// its most); Get asks again after a 504 until its context ends.
func Wait(d time.Duration) GetOpt {
	return getOpt(func(g *getSettings) { g.wait, g.waitSet = d, true })
}

// Get reads a session's snapshot. An unknown session (or one outside the
// token's prefix) is a *StatusError matching ErrNotFound; any other refusal
// is a *StatusError too. A failure that retries did not cure (see the Retry
// option), or the context's end, is a *ReadError. A session id outside the
// service's rule (ErrInvalidSessionID) is refused before any I/O.
func (c *Client) Get(ctx context.Context, sessionID string, opts ...GetOpt) (*Snapshot, error) {
	if !fsm.ValidNewSessionID(sessionID) {
		return nil, fmt.Errorf("client: get: %w", sessionIDError(sessionID))
	}
	var g getSettings
	for _, o := range opts {
		o.applyGet(&g)
	}
	if !g.waitSet {
		g.wait = 10 * time.Second
	}
	u := c.query.JoinPath("v1", "sessions", sessionID)
	switch {
	case g.min != nil && g.asOf != "":
		return nil, fmt.Errorf("client: get: MinPosition and an as-of read cannot be combined")
	case g.min != nil:
		q := url.Values{}
		q.Set("minPosition", g.min.String())
		q.Set("wait", g.wait.String())
		u.RawQuery = q.Encode()
	case g.asOf != "":
		u.RawQuery = url.Values{"asOf": {g.asOf}}.Encode()
	}
	for attempt, tries := 1, 1; ; attempt, tries = attempt+1, tries+1 {
		var s Snapshot
		err := c.getJSON(ctx, "get", u, g.wait, &s)
		if err == nil {
			return &s, nil
		}
		se, ok := err.(*StatusError)
		if g.min != nil && ok && se.Status == http.StatusGatewayTimeout {
			attempt = 0 // waiting is not failing: ask again while ctx lasts
		}
		if !c.retryRead(ctx, err, attempt) {
			return nil, readError(ctx, "get", sessionID, tries, err)
		}
	}
}

// retryRead waits before another read attempt and reports whether to make
// it.
func (c *Client) retryRead(ctx context.Context, err error, attempt int) bool {
	if ctx.Err() != nil {
		return false
	}
	if attempt == 0 { // a 504 of a waiting read: ask again at once
		return true
	}
	if c.retry.gaveUp(err, attempt) {
		return false
	}
	var after time.Duration
	if se, ok := err.(*StatusError); ok {
		after = se.RetryAfter
	}
	return backoff.Sleep(ctx, c.retry.backoff(attempt, after)) == nil
}

// readError is a read's final error: a refusal as the *StatusError it is,
// anything else as a *ReadError (with the context's error when it ended).
func readError(ctx context.Context, op, sessionID string, attempts int, err error) error {
	if se, ok := err.(*StatusError); ok && !se.Temporary() {
		if se.SessionID == "" {
			se.SessionID = sessionID
		}
		return se
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(err, cerr)
	}
	return &ReadError{Op: op, SessionID: sessionID, Attempts: attempts, Err: err}
}

func (c *Client) getJSON(ctx context.Context, op string, u *url.URL, extra time.Duration, v any) error {
	return c.doJSON(ctx, http.MethodGet, op, u, extra, v)
}

// doJSON sends one request without a body to the query service, within the
// request timeout plus extra, and decodes a 200's body into v; any other
// answer is a *StatusError. Its other errors carry no "client: op" prefix:
// the caller wraps them in a *ReadError that says it.
func (c *Client) doJSON(ctx context.Context, method, op string, u *url.URL, extra time.Duration, v any) error {
	actx, cancel := context.WithTimeout(ctx, c.retry.reqTimeout+extra)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, method, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	c.setHeaders(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes*8))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		_, se := statusError(op, resp, body)
		return se
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

// ListOptions filter a listing; every filter set must hold.
type ListOptions struct {
	State  string            // a state, e.g. "ACTIVE"
	Prefix string            // session ids that start with it
	Labels map[string]string // every pair must be among the session's labels
	Parent string            // the parent session's id
	// Limit is the page size, 1-1000 (default: the service's, 100). With
	// Labels or Parent it bounds the sessions examined per page, so a page
	// may hold fewer, even none, before the listing ends.
	Limit int
	// Cursor resumes a listing at a page's Next.
	Cursor string
}

// Page is one page of a listing.
type Page struct {
	Sessions []Snapshot `json:"sessions"`
	// Next is the cursor of the next page; "" on the last page.
	Next string `json:"-"`
}

// List returns the listing's pages, in order, one request each. Stop
// ranging to stop listing; an error is yielded once, and ends the listing:
// a *StatusError for a refusal, a *ReadError otherwise (as Get's).
// The order is stable but not meaningful.
func (c *Client) List(ctx context.Context, o ListOptions) iter.Seq2[*Page, error] {
	return func(yield func(*Page, error) bool) {
		cursor := o.Cursor
		for {
			q := url.Values{}
			if o.State != "" {
				q.Set("state", o.State)
			}
			if o.Prefix != "" {
				q.Set("prefix", o.Prefix)
			}
			for k, v := range o.Labels {
				q.Add("label", k+"="+v)
			}
			if o.Parent != "" {
				q.Set("parent", o.Parent)
			}
			if o.Limit > 0 {
				q.Set("limit", strconv.Itoa(o.Limit))
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			u := c.query.JoinPath("v1", "sessions")
			u.RawQuery = q.Encode()
			var ans struct {
				Sessions []Snapshot `json:"sessions"`
				Next     *string    `json:"next"`
			}
			var err error
			attempt := 1
			for ; ; attempt++ {
				if err = c.getJSON(ctx, "list", u, 0, &ans); err == nil || !c.retryRead(ctx, err, attempt) {
					break
				}
			}
			if err != nil {
				yield(nil, readError(ctx, "list", "", attempt, err))
				return
			}
			p := &Page{Sessions: ans.Sessions}
			if ans.Next != nil {
				p.Next = *ans.Next
			}
			if !yield(p, nil) || p.Next == "" {
				return
			}
			cursor = p.Next
		}
	}
}

// ArchivedSession is a closed session that left the read model into the
// archive, as GET /v1/archive lists it; Get still reads its snapshot
// (Snapshot.Archived true).
type ArchivedSession = wire.ArchivedSession

// ArchiveOptions bound an archive listing.
type ArchiveOptions struct {
	Prefix string // session ids that start with it, within the token's prefix
	Limit  int    // the page size, 1-1000 (default: the service's, 100)
	Cursor string // resumes a listing at a page's Next
}

// ArchivePage is one page of an archive listing.
type ArchivePage struct {
	Sessions []ArchivedSession
	// Next is the cursor of the next page; "" on the last page.
	Next string
}

// Archive returns the pages of the archived sessions (GET /v1/archive), in
// id order, one request each; errors as List's. The query service answers
// 503 (a *StatusError) when it has no archive.
func (c *Client) Archive(ctx context.Context, o ArchiveOptions) iter.Seq2[*ArchivePage, error] {
	return func(yield func(*ArchivePage, error) bool) {
		cursor := o.Cursor
		for {
			q := url.Values{}
			if o.Prefix != "" {
				q.Set("prefix", o.Prefix)
			}
			if o.Limit > 0 {
				q.Set("limit", strconv.Itoa(o.Limit))
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			u := c.query.JoinPath("v1", "archive")
			u.RawQuery = q.Encode()
			var ans wire.ArchivePage
			var err error
			attempt := 1
			for ; ; attempt++ {
				if err = c.getJSON(ctx, "archive", u, 0, &ans); err == nil || !c.retryRead(ctx, err, attempt) {
					break
				}
			}
			if err != nil {
				yield(nil, readError(ctx, "archive", "", attempt, err))
				return
			}
			p := &ArchivePage{Sessions: ans.Sessions}
			if ans.Next != nil {
				p.Next = *ans.Next
			}
			if !yield(p, nil) || p.Next == "" {
				return
			}
			cursor = p.Next
		}
	}
}
