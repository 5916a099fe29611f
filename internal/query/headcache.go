package query

import (
	"container/list"
	"sync"
	"time"

	"github.com/correx/sessions/internal/archive"
)

// DefaultArchiveHeadCache is the default bound, in bytes, of the archived
// heads kept for the next reads (Options.ArchiveHeadCache,
// CORREX_ARCHIVE_HEAD_CACHE).
const DefaultArchiveHeadCache = 16 << 20

// headTTL is how long a kept head is used. An archived object does not
// change once its session left Redis (a tombstone keeps the id), except
// when CORREX_TOMBSTONE_RETENTION lets a new session take the id and be
// archived in its turn: a head kept this long at most is the old
// session's for that long at most. Pages of one history, the reason to
// keep heads, come well within it.
const headTTL = time.Minute

// headCache keeps archived heads (the snapshot and the chunk index of a
// session's object, archive.Head) by session id, least recently used first
// out, within a bound on their bytes (archive.Head.Footprint), so that the
// pages of one huge archived history read the head once rather than per
// page. A head larger than a quarter of the bound is not kept (a format 1
// object's, which holds its whole history). Safe for concurrent use; the
// lock is held only to look up and link.
type headCache struct {
	max   int64
	now   func() time.Time
	mu    sync.Mutex
	bytes int64
	order *list.List // of *headEntry, most recent first
	byID  map[string]*list.Element
}

type headEntry struct {
	id   string
	head *archive.Head
	size int64
	at   time.Time
}

// newHeadCache bounds the heads kept to max bytes; max <= 0 keeps none.
func newHeadCache(max int64) *headCache {
	return &headCache{max: max, now: time.Now, order: list.New(), byID: map[string]*list.Element{}}
}

// get returns the head kept for id, or nil.
func (c *headCache) get(id string) *archive.Head {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil
	}
	e := el.Value.(*headEntry)
	if c.now().Sub(e.at) > headTTL {
		c.remove(el)
		return nil
	}
	c.order.MoveToFront(el)
	return e.head
}

// put keeps h as id's head, in place of any other.
func (c *headCache) put(id string, h *archive.Head) {
	size := h.Footprint() + int64(len(id))
	if c.max <= 0 || size > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		c.remove(el)
	}
	c.byID[id] = c.order.PushFront(&headEntry{id: id, head: h, size: size, at: c.now()})
	c.bytes += size
	for c.bytes > c.max {
		c.remove(c.order.Back())
	}
}

// drop forgets h if it is still id's head (it was found stale).
func (c *headCache) drop(id string, h *archive.Head) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok && el.Value.(*headEntry).head == h {
		c.remove(el)
	}
}

func (c *headCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*headEntry)
	delete(c.byID, e.id)
	c.bytes -= e.size
}

// held is the bytes and the number of heads kept.
func (c *headCache) held() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.order.Len()
}
