package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// Reads as of a version or a time (README, "HTTP API"). GET
// /v1/sessions/{id}?asOf=<version> answers the snapshot as it was right
// after the event that made that version; ?asOf=<RFC 3339 time>, right
// after the last event applied (in the log's order) whose occurredAt is at
// or before that time. Either is folded again from the session's events in
// the log, from its first offset, with the projector's fold (the history's
// and the replay's read), and stops there: a rejected or duplicate event
// after the one that made the version is not in the answer, since it came
// after. The answer is the snapshot's JSON with "asOf", the value asked
// (a time in UTC), and "archived": true for a session read back from the
// archive (its archived snapshot says where its events are in the log).
//
// The tenant rules are a read's: another tenant's session is a 404. The
// value is a 400 naming asOf when it is neither a positive integer nor an
// RFC 3339 time, when it is combined with minPosition or wait, and when it
// names a version the session has not reached (a version beyond the
// session's is a mistake of the caller, like a limit out of range, not a
// session that does not exist: the detail says the session's version). A
// time before the session's first applied event is a 404: the session did
// not exist then. A session whose first events left the log is a 409
// history-truncated, as its history is.

// asOf is what ?asOf= asks for: a version, or a time.
type asOf struct {
	version uint64    // 0: by time
	at      time.Time // when version is 0
	text    string    // the value as the answer shows it
}

// parseAsOf reads ?asOf=, answering 400 itself when it is malformed.
func parseAsOf(w http.ResponseWriter, v string) (asOf, bool) {
	if v == "" {
		badRequest(w, "asOf", "must be a version (a positive integer) or an RFC 3339 time, such as 2026-11-29T06:00:00Z")
		return asOf{}, false
	}
	if v[0] >= '0' && v[0] <= '9' && len(v) <= 20 {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			if n == 0 {
				badRequest(w, "asOf", "a version starts at 1 (the SessionCreated)")
				return asOf{}, false
			}
			return asOf{version: n, text: strconv.FormatUint(n, 10)}, true
		}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		badRequest(w, "asOf", "must be a version (a positive integer) or an RFC 3339 time with a zone, such as 2026-11-29T06:00:00Z")
		return asOf{}, false
	}
	t = t.UTC()
	return asOf{at: t, text: t.Format(time.RFC3339Nano)}, true
}

// errAsOfBefore: no event of the session was applied at or before the time
// asked.
var errAsOfBefore = errors.New("the session did not exist at that time")

// getAsOf answers GET /v1/sessions/{id}?asOf=.
func (h *Handler) getAsOf(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	if q.Has("minPosition") || q.Has("wait") {
		badRequest(w, "asOf", "cannot be combined with minPosition or wait: a past state does not wait")
		return
	}
	want, ok := parseAsOf(w, q.Get("asOf"))
	if !ok {
		return
	}
	if !canSee(w, r, id) {
		return
	}
	lr, ok := h.replayer.(LogReader)
	if !ok {
		httpx.Unavailable(w, retryUnconfigured, "a read as of a version or a time folds the log, and this query service has no brokers configured", nil)
		return
	}
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	default:
		httpx.Unavailable(w, retryBusy, "too many replays, rebuilds, histories and reads as of a version are running; retry", nil)
		return
	}
	stored, err := h.get(r.Context(), id)
	archived := false
	switch {
	case errors.Is(err, snapshot.ErrNotFound):
		hd, found := h.findArchived(w, r, id)
		if !found {
			return
		}
		stored, archived = hd.Snapshot, true
	case err != nil:
		h.storeError(w, err)
		return
	}
	if want.version > stored.Version {
		badRequest(w, "asOf", fmt.Sprintf("the session is at version %d: a version from 1 to %d", stored.Version, stored.Version))
		return
	}
	if h.truncated(w, r, stored, "a read as of a version or a time") {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.replayLimit)
	defer cancel()
	s, err := foldAsOf(ctx, lr, stored, want)
	switch {
	case errors.Is(err, errAsOfBefore):
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: http.StatusNotFound,
			Detail: fmt.Sprintf("session %s had no applied event at or before %s: it did not exist then", id, want.text)})
		return
	case r.Context().Err() != nil:
		return
	case err != nil:
		h.log.Warn("as of", "session", id, "err", err)
		httpx.Unavailable(w, retryBusy, "folding the session from Kafka failed: "+err.Error(), nil)
		return
	}
	s.TimeoutDefaults = stored.TimeoutDefaults
	b, err := asOfJSON(s, want.text, archived)
	if err != nil {
		h.log.Error("as of", "session", id, "err", err)
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: http.StatusInternalServerError, Detail: "could not encode the snapshot"})
		return
	}
	if notModified(w, r, ETag(s)) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// foldAsOf folds stored's session from its first offset up to its stored
// position, and returns the state right after the event want names.
func foldAsOf(ctx context.Context, lr LogReader, stored *snapshot.Snapshot, want asOf) (*snapshot.Snapshot, error) {
	var s snapshot.Snapshot
	var red fsm.Reducer
	var kept []byte // by time: the state after the last applied event at or before want.at
	found := false
	err := lr.Scan(ctx, stored.ID, stored.Position.Partition, stored.FirstOffset, stored.Position.Offset,
		func(e *fsm.Event, pos snapshot.Position) bool {
			o, folded := s.Fold(&red, e, pos)
			if !folded || o.Result != fsm.Applied {
				return true
			}
			if want.version != 0 {
				found = s.Version == want.version
				return !found
			}
			if !e.OccurredAt.After(want.at) {
				kept, found = s.AppendBinary(kept[:0]), true
			}
			return true
		})
	if err != nil {
		return nil, err
	}
	if !found {
		if want.version != 0 {
			// The stored snapshot is at or past the version, so the log
			// that folded it holds it: a log that does not is not whole.
			return nil, fmt.Errorf("the log's events of the session end at version %d, before version %d", s.Version, want.version)
		}
		return nil, errAsOfBefore
	}
	if want.version == 0 {
		s = snapshot.Snapshot{}
		if err := snapshot.Decode(kept, &s); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

// asOfJSON is the API form of a snapshot as of a version or a time: its
// own, with "asOf" (and "archived": true for an archived session) last.
func asOfJSON(s *snapshot.Snapshot, text string, archived bool) ([]byte, error) {
	b, err := s.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("snapshot of %s is not a JSON object", s.ID)
	}
	v, _ := json.Marshal(text)
	b = append(b[:len(b)-1:len(b)-1], `,"asOf":`...)
	b = append(b, v...)
	if archived {
		b = append(b, `,"archived":true`...)
	}
	return append(b, '}'), nil
}
