package projector

import (
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/snapshot"
)

// cache holds the snapshots the projector folds into: one map per owned
// partition, the LRU list with its count and estimated bytes (lru.go), and
// the dirty set (entries changed since they were last handed to a flush).
//
// It has no lock of its own. It belongs to the fold goroutine; the
// rebalance callbacks use it too, but franz-go runs them between polls
// (BlockRebalanceOnPoll) and under state.mu, so there is never more
// than one user at a time. The flusher goroutine never touches it: a flush
// carries encoded copies (flushJob.entries), and what became durable is
// recorded back by the fold goroutine (flusher.finish).
type cache struct {
	parts map[int32]map[string]*entry // by partition, then session id
	lru   lru
	dirty []*entry
	// dirtyBytes is the sum of the dirty entries' pending bytes: what
	// their encodings are expected to take in the next batch.
	dirtyBytes int
	// writing is the bytes of the encodings of the batch in flight, which
	// count against maxBytes until it is written (flusher.build, finish).
	writing  int
	maxCount int    // Config.CacheSize
	maxBytes int    // Config.CacheBytes, or DefaultCacheBytes
	maxScan  int    // entries evict may look at per call (4*FlushSize)
	scratch  []byte // for the encoded length of a snapshot read from the store
}

func newCache(cfg Config) cache {
	return cache{parts: map[int32]map[string]*entry{}, maxCount: cfg.CacheSize, maxBytes: cfg.cacheBytes(), maxScan: 4 * cfg.FlushSize}
}

// entry is a cached snapshot, or the knowledge that a session has none.
type entry struct {
	id         string
	snap       snapshot.Snapshot
	part       *partState        // nil once the partition was dropped
	dirty      bool              // changed since it was last encoded for a flush
	durable    snapshot.Position // the stored version's position, when hasDurable
	hasDurable bool
	encoded    int // the length of the snapshot's encoding when last encoded
	// pending is what the entry counts in cache.dirtyBytes while dirty:
	// its encoded length when it became dirty, plus the length of every
	// record folded into it since (a fold adds at most what its record
	// carries to the snapshot: a new session's goal, labels and metadata
	// come from its SessionCreated). The encoding's length is known only
	// once encoded, and encoding at each fold would double its cost.
	pending    int
	size       int    // estimate() when last counted in lru.bytes
	prev, next *entry // LRU links
	// tomb is the session's tombstone when it has no snapshot because it
	// was archived (docs/retention.md): events for it are rejected, as for a
	// terminal session (folder.foldTombstoned).
	tomb *projstore.Tombstone
}

// evictable reports whether dropping the entry loses nothing: its latest
// state is stored (or there is no session).
func (e *entry) evictable() bool {
	if e.dirty {
		return false
	}
	if !e.snap.Exists() {
		return true
	}
	return e.hasDurable && e.durable == e.snap.Position
}

// addPartition makes room for a partition's sessions.
func (c *cache) addPartition(id int32) {
	if c.parts[id] == nil {
		c.parts[id] = map[string]*entry{}
	}
}

// get returns the cached entry of a session of a partition, or nil.
func (c *cache) get(part int32, id string) *entry {
	return c.parts[part][id]
}

// add caches what the store holds for a session (stored is nil when it has
// no snapshot) as the most recently used entry.
func (c *cache) add(part *partState, id string, stored *snapshot.Snapshot) *entry {
	en := &entry{id: id, part: part}
	if stored != nil {
		en.snap, en.durable, en.hasDurable = *stored, stored.Position, true
		c.scratch = en.snap.AppendBinary(c.scratch[:0])
		en.encoded = len(c.scratch)
	}
	c.parts[part.id][id] = en
	c.lru.pushFront(en)
	return en
}

// touch marks en as the most recently used.
func (c *cache) touch(en *entry) { c.lru.touch(en) }

// markDirty puts en, which a fold of a record of folded bytes changed, in
// the dirty set, and counts it there (entry.pending). It is counted again
// in the LRU when a flush encodes it (encode).
func (c *cache) markDirty(en *entry, folded int) {
	if !en.dirty {
		en.dirty = true
		en.pending = en.encoded
		c.dirtyBytes += en.pending
		c.dirty = append(c.dirty, en)
	}
	en.pending += folded
	c.dirtyBytes += folded
}

// dirtyLen is the size of the dirty set.
func (c *cache) dirtyLen() int { return len(c.dirty) }

// keepDirty makes kept the dirty set and counts its bytes again.
func (c *cache) keepDirty(kept []*entry) {
	clear(c.dirty[len(kept):])
	c.dirty = kept
	c.dirtyBytes = 0
	for _, en := range kept {
		c.dirtyBytes += en.pending
	}
}

// takeDirty removes from the dirty set the entries of the given partitions
// (all when only is nil) and returns them, no longer marked dirty: the
// caller encodes them for a flush. Entries of dropped partitions are
// discarded.
func (c *cache) takeDirty(only map[int32]bool) []*entry {
	var taken []*entry
	keep := c.dirty[:0]
	for _, en := range c.dirty {
		if en.part == nil {
			continue
		}
		if only != nil && !only[en.part.id] {
			keep = append(keep, en)
			continue
		}
		en.dirty = false
		taken = append(taken, en)
	}
	c.keepDirty(keep)
	return taken
}

// encode returns en's snapshot encoded for a flush, and counts en at its
// encoded length from now on. en is one takeDirty returned, so it is in the
// LRU list.
func (c *cache) encode(en *entry) snapshot.Entry {
	e := snapshot.NewEntry(&en.snap)
	en.encoded = len(e.Data)
	c.lru.resize(en)
	return e
}

// dropPartition forgets a partition's sessions, dirty or not: it was
// revoked, lost, or is rebuilt from the log.
func (c *cache) dropPartition(id int32) {
	for _, en := range c.parts[id] {
		c.lru.remove(en)
		en.part = nil
		en.dirty = false
	}
	delete(c.parts, id)
	keep := c.dirty[:0]
	for _, en := range c.dirty {
		if en.part != nil {
			keep = append(keep, en)
		}
	}
	c.keepDirty(keep)
}

// forget drops a session that left Redis at pos (archived), even one a
// fold changed since: the archive's removal left a tombstone, so no
// snapshot of the session is written again (pkg/snapshot's PutScript
// refuses it), and the next event reads the tombstone.
func (c *cache) forget(part int32, id string, pos snapshot.Position) {
	en := c.parts[part][id]
	if en == nil {
		return
	}
	c.lru.remove(en)
	if en.dirty {
		c.dirtyBytes -= en.pending
	}
	en.part, en.dirty = nil, false // takeDirty discards it
	delete(c.parts[part], id)
}

// forgetStored drops a session whose stored snapshot was replaced behind
// the fold (the verifier's repair), if the copy held is what was stored
// before (evictable): the next event reads the replacement. A copy with
// changes not yet written is kept: its write lands over the replacement,
// and the verifier judges that one in a later cycle.
func (c *cache) forgetStored(part int32, id string) {
	en := c.parts[part][id]
	if en == nil || !en.evictable() {
		return
	}
	c.drop(en)
}

// drop removes a clean entry from the cache: the next event reads the
// store again.
func (c *cache) drop(en *entry) {
	c.lru.remove(en)
	if en.part != nil {
		delete(c.parts[en.part.id], en.id)
	}
	en.part = nil
}

// forgetTombstone drops a session known only by its tombstone, which the
// tombstone retention removed: the next event reads the store again, and
// finds no session. An entry with a snapshot is kept.
func (c *cache) forgetTombstone(part int32, id string) {
	en := c.parts[part][id]
	if en == nil || en.tomb == nil || en.snap.Exists() || en.dirty {
		return
	}
	c.drop(en)
}

// evict drops least recently used snapshots beyond the cache's count or
// bytes (the batch in flight's encodings counted in), only those whose
// latest state is stored. It looks at maxScan entries at most, so a cache
// full of unwritten entries costs little.
func (c *cache) evict() {
	steps := 0
	for e := c.lru.tail; e != nil && (c.lru.n > c.maxCount || c.lru.bytes+c.writing > c.maxBytes) && steps < c.maxScan; steps++ {
		prev := e.prev
		if e.evictable() {
			c.lru.remove(e)
			if e.part != nil {
				delete(c.parts[e.part.id], e.id)
			}
		}
		e = prev
	}
}

// holdWriting counts the encodings of job, handed to the flusher, against
// the cache's bytes until it is collected: they are held as long as the
// snapshots (writing, evict).
func (c *cache) holdWriting(job *flushJob) {
	c.writing = 0
	for _, e := range job.entries {
		c.writing += len(e.Data)
	}
}
