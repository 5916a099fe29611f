package query

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// ListResponse is the body of GET /v1/sessions (written piecewise by
// listPage, within MaxListBytes).
type ListResponse struct {
	Sessions []*snapshot.Snapshot `json:"sessions"`
	Next     *string              `json:"next"`
}

// stateMessage refuses a state filter that names no state.
var stateMessage = func() string {
	names := make([]string, 0, fsm.NumStates-1)
	for _, s := range fsm.States() {
		names = append(names, s.String())
	}
	return "must be one of " + strings.Join(names, ", ")
}()

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	q := r.URL.Query()
	f, ok := parseSessionFilter(w, r)
	if !ok {
		return
	}
	limit, ok := parseLimit(w, q, DefaultLimit, MaxLimit)
	if !ok {
		return
	}
	if f.none {
		httpx.WriteJSON(w, http.StatusOK, ListResponse{Sessions: []*snapshot.Snapshot{}})
		return
	}
	state, prefix, filter := f.state, f.prefix, f.store()
	body, err := h.listPage(r.Context(), state, prefix, filter, q.Get("cursor"), limit)
	if errors.Is(err, snapshot.ErrBadCursor) {
		badRequest(w, "cursor", "is not a cursor this service issued; start again without it")
		return
	}
	if err != nil {
		h.storeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// Listing reads in chunks: the first of minListChunk sessions, the next
// ones sized by the page's remaining bytes over the mean size so far, never
// more than maxListChunk, so that memory stays near MaxListBytes plus one
// chunk of snapshots while small snapshots still take few round trips.
const (
	minListChunk = 32
	maxListChunk = 256
	// listTail is room kept for `],"next":"CURSOR"}` (a cursor is the
	// base64 of a bucket and a session id of at most 128 bytes).
	listTail = 256
)

// listPage encodes the ListResponse of at most limit index entries from
// cursor, stopping before the session that would take the page past
// MaxListBytes (the first session is always taken, so paging advances
// whatever the sizes stored). Each chunk is read within RedisTimeout: a
// page of large snapshots takes several, and the time spent encoding
// them is not Redis's. Next then continues right after the last
// session of the page: none is skipped or repeated. With a label or parent
// filter, limit counts the sessions examined (see snapshot.ListFiltered):
// the page may hold fewer, or none, and still carry next.
func (h *Handler) listPage(ctx context.Context, state fsm.State, prefix string, filter snapshot.Filter, cursor string, limit int) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"sessions":[`)
	n, next, chunk := 0, "", min(limit, minListChunk)
fill:
	for limit > 0 {
		cctx, cancel := context.WithTimeout(ctx, RedisTimeout)
		page, err := h.store.ListFiltered(cctx, state, prefix, filter, cursor, chunk)
		cancel()
		if err != nil {
			return nil, err
		}
		for i, snap := range page.Snapshots {
			b, err := snap.MarshalJSON()
			if err != nil {
				return nil, err
			}
			if n > 0 && buf.Len()+1+len(b)+listTail > MaxListBytes {
				break fill // next is the cursor after the last session taken
			}
			if n > 0 {
				buf.WriteByte(',')
			}
			buf.Write(b)
			n++
			next = page.After[i]
		}
		limit -= chunk
		cursor, next = page.Next, page.Next
		if cursor == "" {
			break
		}
		chunk = min(limit, minListChunk)
		if n > 0 {
			mean := buf.Len() / n
			chunk = min(limit, max(chunk, min(maxListChunk, (MaxListBytes-buf.Len())/mean+1)))
		}
	}
	buf.WriteString(`],"next":`)
	if next == "" {
		buf.WriteString("null")
	} else {
		buf.WriteString(`"` + next + `"`)
	}
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}
