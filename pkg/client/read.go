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

// scanSettings are the options of List, Archive and Watch; each takes
// only the options of its kind (ListOpt, ArchiveOpt, WatchOpt).
type scanSettings struct {
	state, prefix, parent string
	labels                map[string]string
	limit                 int
	cursor                string
	onConnect             func(cursor string)
}

// scanWith applies opts, of one kind, to fresh settings.
func scanWith[O Opt](opts []O, apply func(O, *scanSettings)) scanSettings {
	var s scanSettings
	for _, o := range opts {
		apply(o, &s)
	}
	return s
}

// StateIs keeps the sessions in state (a name such as "ACTIVE"): in a
// listing, those in it now; in a watch, the changes into it (the change's
// "to"). Default, and with "": every state.
func StateIs(state string) FilterOpt { return filterOpt(func(s *scanSettings) { s.state = state }) }

// IDPrefix keeps the sessions whose id starts with prefix (within the
// token's prefix). Default, and with "": every session.
func IDPrefix(prefix string) ScanOpt { return scanOpt(func(s *scanSettings) { s.prefix = prefix }) }

// HasLabels keeps the sessions that have every pair of l among their
// labels (a later HasLabels replaces the pairs of an earlier one). Default,
// and with none: any labels. The map is copied.
func HasLabels(l map[string]string) FilterOpt {
	c := make(map[string]string, len(l))
	for k, v := range l {
		c[k] = v
	}
	return filterOpt(func(s *scanSettings) { s.labels = c })
}

// ParentIs keeps the child sessions of the session parent (their
// parentSessionId). Default, and with "": any parent, or none.
func ParentIs(parent string) FilterOpt { return filterOpt(func(s *scanSettings) { s.parent = parent }) }

// Limit is a listing's page size, 1-1000 (default, and with 0: the
// service's, 100). With HasLabels or ParentIs it bounds the sessions
// examined per page, so a page of List may hold fewer, even none, before
// the listing ends.
func Limit(n int) PageOpt { return pageOpt(func(s *scanSettings) { s.limit = n }) }

// Cursor resumes where an earlier call stopped: a listing at a page's Next,
// a watch after a change already received (its Change.Cursor). Default, and
// with "": a listing from its start, a watch at the end (only changes from
// now on).
func Cursor(c string) ScanOpt { return scanOpt(func(s *scanSettings) { s.cursor = c }) }

// Page is one page of a listing.
type Page struct {
	Sessions []Snapshot `json:"sessions"`
	// Next is the cursor of the next page; "" on the last page.
	Next string `json:"-"`
}

// List returns the listing's pages, in order, one request each; every
// filter given (StateIs, IDPrefix, HasLabels, ParentIs) must hold. Stop
// ranging to stop listing; an error is yielded once, and ends the listing:
// a *StatusError for a refusal, a *ReadError otherwise (as Get's).
// The order is stable but not meaningful.
func (c *Client) List(ctx context.Context, opts ...ListOpt) iter.Seq2[*Page, error] {
	o := scanWith(opts, ListOpt.applyList)
	return func(yield func(*Page, error) bool) {
		cursor := o.cursor
		for {
			q := url.Values{}
			if o.state != "" {
				q.Set("state", o.state)
			}
			if o.prefix != "" {
				q.Set("prefix", o.prefix)
			}
			for k, v := range o.labels {
				q.Add("label", k+"="+v)
			}
			if o.parent != "" {
				q.Set("parent", o.parent)
			}
			if o.limit > 0 {
				q.Set("limit", strconv.Itoa(o.limit))
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

// ArchivePage is one page of an archive listing.
type ArchivePage struct {
	Sessions []ArchivedSession
	// Next is the cursor of the next page; "" on the last page.
	Next string
}

// Archive returns the pages of the archived sessions (GET /v1/archive), in
// id order, one request each; errors as List's. The query service answers
// 503 (a *StatusError) when it has no archive.
func (c *Client) Archive(ctx context.Context, opts ...ArchiveOpt) iter.Seq2[*ArchivePage, error] {
	o := scanWith(opts, ArchiveOpt.applyArchive)
	return func(yield func(*ArchivePage, error) bool) {
		cursor := o.cursor
		for {
			q := url.Values{}
			if o.prefix != "" {
				q.Set("prefix", o.prefix)
			}
			if o.limit > 0 {
				q.Set("limit", strconv.Itoa(o.limit))
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
