package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
)

// ETag returns the entity tag of a snapshot: its version and the number of
// events seen. Version alone is not enough, since rejected and duplicate
// events change counters without changing the version.
func ETag(s *snapshot.Snapshot) string {
	return `"` + strconv.FormatUint(s.Version, 10) + "." + strconv.FormatUint(s.Counters.Events, 10) + `"`
}

// getSession serves GET /v1/sessions/{id} (sessionRoute).
func (h *Handler) getSession(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	if q.Has("asOf") {
		h.getAsOf(w, r, id)
		return
	}
	var wait time.Duration
	var minPos *snapshot.Position
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxWait {
			badRequest(w, "wait", fmt.Sprintf("must be a duration between 0s and %v, such as 2s", MaxWait))
			return
		}
		wait = d
	}
	if v := q.Get("minPosition"); v != "" {
		p, err := snapshot.ParsePosition(v)
		if err != nil {
			badRequest(w, "minPosition", "must be PARTITION:OFFSET, as returned by ingest's position")
			return
		}
		if ok, n := h.parts.exists(r.Context(), p.Partition); !ok {
			badRequest(w, "minPosition", fmt.Sprintf("partition %d does not exist: the topic has %d partitions (0 to %d)", p.Partition, n, n-1))
			return
		}
		minPos = &p
	} else if wait > 0 {
		badRequest(w, "wait", "needs minPosition: the position to wait for")
		return
	}
	if !canSee(w, r, id) {
		return
	}
	snap, err := h.read(r.Context(), auth.PrincipalFrom(r.Context()).Key(), id, minPos, wait)
	switch {
	case errors.Is(err, errNotReached):
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeTimeout, Status: http.StatusGatewayTimeout,
			Detail: fmt.Sprintf("the projector has not folded up to %s within %v", minPos, wait)})
		return
	case errors.Is(err, errBusy):
		httpx.Unavailable(w, retrySoon, "too many reads are waiting; retry", nil)
		return
	case errors.Is(err, snapshot.ErrNotFound):
		h.serveArchived(w, r, id)
		return
	case errors.Is(err, context.Canceled):
		return
	case err != nil:
		h.storeError(w, err)
		return
	}
	if notModified(w, r, ETag(snap)) {
		return
	}
	httpx.WriteMarshaled(w, http.StatusOK, snap)
}

// notModified sets a snapshot answer's ETag and Cache-Control and, when
// the request's If-None-Match matches etag, answers 304 and reports true.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	if match := r.Header.Get("If-None-Match"); match != "" && (match == etag || match == "*" || match == "W/"+etag) {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

var (
	errNotReached = errors.New("position not reached")
	errBusy       = errors.New("too many waiting reads")
)

// read returns the snapshot, first waiting (up to wait) until partition P is
// folded up to offset O when minPos is set. The position counts as reached
// when the partition's checkpoint is past O, or when the snapshot itself is
// at or past it (snapshots are written before checkpoints). It checks
// again at each checkpoint write of P when they are announced
// (Options.Progress), and every progressPoll besides; without them, every
// PollEvery.
func (h *Handler) read(ctx context.Context, who, id string, minPos *snapshot.Position, wait time.Duration) (*snapshot.Snapshot, error) {
	if minPos == nil {
		return h.get(ctx, id)
	}
	if !h.waits.take(who) {
		return nil, errBusy
	}
	defer h.waits.give(who)
	deadline := time.Now().Add(wait)
	for {
		var woken <-chan struct{} // nil: no announcements (none, or they stopped)
		if h.progress != nil {
			woken = h.progress.wait(minPos.Partition) // before the reads: a write after them wakes this round
		}
		poll := h.poll
		if woken != nil {
			poll = max(poll, progressPoll)
		}
		snap, err := h.get(ctx, id)
		if err != nil && !errors.Is(err, snapshot.ErrNotFound) {
			return nil, err
		}
		if snap != nil && snap.Position.Partition == minPos.Partition && snap.Position.Offset >= minPos.Offset {
			return snap, nil
		}
		cps, cerr := h.checkpoints(ctx)
		if cerr != nil {
			return nil, cerr
		}
		if cp, ok := cps[minPos.Partition]; ok && cp.Offset > minPos.Offset {
			// Read again: the projector may have written the newer snapshot
			// (and then this checkpoint) after the read above, and only a
			// read after the checkpoint is sure to see it.
			return h.get(ctx, id)
		}
		if !time.Now().Before(deadline) {
			return nil, errNotReached
		}
		t := time.NewTimer(min(poll, time.Until(deadline)))
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// get reads a snapshot within RedisTimeout.
func (h *Handler) get(ctx context.Context, id string) (*snapshot.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	return h.store.Get(ctx, id)
}

// checkpoints reads the topic's checkpoints within RedisTimeout.
func (h *Handler) checkpoints(ctx context.Context) (map[int32]snapshot.Checkpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, RedisTimeout)
	defer cancel()
	return h.store.Checkpoints(ctx, h.topic)
}
