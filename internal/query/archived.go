package query

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// Archived reads (docs/retention.md, "Reading archived sessions"). A closed session leaves Redis after
// CORREX_RETAIN_CLOSED, into the archive (internal/archive); with
// CORREX_ARCHIVE_URL set, the query service reads it back there:
//
//   - GET /v1/sessions/{id} of a session Redis does not hold answers the
//     archived snapshot with "archived": true (its ETag as for a stored
//     one), under the same tenant rules (a token sees only its prefix);
//   - GET /v1/sessions/{id}/history of such a session pages through the
//     archived history, with the same page form and cursors (the cursor
//     names a position, so a page of the live history continues in the
//     archived one after the session moved); a session archived when the
//     log no longer held its first events ("historyComplete": false,
//     docs/retention.md) answers 409 history-truncated, as the live history of a
//     trimmed log does, naming the first version the archive holds;
//   - GET /v1/archive?prefix=&limit=&cursor= lists archived sessions by id
//     prefix within the token's own prefix, read from the objects' keys
//     alone.

//
// The archive is a secondary store. Serve opens it in the background
// (archive.Remote): the service starts and serves live sessions while it
// is unreachable, /readyz stays ready and lists it under "degraded", and
// correx.query.archive.reachable is 0. Meanwhile a session Redis does not
// hold answers 503 at once, saying that the archive, which may hold it,
// cannot be asked (never a 404 that may be wrong, never after a wait);
// archived histories and the archive's listing answer 503 the same way.

// Archived reads read what they need of an object, never the whole of a
// format 2 one (internal/archive): GET /v1/sessions/{id} its head (the
// snapshot and the chunks' index: the object's tail and first line), a
// history page the chunks that hold its entries. Heads are kept for the
// next reads, within CORREX_ARCHIVE_HEAD_CACHE bytes (headcache.go), so the
// pages of one huge history read the head once. An object written before
// format 2 is read whole, as it always was.
//
// Archived reads have slots of their own, CORREX_ARCHIVE_READS in all and
// CORREX_ARCHIVE_READS_PER_PRINCIPAL for one token (or, without
// authentication, one client address), apart from the replays' (which the
// live histories, replays, rebuilds and reads as of a version share): a
// request that finds none free answers 503 with Retry-After at once, so
// one tenant paging a huge archived session can neither take every
// archived read from the others nor hold up their live histories.

// Archive is what the handler reads from the archive: *archive.Remote
// (Serve) or *archive.Store.
type Archive interface {
	Head(ctx context.Context, id string) (*archive.Head, error)
	HistoryPage(ctx context.Context, h *archive.Head, from int64, limit int) (archive.Page, error)
	List(ctx context.Context, prefix, cursor string, limit int) ([]archive.Entry, string, error)
	Ping(ctx context.Context) error
}

var (
	_ Archive = (*archive.Store)(nil)
	_ Archive = (*archive.Remote)(nil)
)

// ArchiveTimeout bounds each of the archive's calls of a request
// (archive.Remote bounds each call by CORREX_ARCHIVE_TIMEOUT too).
const ArchiveTimeout = archive.DefaultTimeout

// Archived reads' slots: the defaults of Options.MaxArchiveReads and
// Options.MaxArchiveReadsPerPrincipal (CORREX_ARCHIVE_READS,
// CORREX_ARCHIVE_READS_PER_PRINCIPAL). An archived read holds a head and a
// chunk (about archive.ChunkBytes) at most, for format 2 objects.
const (
	DefaultArchiveReads             = 16
	DefaultArchiveReadsPerPrincipal = 4
)

// ArchiveList is the body of GET /v1/archive (pkg/wire's, which the
// client reads too).
type ArchiveList = wire.ArchivePage

// archivedHead returns the head of session id's archived object, kept or
// read: nil, nil when it is not there (or there is no archive).
func (h *Handler) archivedHead(ctx context.Context, id string) (*archive.Head, error) {
	if h.archive == nil {
		return nil, nil
	}
	if hd := h.heads.get(id); hd != nil {
		return hd, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ArchiveTimeout)
	defer cancel()
	hd, err := h.archive.Head(ctx, id)
	if errors.Is(err, archive.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h.heads.put(id, hd)
	return hd, nil
}

// takeArchiveRead reserves an archived read's slot for the request's
// principal, and returns its release; when none is free it answers 503
// itself and reports false.
func (h *Handler) takeArchiveRead(w http.ResponseWriter, r *http.Request) (func(), bool) {
	who := auth.PrincipalFrom(r.Context()).Key()
	if !h.archiveReads.take(who) {
		httpx.Unavailable(w, retrySoon, "too many archived reads are running, for this caller or in all; retry", nil)
		return nil, false
	}
	return func() { h.archiveReads.give(who) }, true
}

func (h *Handler) archiveError(w http.ResponseWriter, err error) {
	if errors.Is(err, archive.ErrUnreachable) {
		httpx.Unavailable(w, retryBusy, "the archive is unreachable; retry later ("+err.Error()+")", nil)
		return
	}
	h.log.Error("archive", "err", err)
	httpx.Unavailable(w, retrySoon, "the archive is unavailable", nil)
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

// findArchived reads the head of session id's archived object, in an
// archived read's slot, and answers the request itself (503 when no slot
// is free, 404, or the archive's error) when it reports false.
func (h *Handler) findArchived(w http.ResponseWriter, r *http.Request, id string) (*archive.Head, bool) {
	if h.archive == nil {
		notFound(w)
		return nil, false
	}
	release, ok := h.takeArchiveRead(w, r)
	if !ok {
		return nil, false
	}
	defer release()
	return h.findArchivedHeld(w, r, id)
}

// findArchivedHeld is findArchived for a request that holds its slot.
func (h *Handler) findArchivedHeld(w http.ResponseWriter, r *http.Request, id string) (*archive.Head, bool) {
	hd, err := h.archivedHead(r.Context(), id)
	switch {
	case errors.Is(err, context.Canceled):
		return nil, false
	case errors.Is(err, archive.ErrUnreachable):
		httpx.Unavailable(w, retryBusy, fmt.Sprintf(
			"session %s is not in the read model, and the archive, which holds the closed sessions that left it, is unreachable: it may be there; retry later (%v)",
			id, err), nil)
		return nil, false
	case err != nil:
		h.archiveError(w, err)
		return nil, false
	case hd == nil:
		notFound(w)
		return nil, false
	}
	return hd, true
}

// serveArchived answers GET /v1/sessions/{id} from the archive, or 404.
func (h *Handler) serveArchived(w http.ResponseWriter, r *http.Request, id string) {
	hd, ok := h.findArchived(w, r, id)
	if !ok {
		return
	}
	b, err := archivedJSON(hd.Snapshot)
	if err != nil {
		h.archiveError(w, err)
		return
	}
	if notModified(w, r, ETag(hd.Snapshot)) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// archivedHistory answers GET /v1/sessions/{id}/history from the archive,
// or 404: up to limit entries after the cursor's position, read from the
// chunks that hold them. A head kept from before the object was written
// again (archive.ErrChanged) is read again, once.
func (h *Handler) archivedHistory(w http.ResponseWriter, r *http.Request, id string, after *historyCursor, limit int) {
	if h.archive == nil {
		notFound(w)
		return
	}
	release, ok := h.takeArchiveRead(w, r)
	if !ok {
		return
	}
	defer release()
	for attempt := 0; ; attempt++ {
		hd, ok := h.findArchivedHeld(w, r, id)
		if !ok {
			return
		}
		s := hd.Snapshot
		if hd.Truncated != nil {
			// Incomplete (docs/retention.md, "The object"): what is missing answers as the live
			// history of a trimmed log does. The object holds no entry, so
			// every page is missing.
			h.archivedTruncated(w, hd)
			return
		}
		from := int64(-1)
		if after != nil {
			if after.partition != s.Position.Partition || after.first != s.FirstOffset || after.next > s.Position.Offset+1 {
				badRequest(w, "after", "is a cursor of an earlier session under this id; start again without it")
				return
			}
			from = after.next
		}
		ctx, cancel := context.WithTimeout(r.Context(), ArchiveTimeout)
		p, err := h.archive.HistoryPage(ctx, hd, from, limit)
		cancel()
		switch {
		case errors.Is(err, archive.ErrChanged) && attempt == 0:
			h.heads.drop(id, hd)
			continue
		case r.Context().Err() != nil:
			return
		case err != nil:
			h.archiveError(w, err)
			return
		}
		page := &wire.HistoryPage{History: p.Entries}
		if page.History == nil {
			page.History = []wire.HistoryEntry{}
		}
		if p.More && len(p.Entries) > 0 {
			last := p.Entries[len(p.Entries)-1].Position
			c := historyCursor{id: id, partition: s.Position.Partition, first: s.FirstOffset, next: last.Offset + 1, events: uint64(p.Seen)}
			next := h.histCursors.encodeHistory(c)
			page.Next = &next
		}
		w.Header().Set("Cache-Control", "no-cache")
		httpx.WriteJSON(w, http.StatusOK, page)
		return
	}
}

// archivedTruncated answers 409 history-truncated for an archived session
// whose history the log no longer held in full when it was archived.
func (h *Handler) archivedTruncated(w http.ResponseWriter, hd *archive.Head) {
	s := hd.Snapshot
	httpx.WriteProblem(w, httpx.Problem{Type: TypeHistoryTruncated, Status: http.StatusConflict,
		Detail: fmt.Sprintf("the events log no longer held the first events of this session when it was archived: "+
			"partition %d started at offset %d, the session at %d; the archive holds it from version %d, its final snapshot, and no history",
			s.Position.Partition, hd.Truncated.EarliestOffset, s.FirstOffset, hd.FirstVersion()),
		Extra: map[string]any{"partition": s.Position.Partition, "firstOffset": s.FirstOffset,
			"earliestOffset": hd.Truncated.EarliestOffset, "historyComplete": false, "firstVersion": hd.FirstVersion()}})
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
		httpx.Unavailable(w, retryUnconfigured, "this query service has no archive configured (CORREX_ARCHIVE_URL)", nil)
		return
	}
	if f.none {
		httpx.WriteJSON(w, http.StatusOK, ArchiveList{Sessions: []wire.ArchivedSession{}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ArchiveTimeout)
	defer cancel()
	cursor := ""
	if q.Has("cursor") {
		var err error
		if cursor, err = h.archCursors.openArchive(q.Get("cursor"), f.prefix); err != nil {
			badRequest(w, "cursor", "is not a cursor this service issued for this listing; start again without it")
			return
		}
	}
	entries, next, err := h.archive.List(ctx, f.prefix, cursor, limit)
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
		sealed := h.archCursors.sealArchive(next, f.prefix)
		resp.Next = &sealed
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
}

// Archive cursors. The bucket's own page token (fileblob's is the last key
// listed, S3's a continuation token) is no cursor to hand out: any string
// would be taken as a place in the bucket, and a wrong one silently ends
// the listing. So it is sealed like the history's cursors, under a key of
// its own derived from the same secret, with the prefix it lists:
//
//	base64url( 1 | nonce (12 bytes) | seal( uvarint len(prefix) | prefix | page token ) )
//
// A cursor that does not open (another key, altered, forged), or that was
// issued for another prefix, is a 400 naming cursor.
const (
	archiveCursorVersion  = 1
	archiveKeyLabel       = "correx-sessions archive cursor v1\x00"
	maxArchiveCursorChars = 4096
)

// sealArchive seals the archive's page token of a listing of prefix.
func (s cursorSealer) sealArchive(token, prefix string) string {
	plain := binary.AppendUvarint(make([]byte, 0, 2+len(prefix)+len(token)), uint64(len(prefix)))
	plain = append(plain, prefix...)
	plain = append(plain, token...)
	return s.seal(archiveCursorVersion, plain)
}

// openArchive returns the page token sealArchive sealed for prefix:
// snapshot.ErrBadCursor or errCursorForeign for anything else.
func (s cursorSealer) openArchive(str, prefix string) (string, error) {
	plain, err := s.open(archiveCursorVersion, str, maxArchiveCursorChars)
	if err != nil {
		return "", err
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > uint64(len(plain)-k) || string(plain[k:k+int(n)]) != prefix || len(plain) == k+int(n) {
		return "", snapshot.ErrBadCursor
	}
	return string(plain[k+int(n):]), nil
}
