package query

import (
	"bytes"
	"context"
	"net/http"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
)

// RebuildResponse is the body of POST /v1/sessions/{id}/rebuild.
type RebuildResponse struct {
	// Snapshot is the session rebuilt from the log, up to the stored
	// snapshot's position.
	Snapshot *snapshot.Snapshot `json:"snapshot"`
	// Differed tells whether the stored snapshot differed from it.
	Differed bool `json:"differed"`
	// Replaced tells whether the rebuilt snapshot was stored: false when it
	// equalled the stored one, or when the projector had stored a later
	// one meanwhile (which is then the session's, folded from the same log).
	Replaced bool `json:"replaced"`
}

// rebuild rebuilds one session from the log (docs/exactly-once.md): it folds the
// session's records from its first offset to the stored snapshot's
// position, as the replay does, and stores the result if it differs.
//
// The write is fenced like the projector's (snapshot.Store.Replace), so it
// is safe while the projector runs. The fold is deterministic: the rebuilt
// snapshot is exactly what the projector stores at the same position. The
// store keeps the snapshot with the later position, so if the projector
// folded the session further before or after this write, its snapshot wins
// and this write never moves the session backwards; at the same position
// the rebuilt one replaces the stored one (PutBatch would keep the stored
// one, which is the one to repair), and the projector's next write builds
// on whatever it holds. What the projector holds in memory is not changed:
// a projector that read the damaged snapshot before the repair folds on from
// it, and a rebuild after its next write repairs that one too.
func (h *Handler) rebuild(w http.ResponseWriter, r *http.Request, id string) {
	if !canSee(w, r, id) {
		return
	}
	stored, rebuilt, ok := h.fromLog(w, r, id, "rebuild")
	if !ok {
		return
	}
	if !rebuilt.Exists() || rebuilt.Position != stored.Position {
		// The log from the stored first offset to the stored position does
		// not hold the session (the stored positions are damaged, or the
		// log was truncated): nothing trustworthy to store.
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeInternal, Status: http.StatusConflict,
			Detail: "the log between the stored snapshot's first offset and its position does not rebuild the session " +
				"(stored position " + stored.Position.String() + "); rebuild the partition with `projector reset`"})
		return
	}
	resp := RebuildResponse{Snapshot: rebuilt, Differed: !bytes.Equal(rebuilt.AppendBinary(nil), stored.AppendBinary(nil))}
	if resp.Differed {
		wctx, wcancel := context.WithTimeout(r.Context(), RedisTimeout)
		defer wcancel()
		var err error
		resp.Replaced, err = h.store.Replace(wctx, snapshot.NewEntry(rebuilt))
		if err != nil {
			h.storeError(w, err)
			return
		}
		h.log.Warn("rebuilt a session whose stored snapshot differed from the log", "session", id,
			"position", rebuilt.Position.String(), "replaced", resp.Replaced)
	}
	h.metrics.rebuilt(r.Context(), resp)
	httpx.WriteJSON(w, http.StatusOK, resp)
}
