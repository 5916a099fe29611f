package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/correx/sessions/internal/archive/objstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// Head is an archived session without its history: what GET
// /v1/sessions/{id} answers, and the index by which HistoryPage reads
// the history a chunk at a time. Read it with Store.Head. A Head is not
// changed once returned, and may be shared (cached) by readers.
type Head struct {
	// Key is the object's key and Size its length in bytes, when the head
	// was read.
	Key  string
	Size int64
	// Format is the object's format: 1 (read whole) or 2.
	Format     int
	Snapshot   *snapshot.Snapshot
	ArchivedAt time.Time
	// Truncated is as in Object.
	Truncated *Truncation
	// Entries is the number of entries in the history.
	Entries int64

	// chunks is a format 2 object's index, and before[i] the number of
	// entries before chunks[i]. history is the whole history instead,
	// for an object Head read whole (format 1, or one of at most
	// TailBytes).
	chunks  []chunkJSON
	before  []int64
	history []wire.HistoryEntry
	// bytes is what the head's encoded parts took in the object.
	bytes int64
}

// HistoryComplete reports whether the object holds the session's whole
// history.
func (h *Head) HistoryComplete() bool { return h.Truncated == nil }

// FirstVersion is as Object.FirstVersion.
func (h *Head) FirstVersion() uint64 {
	if h.Truncated == nil {
		return 1
	}
	return h.Snapshot.Version
}

// Footprint estimates the bytes a Head holds in memory: twice the bytes
// it was decoded from (a decoded snapshot or entry takes about that), for
// a cache bounded by bytes.
func (h *Head) Footprint() int64 { return 512 + 2*h.bytes + int64(len(h.chunks))*(64+8) }

// Page is a part of an archived history.
type Page struct {
	// Entries are in the history's order.
	Entries []wire.HistoryEntry
	// More reports whether the history holds entries after the last of
	// Entries.
	More bool
	// Seen is the number of the history's entries up to and including
	// the last of Entries.
	Seen int64
}

// BytesRead is the number of bytes s has read from objects since it was
// opened (Get, Head, HistoryPage).
func (s *Store) BytesRead() int64 { return s.read.Load() }

// find lists the session's keys: the first that names an object of it,
// and its size, or ErrNotFound.
func (s *Store) find(ctx context.Context, id string) (string, int64, error) {
	if !fsm.ValidSessionID(id) {
		return "", 0, ErrNotFound
	}
	objs, _, err := s.bucket.List(ctx, root+id+"/", nil, 2)
	if err != nil {
		return "", 0, fmt.Errorf("archive %s: listing %s: %v", s.url, id, err)
	}
	for _, o := range objs {
		if _, ok := parseKey(o.Key); ok {
			return o.Key, o.Size, nil
		}
	}
	return "", 0, ErrNotFound
}

// readRange reads n bytes of key from off. The object must be size bytes
// long (what the listing or the head said): else it was written again
// since, and the read is ErrChanged.
func (s *Store) readRange(ctx context.Context, key string, off, n, size int64) ([]byte, error) {
	r, got, err := s.bucket.NewRangeReader(ctx, key, off, n)
	if errors.Is(err, objstore.ErrObjectNotFound) {
		return nil, ErrChanged
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s: reading %s: %v", s.url, key, err)
	}
	defer r.Close()
	if got != size {
		return nil, ErrChanged
	}
	b := make([]byte, n)
	k, err := io.ReadFull(r, b)
	s.read.Add(int64(k))
	if err != nil {
		return nil, fmt.Errorf("archive %s: reading %s: %v", s.url, key, err)
	}
	return b, nil
}

// Get reads the archived object of session id whole, of either format, or
// ErrNotFound. Head and HistoryPage read only what they need.
func (s *Store) Get(ctx context.Context, id string) (*Object, error) {
	key, _, err := s.find(ctx, id)
	if err != nil {
		return nil, err
	}
	b, err := readAll(ctx, s.bucket, key)
	s.read.Add(int64(len(b)))
	if errors.Is(err, objstore.ErrObjectNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s: reading %s: %v", s.url, key, err)
	}
	return Decode(b)
}

// Head reads the archived head of session id, or ErrNotFound: from a
// format 2 object, its last TailBytes (trailer and footer) and its head
// line, whatever the history's length; a format 1 object, or one of at
// most TailBytes, is read whole.
func (s *Store) Head(ctx context.Context, id string) (*Head, error) {
	for range 3 { // an object rewritten between the listing and the reads is listed again
		key, size, err := s.find(ctx, id)
		if err != nil {
			return nil, err
		}
		h, err := s.head(ctx, key, size)
		if err == ErrChanged {
			continue
		}
		return h, err
	}
	return nil, fmt.Errorf("archive %s: the object of %s changed as it was read, three times", s.url, id)
}

func (s *Store) head(ctx context.Context, key string, size int64) (*Head, error) {
	if size <= TailBytes {
		b, err := s.readRange(ctx, key, 0, size, size)
		if err != nil {
			return nil, err
		}
		return wholeHead(key, b)
	}
	tailAt := size - TailBytes
	tail, err := s.readRange(ctx, key, tailAt, TailBytes, size)
	if err != nil {
		return nil, err
	}
	t, ok, err := parseTrailer(tail, size)
	if err != nil {
		return nil, err
	}
	if !ok { // format 1: the rest of it
		rest, err := s.readRange(ctx, key, 0, tailAt, size)
		if err != nil {
			return nil, err
		}
		return wholeHead(key, append(rest, tail...))
	}
	footer := tail[max(0, t.footer-tailAt):]
	if t.footer < tailAt {
		if footer, err = s.readRange(ctx, key, t.footer, t.footerLen, size); err != nil {
			return nil, err
		}
	}
	chunks, n, err := decodeFooter(footer[:t.footerLen], t)
	if err != nil {
		return nil, err
	}
	line, err := s.readRange(ctx, key, 0, t.head, size)
	if err != nil {
		return nil, err
	}
	h, err := decodeHead(line)
	if err != nil {
		return nil, err
	}
	h.Key, h.Size, h.Entries, h.chunks, h.bytes = key, size, n, chunks, t.head+t.footerLen
	h.before = make([]int64, len(chunks))
	for i := 1; i < len(chunks); i++ {
		h.before[i] = h.before[i-1] + chunks[i-1].Entries
	}
	return h, nil
}

// wholeHead is the Head of an object read whole, its history kept.
func wholeHead(key string, b []byte) (*Head, error) {
	o, err := Decode(b)
	if err != nil {
		return nil, err
	}
	f := Format
	if _, ok, _ := parseTrailer(b, int64(len(b))); !ok {
		f = formatWhole
	}
	return &Head{Key: key, Size: int64(len(b)), Format: f, Snapshot: o.Snapshot, ArchivedAt: o.ArchivedAt,
		Truncated: o.Truncated, Entries: int64(len(o.History)), history: o.History, bytes: int64(len(b))}, nil
}

// HistoryPage reads up to limit entries of h's history from the first
// whose offset is at least from: for a format 2 object, the chunks that
// hold them and nothing else; for an object Head read whole, nothing. An
// object written again since h was read is ErrChanged.
func (s *Store) HistoryPage(ctx context.Context, h *Head, from int64, limit int) (Page, error) {
	if limit <= 0 {
		return Page{}, fmt.Errorf("archive: limit must be positive")
	}
	if h.chunks == nil {
		i := sort.Search(len(h.history), func(i int) bool { return h.history[i].Position.Offset >= from })
		end := min(len(h.history), i+limit)
		return Page{Entries: h.history[i:end:end], More: end < len(h.history), Seen: int64(end)}, nil
	}
	var p Page
	i := sort.Search(len(h.chunks), func(i int) bool { return h.chunks[i].LastOffset >= from })
	for ; i < len(h.chunks); i++ {
		c := h.chunks[i]
		b, err := s.readRange(ctx, h.Key, c.At, c.Len, h.Size)
		if err != nil {
			return Page{}, err
		}
		es, err := decodeChunk(b, c)
		if err != nil {
			return Page{}, err
		}
		for j, e := range es {
			if e.Position.Offset < from {
				continue
			}
			if len(p.Entries) == limit {
				p.More = true
				return p, nil
			}
			p.Entries = append(p.Entries, e)
			p.Seen = h.before[i] + int64(j) + 1
		}
		if len(p.Entries) == limit {
			// Chunks are never empty, and the ones after hold later entries.
			p.More = i+1 < len(h.chunks)
			return p, nil
		}
	}
	return p, nil
}
