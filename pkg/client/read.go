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

	"github.com/correx/sessions/pkg/fsm"
)

// Snapshot is a session's read model as the query service serves it
// (docs/lifecycle.md, "The snapshot"): the JSON members, typed. Members a
// newer service adds are ignored.
type Snapshot struct {
	SessionID            string            `json:"sessionId"`
	State                string            `json:"state"`
	Terminal             bool              `json:"terminal"`
	CorrelationID        string            `json:"correlationId"`
	Goal                 string            `json:"goal"`
	PredecessorSessionID *string           `json:"predecessorSessionId"`
	SuccessorSessionID   *string           `json:"successorSessionId"`
	ParentSessionID      *string           `json:"parentSessionId"`
	ParentClosePolicy    string            `json:"parentClosePolicy"`
	Labels               map[string]string `json:"labels"`
	Metadata             json.RawMessage   `json:"metadata"`
	Timeouts             map[string]string `json:"timeouts"`
	Deadline             *Deadline         `json:"deadline"`
	Replacement          *Replacement      `json:"replacement"`
	CreatedAt            time.Time         `json:"createdAt"`
	UpdatedAt            time.Time         `json:"updatedAt"`
	StateEnteredAt       time.Time         `json:"stateEnteredAt"`
	// Version counts applied events; Counters.Events counts every event
	// seen, rejected and duplicate ones included.
	Version     uint64           `json:"version"`
	LastEventID string           `json:"lastEventId"`
	Position    Position         `json:"position"`
	FirstOffset int64            `json:"firstOffset"`
	Counters    Counters         `json:"counters"`
	DurationsMs map[string]int64 `json:"durationsMs"`
	// ExecutionMs is the execution time used: the closed intervals in
	// CREATED, INITIALIZING, ACTIVE and RECOVERING (docs/timeouts.md).
	ExecutionMs int64        `json:"executionMs"`
	Transitions []Transition `json:"transitions"`
	// Rejections holds the last 16 rejected events.
	Rejections   []Rejection   `json:"rejections"`
	Approval     Approval      `json:"approval"`
	Failure      *Failure      `json:"failure"`
	Cancellation *Cancellation `json:"cancellation"`
	Recovery     *Recovery     `json:"recovery"`
	Annotations  []Annotation  `json:"annotations"`
	// Digest is a SHA-256 chain over the applied events: equal digests mean
	// the same applied events in the same order.
	Digest string `json:"digest"`
}

// Counters are a snapshot's counters.
type Counters struct {
	Events             uint64            `json:"events"`
	ModelTurns         uint64            `json:"modelTurns"`
	ToolCalls          uint64            `json:"toolCalls"`
	ToolFailures       uint64            `json:"toolFailures"`
	RepairCycles       uint64            `json:"repairCycles"`
	Pauses             uint64            `json:"pauses"`
	ApprovalsRequested uint64            `json:"approvalsRequested"`
	ApprovalsGranted   uint64            `json:"approvalsGranted"`
	ApprovalsDenied    uint64            `json:"approvalsDenied"`
	Recoveries         uint64            `json:"recoveries"`
	Rejected           uint64            `json:"rejected"`
	Duplicates         uint64            `json:"duplicates"`
	SupersededTimeouts uint64            `json:"supersededTimeouts"`
	Custom             map[string]uint64 `json:"custom"`
}

// Transition is one applied state change.
type Transition struct {
	From    string    `json:"from"`
	To      string    `json:"to"`
	Type    string    `json:"type"`
	EventID string    `json:"eventId"`
	At      time.Time `json:"at"`
}

// Rejection is one rejected event and why.
type Rejection struct {
	EventID string    `json:"eventId"`
	Type    string    `json:"type"`
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Approval is the snapshot's approval member.
type Approval struct {
	// Pending is the request waiting for a decision, nil when none is.
	Pending      *PendingApproval `json:"pending"`
	PendingSince *time.Time       `json:"pendingSince"`
	WaitedMs     int64            `json:"waitedMs"`
	// Decisions are the last 16 decisions, oldest first.
	Decisions []ApprovalDecision `json:"decisions"`
}

// PendingApproval is an approval request waiting for a decision.
type PendingApproval struct {
	RequestID string    `json:"requestId"`
	Since     time.Time `json:"since"`
	Reason    string    `json:"reason"`
}

// ApprovalDecision is how one approval request ended: Decision is
// "granted", "denied", "expired" (the approval timeout) or "cancelled"
// (the session reached CANCELLING or FAILED). By and Reason are empty on
// expired and cancelled decisions.
type ApprovalDecision struct {
	RequestID string    `json:"requestId"`
	Decision  string    `json:"decision"`
	At        time.Time `json:"at"`
	WaitedMs  int64     `json:"waitedMs"`
	By        string    `json:"by,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// Failure is why and when a session failed. Category is one of
// infrastructure, provider, tool, policy, timeout, internal or unknown;
// Code is nil when the failure named none.
type Failure struct {
	Reason    string    `json:"reason"`
	Category  string    `json:"category"`
	Code      *string   `json:"code"`
	Retryable bool      `json:"retryable"`
	At        time.Time `json:"at"`
	From      string    `json:"from"`
}

// Cancellation is a session's cancellation.
type Cancellation struct {
	RequestedAt time.Time  `json:"requestedAt"`
	Reason      string     `json:"reason"`
	Mode        string     `json:"mode"`
	Timeout     string     `json:"timeout,omitempty"`
	Forced      bool       `json:"forced"`
	CompletedAt *time.Time `json:"completedAt"`
	// EscalatedAt is when a forced request escalated a graceful
	// cancellation; nil when none did.
	EscalatedAt *time.Time `json:"escalatedAt,omitempty"`
}

// Recovery is a session's last recovery.
type Recovery struct {
	Active      bool       `json:"active"`
	ResumeTo    string     `json:"resumeTo"`
	StartedAt   time.Time  `json:"startedAt"`
	CompletedAt *time.Time `json:"completedAt"`
}

// Replacement is the link of a successor to its predecessor.
type Replacement struct {
	PredecessorSessionID string `json:"predecessorSessionId"`
	Status               string `json:"status"`
	PredecessorDigest    string `json:"predecessorDigest,omitempty"`
	Reason               string `json:"reason,omitempty"`
}

// Deadline is the earliest armed deadline.
type Deadline struct {
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
}

// Annotation is one applied custom event.
type Annotation struct {
	EventID string          `json:"eventId"`
	Type    string          `json:"type"`
	At      time.Time       `json:"at"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// GetOption adjusts Get.
type GetOption func(*getSettings)

type getSettings struct {
	min     *Position
	wait    time.Duration
	waitSet bool
}

// MinPosition makes Get read your writes: the answer includes every event
// of the session up to p (the position Send returned for its last event).
// Get waits for the projector, in rounds of at most the Wait option's
// duration (default 10s, the service's most), until the context ends.
func MinPosition(p Position) GetOption { return func(g *getSettings) { g.min = &p } }

// Wait sets how long one waiting read may wait on the service (default 10s,
// its most); Get asks again after a 504 until its context ends.
func Wait(d time.Duration) GetOption { return func(g *getSettings) { g.wait, g.waitSet = d, true } }

// Get reads a session's snapshot. An unknown session (or one outside the
// token's prefix) is a *StatusError matching ErrNotFound; any other refusal
// is a *StatusError too. A failure that retries did not cure (see the Retry
// option), or the context's end, is a *ReadError. A session id outside the
// service's rule (ErrInvalidSessionID) is refused before any I/O.
func (c *Client) Get(ctx context.Context, sessionID string, opts ...GetOption) (*Snapshot, error) {
	if !fsm.ValidSessionID(sessionID) {
		return nil, fmt.Errorf("client: get: %w", sessionIDError(sessionID))
	}
	var g getSettings
	for _, o := range opts {
		o(&g)
	}
	if !g.waitSet {
		g.wait = 10 * time.Second
	}
	u := c.query.JoinPath("v1", "sessions", sessionID)
	if g.min != nil {
		q := url.Values{}
		q.Set("minPosition", g.min.String())
		q.Set("wait", g.wait.String())
		u.RawQuery = q.Encode()
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
	return sleep(ctx, c.retry.backoff(attempt, after)) == nil
}

// readError is a read's final error: a refusal as the *StatusError it is,
// anything else as a *ReadError (with the context's error when it ended).
func readError(ctx context.Context, op, sessionID string, attempts int, err error) error {
	if se, ok := err.(*StatusError); ok && !se.Temporary() {
		return se
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(err, cerr)
	}
	return &ReadError{Op: op, SessionID: sessionID, Attempts: attempts, Err: err}
}

func (c *Client) getJSON(ctx context.Context, op string, u *url.URL, extra time.Duration, v any) error {
	actx, cancel := context.WithTimeout(ctx, c.retry.reqTimeout+extra)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	req.Header.Set("Accept", "application/json")
	c.setHeaders(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s: %w", op, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes*8))
	if err != nil {
		return fmt.Errorf("client: %s: reading the answer: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, se := statusError(op, resp, body)
		return se
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("client: %s: decoding the answer: %w", op, err)
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
