package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Stats is the query service's GET /v1/stats: sessions per state and, for
// an admin token without a session-id prefix, each partition's progress.
type Stats = wire.Stats

// PartitionStats is one partition's progress as the projector last wrote
// its checkpoint.
type PartitionStats = wire.PartitionStats

// Replay is GET /v1/sessions/{id}/replay: the session rebuilt from the
// Kafka log up to its stored position, and whether it equals the stored
// snapshot.
type Replay struct {
	Snapshot       *Snapshot `json:"snapshot"`
	MatchesStored  bool      `json:"matchesStored"`
	StoredPosition Position  `json:"storedPosition"`
}

// Rebuild is POST /v1/sessions/{id}/rebuild: the replay, stored when it
// differed from the stored snapshot.
type Rebuild struct {
	Snapshot *Snapshot `json:"snapshot"`
	// Differed: the stored snapshot differed from the log's.
	Differed bool `json:"differed"`
	// Replaced: the rebuilt snapshot was stored (false when it equalled the
	// stored one, or the projector stored a later one meanwhile).
	Replaced bool `json:"replaced"`
}

// Stats reads the sessions per state and the partitions' progress. Errors
// are Get's: a *StatusError for a refusal, a *ReadError otherwise.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var s Stats
	if err := c.readJSON(ctx, http.MethodGet, "stats", "", c.query.JoinPath("v1", "stats"), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Replay rebuilds a session from the log and compares it with the stored
// snapshot; nothing is stored (scope admin). An unknown session matches
// ErrNotFound.
func (c *Client) Replay(ctx context.Context, sessionID string) (*Replay, error) {
	if !fsm.ValidNewSessionID(sessionID) {
		return nil, fmt.Errorf("client: replay: %w", sessionIDError(sessionID))
	}
	var r Replay
	if err := c.readJSON(ctx, http.MethodGet, "replay", sessionID, c.query.JoinPath("v1", "sessions", sessionID, "replay"), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Rebuild rebuilds a session from the log and stores it when the stored
// snapshot differed (scope admin; fenced against the projector, see the
// README's HTTP API). A log that does not rebuild the session is a
// *StatusError with status 409. Sending it again is safe: a second rebuild
// finds nothing different.
func (c *Client) Rebuild(ctx context.Context, sessionID string) (*Rebuild, error) {
	if !fsm.ValidNewSessionID(sessionID) {
		return nil, fmt.Errorf("client: rebuild: %w", sessionIDError(sessionID))
	}
	var r Rebuild
	if err := c.readJSON(ctx, http.MethodPost, "rebuild", sessionID, c.query.JoinPath("v1", "sessions", sessionID, "rebuild"), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// readJSON asks the query service with the read retries (retryRead) and
// decodes a 200's body into v.
func (c *Client) readJSON(ctx context.Context, method, op, sessionID string, u *url.URL, v any) error {
	for attempt := 1; ; attempt++ {
		err := c.queryJSON(ctx, method, op, u, v)
		if err == nil {
			return nil
		}
		if !c.retryRead(ctx, err, attempt) {
			return readError(ctx, op, sessionID, attempt, err)
		}
	}
}

func (c *Client) queryJSON(ctx context.Context, method, op string, u *url.URL, v any) error {
	return c.doJSON(ctx, method, op, u, 0, v)
}
