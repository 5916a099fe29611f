package query

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// Archived reads (DESIGN 12.4). A closed session leaves Redis after
// CORREX_RETAIN_CLOSED, into the archive (internal/archive); with
// CORREX_ARCHIVE_URL set, the query service reads it back there:
//
//   - GET /v1/sessions/{id} of a session Redis does not hold answers the
//     archived snapshot with "archived": true (its ETag as for a stored
//     one), under the same tenant rules (a token sees only its prefix);
//   - GET /v1/sessions/{id}/history of such a session pages through the
//     archived history, with the same page form and cursors (the cursor
//     names a position, so a page of the live history continues in the
//     archived one after the session moved);
//   - GET /v1/archive?prefix=&limit=&cursor= lists archived sessions by id
//     prefix within the token's own prefix, read from the objects' keys
//     alone.

// Archive is what the handler reads from the archive: *archive.Store.
type Archive interface {
	Get(ctx context.Context, id string) (*archive.Object, error)
	List(ctx context.Context, prefix, cursor string, limit int) ([]archive.Entry, string, error)
	Ping(ctx context.Context) error
}

var _ Archive = (*archive.Store)(nil)

// ArchiveTimeout bounds the archive's work of a request.
const ArchiveTimeout = 5 * time.Second

// ArchiveList is the body of GET /v1/archive (pkg/wire's, which the
// client reads too).
type ArchiveList = wire.ArchivePage

// archived reads session id from the archive: nil, nil when it is not
// there (or there is no archive).
func (h *Handler) archived(ctx context.Context, id string) (*archive.Object, error) {
	if h.archive == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ArchiveTimeout)
	defer cancel()
	o, err := h.archive.Get(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, nil
	}
	return o, err
}

func (h *Handler) archiveError(w http.ResponseWriter, err error) {
	h.log.Error("archive", "err", err)
	httpx.Unavailable(w, time.Second, "the archive is unavailable", nil)
}

// archivedJSON is the API form of an archived snapshot: its own, with
// "archived": true, the last member of wire.Snapshot.
func archivedJSON(s *snapshot.Snapshot) ([]byte, error) {
	b, err := s.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("archive: snapshot of %s is not a JSON object", s.ID)
	}
	return append(b[:len(b)-1:len(b)-1], `,"archived":true}`...), nil
}

// findArchived reads session id from the archive, and answers the request
// itself (404, or the archive's error) when it reports false.
func (h *Handler) findArchived(w http.ResponseWriter, r *http.Request, id string) (*archive.Object, bool) {
	o, err := h.archived(r.Context(), id)
	switch {
	case errors.Is(err, context.Canceled):
		return nil, false
	case err != nil:
		h.archiveError(w, err)
		return nil, false
	case o == nil:
		notFound(w)
		return nil, false
	}
	return o, true
}

// serveArchived answers GET /v1/sessions/{id} from the archive, or 404.
func (h *Handler) serveArchived(w http.ResponseWriter, r *http.Request, id string) {
	o, ok := h.findArchived(w, r, id)
	if !ok {
		return
	}
	b, err := archivedJSON(o.Snapshot)
	if err != nil {
		h.archiveError(w, err)
		return
	}
	if notModified(w, r, ETag(o.Snapshot)) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// archivedHistory answers GET /v1/sessions/{id}/history from the archive,
// or 404: up to limit entries after the cursor's position.
func (h *Handler) archivedHistory(w http.ResponseWriter, r *http.Request, id string, after *historyCursor, limit int) {
	o, ok := h.findArchived(w, r, id)
	if !ok {
		return
	}
	s := o.Snapshot
	from := int64(-1)
	if after != nil {
		if after.partition != s.Position.Partition || after.first != s.FirstOffset || after.next > s.Position.Offset+1 {
			badRequest(w, "after", "is a cursor of an earlier session under this id; start again without it")
			return
		}
		from = after.next
	}
	page := &wire.HistoryPage{History: []wire.HistoryEntry{}}
	i := 0
	for i < len(o.History) && o.History[i].Position.Offset < from {
		i++
	}
	for ; i < len(o.History) && len(page.History) < limit; i++ {
		page.History = append(page.History, o.History[i])
	}
	if i < len(o.History) && len(page.History) > 0 {
		last := page.History[len(page.History)-1].Position
		c := historyCursor{id: id, partition: s.Position.Partition, first: s.FirstOffset, next: last.Offset + 1, events: uint64(i)}
		next := h.histCursors.encodeHistory(c)
		page.Next = &next
	}
	w.Header().Set("Cache-Control", "no-cache")
	httpx.WriteJSON(w, http.StatusOK, page)
}

// MaxArchiveLimit bounds a page of GET /v1/archive.
const MaxArchiveLimit = 1000

// listArchive answers GET /v1/archive.
func (h *Handler) listArchive(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	q := r.URL.Query()
	f, ok := parseSessionFilter(w, r)
	if !ok {
		return
	}
	for _, p := range []string{"state", "label", "parent"} {
		if q.Has(p) {
			badRequest(w, p, "is not a filter of the archive's listing; use prefix")
			return
		}
	}
	limit, ok := parseLimit(w, q, DefaultLimit, MaxArchiveLimit)
	if !ok {
		return
	}
	if h.archive == nil {
		httpx.Unavailable(w, 30*time.Second, "this query service has no archive configured (CORREX_ARCHIVE_URL)", nil)
		return
	}
	if f.none {
		httpx.WriteJSON(w, http.StatusOK, ArchiveList{Sessions: []wire.ArchivedSession{}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ArchiveTimeout)
	defer cancel()
	entries, next, err := h.archive.List(ctx, f.prefix, q.Get("cursor"), limit)
	switch {
	case errors.Is(err, archive.ErrBadCursor):
		badRequest(w, "cursor", "is not a cursor this service issued; start again without it")
		return
	case r.Context().Err() != nil:
		return
	case err != nil:
		h.archiveError(w, err)
		return
	}
	resp := ArchiveList{Sessions: make([]wire.ArchivedSession, 0, len(entries))}
	for _, e := range entries {
		resp.Sessions = append(resp.Sessions, wire.ArchivedSession{SessionID: e.SessionID, State: e.State, EndedAt: e.EndedAt})
	}
	if next != "" {
		resp.Next = &next
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}
