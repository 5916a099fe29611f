package archive

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/correx/sessions/internal/archive/objstore"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// Schemes are the URL schemes Open accepts.
var Schemes = []string{"file", "s3", "gs", "mem"}

// Object is one archived session.
type Object struct {
	Snapshot   *snapshot.Snapshot
	History    []wire.HistoryEntry
	ArchivedAt time.Time
	// Truncated, when set, says that the events log no longer held the
	// session's first events when it was archived (docs/retention.md, "The
	// object"): History
	// is then empty, and the archive holds the session from its final
	// snapshot's version only (FirstVersion).
	Truncated *Truncation
}

// Truncation is what an object whose history is incomplete says of it.
type Truncation struct {
	// EarliestOffset is where the session's partition of the events log
	// started when the session was archived: its first offset was before.
	EarliestOffset int64
}

// HistoryComplete reports whether the object holds the session's whole
// history.
func (o *Object) HistoryComplete() bool { return o.Truncated == nil }

// FirstVersion is the first version of the session the object holds: 1
// (the creation's) with a complete history, else the final snapshot's.
func (o *Object) FirstVersion() uint64 {
	if o.Truncated == nil {
		return 1
	}
	return o.Snapshot.Version
}

// Entry is a session in a listing: what its key says.
type Entry struct {
	SessionID string    `json:"sessionId"`
	State     string    `json:"state"`
	EndedAt   time.Time `json:"endedAt"`
}

// Store is an opened archive. Safe for concurrent use.
type Store struct {
	bucket objstore.Bucket
	url    string // with any password removed, for messages
	// chunkBytes is the chunk size of the objects written (ChunkBytes when
	// 0; tests make it smaller).
	chunkBytes int
	// read counts the bytes read from objects (BytesRead).
	read atomic.Int64
}

// CheckURL reports a URL Open would refuse without reaching its bucket:
// one that does not parse, or whose scheme is not one of Schemes.
func CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("archive URL: %v", err)
	}
	for _, s := range Schemes {
		if u.Scheme == s {
			return nil
		}
	}
	return fmt.Errorf("archive URL %q: unknown scheme %q (one of %s)", u.Redacted(), u.Scheme, strings.Join(Schemes, ", "))
}

// Open opens the archive at rawURL and checks that its bucket can be
// reached. An unknown scheme, a scheme whose driver the program does not
// link, or an unreachable bucket is an error that says which.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	b, err := OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL)
	s := &Store{bucket: b, url: u.Redacted()}
	if err := s.Ping(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return s, nil
}

// Ping reports whether the bucket can be reached.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.bucket.Accessible(ctx)
	if err == nil && !ok {
		err = errors.New("the bucket does not exist")
	}
	if err != nil {
		return fmt.Errorf("archive %s is unreachable: %v", s.url, err)
	}
	return nil
}

// Close closes the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// String is the archive's URL without its password.
func (s *Store) String() string { return s.url }

const root = "sessions/"

// Key is the object key of a session that ended in state at endedAt.
func Key(id, state string, endedAt time.Time) string {
	return root + id + "/" + state + "/" + strconv.FormatInt(endedAt.UnixNano(), 10) + ".json"
}

// parseKey reads an Entry back from a key.
func parseKey(key string) (Entry, bool) {
	rest, ok := strings.CutPrefix(key, root)
	if !ok {
		return Entry{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || !fsm.ValidSessionID(parts[0]) {
		return Entry{}, false
	}
	ns, err := strconv.ParseInt(strings.TrimSuffix(parts[2], ".json"), 10, 64)
	if err != nil {
		return Entry{}, false
	}
	return Entry{SessionID: parts[0], State: parts[1], EndedAt: time.Unix(0, ns).UTC()}, true
}

// EndedAt is when a terminal session ended: when it entered its state.
func EndedAt(s *snapshot.Snapshot) time.Time { return time.Unix(0, s.StateEnteredAt).UTC() }

// List returns up to limit archived sessions whose id starts with prefix,
// in key order, after cursor (from a previous List; "" for the first
// page), and the cursor of the next page ("" after the last).
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("archive: limit must be positive")
	}
	var token []byte
	if cursor != "" {
		t, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(t) == 0 {
			return nil, "", ErrBadCursor
		}
		token = t
	}
	objs, next, err := s.bucket.List(ctx, root+prefix, token, limit)
	if err != nil {
		if cursor != "" && errors.Is(err, objstore.ErrBadToken) {
			return nil, "", ErrBadCursor
		}
		return nil, "", fmt.Errorf("archive %s: listing %q: %v", s.url, prefix, err)
	}
	out := make([]Entry, 0, len(objs))
	for _, o := range objs {
		if e, ok := parseKey(o.Key); ok {
			out = append(out, e)
		}
	}
	if len(next) == 0 {
		return out, "", nil
	}
	return out, base64.RawURLEncoding.EncodeToString(next), nil
}
