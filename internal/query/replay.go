package query

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaReplayer rebuilds sessions by reading their partition directly (no
// consumer group) from the session's first offset to its stored position,
// folding the session's records with snapshot.Fold, the projector's rule.
// It reads a session's history the same way (LogReader).
type KafkaReplayer struct {
	Kafka kafka.Config
	Topic string
	Opts  []kgo.Opt // extra client options (telemetry)
}

// LogReader reads one session's records from the log. A Replayer that is
// also a LogReader (KafkaReplayer) serves the history; the handler answers
// it 503 otherwise.
type LogReader interface {
	// Scan calls fn with each record of session id in partition p from
	// offset from to offset end (both included), in order, decoded as the
	// projector decodes them: another session's records, and those the
	// projector sets aside, are skipped. fn returns false to stop early.
	Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error
}

// Replay implements Replayer.
func (k *KafkaReplayer) Replay(ctx context.Context, stored *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	var s snapshot.Snapshot
	var r fsm.Reducer
	err := k.Scan(ctx, stored.ID, stored.Position.Partition, stored.FirstOffset, stored.Position.Offset,
		func(e *fsm.Event, pos snapshot.Position) bool {
			s.Fold(&r, e, pos)
			return true
		})
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// Scan implements LogReader (sessionlog.Reader.Scan).
func (k *KafkaReplayer) Scan(ctx context.Context, id string, p int32, from, end int64, fn func(e *fsm.Event, pos snapshot.Position) bool) error {
	r := sessionlog.Reader{Kafka: k.Kafka, Topic: k.Topic, Opts: k.Opts}
	return r.Scan(ctx, id, p, from, end, fn)
}

// ReplayResponse is the body of GET /v1/sessions/{id}/replay.
type ReplayResponse struct {
	Snapshot      *snapshot.Snapshot `json:"snapshot"`
	MatchesStored bool               `json:"matchesStored"`
	Stored        snapshot.Position  `json:"storedPosition"`
}

// replay serves GET /v1/sessions/{id}/replay (sessionRoute).
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, id string) {
	if !canSee(w, r, id) {
		return
	}
	stored, rebuilt, ok := h.fromLog(w, r, id, "replay")
	if !ok {
		return
	}
	match := bytes.Equal(rebuilt.AppendBinary(nil), stored.AppendBinary(nil))
	h.metrics.replayed(r.Context(), match)
	httpx.WriteJSON(w, http.StatusOK, ReplayResponse{Snapshot: rebuilt, Stored: stored.Position, MatchesStored: match})
}

// fromLog reads the stored snapshot of id and folds the session again from
// the log (what names the operation, "replay" or "rebuild", in the
// answers), under the bound that replays and rebuilds share. When it cannot,
// it answers the request itself and returns ok false.
func (h *Handler) fromLog(w http.ResponseWriter, r *http.Request, id, what string) (stored, rebuilt *snapshot.Snapshot, ok bool) {
	if h.replayer == nil {
		httpx.Unavailable(w, retryUnconfigured, what+" needs Kafka, and this query service has no brokers configured", nil)
		return nil, nil, false
	}
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	default:
		httpx.Unavailable(w, retryBusy, "too many replays and rebuilds are running; retry", nil)
		return nil, nil, false
	}
	stored, err := h.get(r.Context(), id)
	if errors.Is(err, snapshot.ErrNotFound) {
		notFound(w)
		return nil, nil, false
	}
	if err != nil {
		h.storeError(w, err)
		return nil, nil, false
	}
	if h.truncated(w, r, stored, what) {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.replayLimit)
	defer cancel()
	rebuilt, err = h.replayer.Replay(ctx, stored)
	if err != nil {
		h.log.Warn(what, "session", id, "err", err)
		httpx.Unavailable(w, retryBusy, what+" from Kafka failed: "+err.Error(), nil)
		return nil, nil, false
	}
	// The service's timeout defaults, as the store set them on stored (the
	// CORREX_TIMEOUT_* settings, bound as the projector binds them): the
	// rebuilt snapshot shows the effective timeouts and the deadline the
	// projector arms, as the stored one does.
	rebuilt.TimeoutDefaults = stored.TimeoutDefaults
	return stored, rebuilt, true
}
