package query

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// The history (README, "HTTP API"): GET /v1/sessions/{id}/history lists every
// event of a session, in the log's order, with what the fold did with it.
// It is read from the events topic, from the session's first offset to the
// stored snapshot's position, and folded with snapshot.Fold, the rule of the
// projector and of the replay, which says each event's outcome.
//
// Paging. Several entries can share a version (a rejection does not move
// it), so a page does not end at a version but at a position: an event's
// offset, unique per entry. The cursor ("next", passed back as "after")
// carries where the next page starts in the log and how many events the
// fold had seen there, sealed with AES-256-GCM under a key derived from the
// watch cursors' secret (CORREX_WATCH_CURSOR_KEY_FILE, or the one shared in
// Redis) with a label of its own, so that it is opaque, cannot be forged,
// and is valid on every replica:
//
//	base64url( 1 | nonce (12 bytes) | seal( uvarint len(id) | id |
//	           4-byte partition | 8-byte first offset | 8-byte next offset | 8-byte events seen ) )
//
// The fold's state where a page ends is not in the cursor (it holds the
// duplicate window, the last transitions and the session's metadata:
// kilobytes to tens of kilobytes, too much for a URL); the service keeps it
// in a bounded cache (HistoryCache states, least recently used first out)
// under the cursor's position. A page that finds its state there reads the
// log from the cursor's offset only, so paging through a history of N
// events costs O(N) reads, not O(N²). A page that does not (another
// replica, a restart, an eviction) folds the session again from its first
// offset up to the cursor, checks that the fold has seen the cursor's
// number of events there, and continues: slower, never different. A page
// ends early, with a cursor, when the read reaches ReplayLimit after at
// least one entry; with none, the read is answered 503 as a replay is.
// Histories read from the log share the bound on concurrent replays and
// rebuilds (MaxReplays); archived histories have slots of their own
// (archived.go).

// History limits.
const (
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
	// DefaultHistoryCache is the default number of fold states kept for
	// the next pages of histories (Options.HistoryCache).
	DefaultHistoryCache = 256
	// historyCacheBytes bounds the cached states' encoded bytes, whatever
	// their number.
	historyCacheBytes = 64 << 20
	// historyCursorVersion is the first byte of a history cursor, and
	// maxHistoryCursorChars bounds one before it is decoded.
	historyCursorVersion  = 1
	maxHistoryCursorChars = 512
)

// historyKeyLabel separates the history cursors' key from the watch
// cursors', derived from the same secret.
const historyKeyLabel = "correx-sessions history cursor v1\x00"

// historyCursor is where a history page ends.
type historyCursor struct {
	id        string
	partition int32
	first     int64 // the session's first offset: a cursor of an earlier session under the id is refused
	next      int64 // the offset the next page reads from
	events    uint64
}

func (c historyCursor) key() foldKey { return foldKey{c.id, c.partition, c.first, c.next} }

func (s cursorSealer) encodeHistory(c historyCursor) string {
	plain := binary.AppendUvarint(make([]byte, 0, 2+len(c.id)+28), uint64(len(c.id)))
	plain = append(plain, c.id...)
	plain = binary.BigEndian.AppendUint32(plain, uint32(c.partition))
	plain = binary.BigEndian.AppendUint64(plain, uint64(c.first))
	plain = binary.BigEndian.AppendUint64(plain, uint64(c.next))
	plain = binary.BigEndian.AppendUint64(plain, c.events)
	return s.seal(historyCursorVersion, plain)
}

func (s cursorSealer) decodeHistory(str string) (historyCursor, error) {
	plain, err := s.open(historyCursorVersion, str, maxHistoryCursorChars)
	if err != nil {
		return historyCursor{}, err
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > fsm.MaxSessionIDLen || uint64(len(plain)-k) != n+28 {
		return historyCursor{}, snapshot.ErrBadCursor // sealed by this key, so never seen; kept for safety
	}
	c := historyCursor{id: string(plain[k : k+int(n)])}
	rest := plain[k+int(n):]
	c.partition = int32(binary.BigEndian.Uint32(rest))
	c.first = int64(binary.BigEndian.Uint64(rest[4:]))
	c.next = int64(binary.BigEndian.Uint64(rest[12:]))
	c.events = binary.BigEndian.Uint64(rest[20:])
	if c.partition < 0 || c.first < 0 || c.next <= c.first {
		return historyCursor{}, snapshot.ErrBadCursor
	}
	return c, nil
}

// foldKey names a fold state: a session's, from its first offset, up to
// (not including) offset next.
type foldKey struct {
	id        string
	partition int32
	first     int64
	next      int64
}

// foldCache keeps fold states, encoded (snapshot.AppendBinary), least
// recently used first out, within a number and historyCacheBytes. Safe for
// concurrent use.
type foldCache struct {
	refolds atomic.Int64 // pages that did not find their state (tests)
	mu      sync.Mutex
	max     int
	bytes   int
	order   *list.List // of *foldEntry, most recent first
	byKey   map[foldKey]*list.Element
}

type foldEntry struct {
	key foldKey
	b   []byte
}

func newFoldCache(n int) *foldCache {
	return &foldCache{max: n, order: list.New(), byKey: map[foldKey]*list.Element{}}
}

func (c *foldCache) get(k foldKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*foldEntry).b, true
}

func (c *foldCache) put(k foldKey, b []byte) {
	if c.max <= 0 || len(b) > historyCacheBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&foldEntry{key: k, b: b})
	c.bytes += len(b)
	for c.order.Len() > c.max || c.bytes > historyCacheBytes {
		old := c.order.Remove(c.order.Back()).(*foldEntry)
		delete(c.byKey, old.key)
		c.bytes -= len(old.b)
	}
}

// Len is the number of states kept.
func (c *foldCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// history serves GET /v1/sessions/{id}/history (sessionRoute).
func (h *Handler) history(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	limit := DefaultHistoryLimit
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxHistoryLimit {
			badRequest(w, "limit", fmt.Sprintf("must be an integer from 1 to %d", MaxHistoryLimit))
			return
		}
		limit = n
	}
	var after *historyCursor
	if q.Has("after") {
		c, err := h.histCursors.decodeHistory(q.Get("after"))
		switch {
		case errors.Is(err, errCursorForeign):
			badRequest(w, "after", "is not a cursor this service can resume from (another key, or altered); start again without it")
			return
		case err != nil:
			badRequest(w, "after", "is not a history cursor: pass the next of a page, or nothing for the first page")
			return
		case c.id != id:
			badRequest(w, "after", "is a cursor of another session's history")
			return
		}
		after = &c
	}
	if !canSee(w, r, id) {
		return
	}
	lr, ok := h.replayer.(LogReader)
	if !ok && h.archive == nil {
		httpx.Unavailable(w, retryUnconfigured, "the history needs Kafka, and this query service has no brokers configured", nil)
		return
	}
	stored, err := h.get(r.Context(), id)
	if errors.Is(err, snapshot.ErrNotFound) {
		// In an archived read's slot, not a replay's (archived.go).
		h.archivedHistory(w, r, id, after, limit)
		return
	}
	if err != nil {
		h.storeError(w, err)
		return
	}
	if !ok {
		httpx.Unavailable(w, retryUnconfigured, "the history needs Kafka, and this query service has no brokers configured", nil)
		return
	}
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	default:
		httpx.Unavailable(w, retryBusy, "too many replays, rebuilds and histories are running; retry", nil)
		return
	}
	if after != nil && (after.partition != stored.Position.Partition || after.first != stored.FirstOffset ||
		after.next > stored.Position.Offset+1) {
		badRequest(w, "after", "is a cursor of an earlier session under this id; start again without it")
		return
	}
	if h.truncated(w, r, stored, "history") {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.replayLimit)
	defer cancel()
	page, err := h.historyPage(ctx, lr, stored, after, limit)
	switch {
	case errors.Is(err, errHistoryDiverged):
		badRequest(w, "after", "does not match the log any more; start again without it")
		return
	case r.Context().Err() != nil:
		return
	case err != nil:
		h.log.Warn("history", "session", id, "err", err)
		httpx.Unavailable(w, retryBusy, "history from Kafka failed: "+err.Error(), nil)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	httpx.WriteJSON(w, http.StatusOK, page)
}

// errHistoryDiverged: folding again up to a cursor did not see the events
// the cursor says were seen there.
var errHistoryDiverged = errors.New("the log does not fold to the cursor's state")

// historyPage folds the log of stored's session from after (from its first
// offset when nil) and returns up to limit entries, ending at stored's
// position.
func (h *Handler) historyPage(ctx context.Context, lr LogReader, stored *snapshot.Snapshot, after *historyCursor, limit int) (*wire.HistoryPage, error) {
	id, p, end := stored.ID, stored.Position.Partition, stored.Position.Offset
	var s snapshot.Snapshot
	var red fsm.Reducer
	from := stored.FirstOffset
	if after != nil {
		b, ok := h.folds.get(after.key())
		if ok {
			ok = snapshot.Decode(b, &s) == nil
		}
		if !ok {
			h.folds.refolds.Add(1)
			s = snapshot.Snapshot{}
			err := lr.Scan(ctx, id, p, after.first, after.next-1, func(e *fsm.Event, pos snapshot.Position) bool {
				s.Fold(&red, e, pos)
				return true
			})
			if err != nil {
				return nil, err
			}
		}
		if s.Counters.Events != after.events {
			return nil, errHistoryDiverged
		}
		from = after.next
	}
	page := &wire.HistoryPage{History: make([]wire.HistoryEntry, 0, min(limit, 128))}
	var last snapshot.Position
	err := lr.Scan(ctx, id, p, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
		o, folded := s.Fold(&red, e, pos)
		if !folded || o.Result == fsm.Orphan {
			return true
		}
		page.History = append(page.History, sessionlog.Entry(&s, e, pos, o))
		last = pos
		return len(page.History) < limit
	})
	if err != nil && (len(page.History) == 0 || !errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		return nil, err
	}
	// Out of time after some entries: the page ends there, with a cursor.
	if len(page.History) > 0 && last.Offset < end && (len(page.History) == limit || err != nil) {
		c := historyCursor{id: id, partition: p, first: stored.FirstOffset, next: last.Offset + 1, events: s.Counters.Events}
		h.folds.put(c.key(), s.AppendBinary(nil))
		next := h.histCursors.encodeHistory(c)
		page.Next = &next
	}
	return page, nil
}
