// Package archive owns where closed sessions go when they leave Redis
// (docs/retention.md, DESIGN section 12.4): one object per session in a
// bucket opened through gocloud.dev/blob (file:// for make run, s3:// for
// any S3-compatible store, gs://, and mem:// in tests), its format, and
// the listing of archived sessions by id prefix.
//
// An object holds the session's final snapshot (the stored JSON form,
// snapshot.EncodeJSON) and its whole history (wire.HistoryEntry, as GET
// /v1/sessions/{id}/history answers it). Its key carries what a listing
// shows, so that listing reads no object:
//
//	sessions/<sessionId>/<STATE>/<endedAt, Unix nanoseconds>.json
//
// A session id never contains '/' (fsm.ValidSessionID), so the keys of one
// session are exactly those under "sessions/<sessionId>/". Writing the
// same session again (a sweep retried after a crash) writes the same key
// with the same bytes when nothing changed.
package archive

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/gcsblob"  // gs://
	_ "gocloud.dev/blob/memblob"  // mem://
	_ "gocloud.dev/blob/s3blob"   // s3://
	"gocloud.dev/gcerrors"
)

// Format is the version of the objects Put writes.
const Format = 1

// Schemes are the URL schemes Open accepts.
var Schemes = []string{"file", "s3", "gs", "mem"}

// ErrNotFound is returned by Get for a session that is not archived.
var ErrNotFound = errors.New("archive: session not archived")

// Object is one archived session.
type Object struct {
	Snapshot   *snapshot.Snapshot
	History    []wire.HistoryEntry
	ArchivedAt time.Time
}

// objectJSON is an object's bytes.
type objectJSON struct {
	Format     int                 `json:"format"`
	SessionID  string              `json:"sessionId"`
	ArchivedAt time.Time           `json:"archivedAt"`
	Snapshot   json.RawMessage     `json:"snapshot"`
	History    []wire.HistoryEntry `json:"history"`
}

// Entry is a session in a listing: what its key says.
type Entry struct {
	SessionID string    `json:"sessionId"`
	State     string    `json:"state"`
	EndedAt   time.Time `json:"endedAt"`
}

// Store is an opened archive. Safe for concurrent use.
type Store struct {
	bucket *blob.Bucket
	url    string // with any password removed, for messages
	dir    string // a file:// bucket's directory, which Ping checks too
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
// reached. An unknown scheme or an unreachable bucket is an error that
// says which.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL)
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %v", u.Redacted(), err)
	}
	s := &Store{bucket: b, url: u.Redacted()}
	if u.Scheme == "file" {
		s.dir = filepath.FromSlash(u.Path)
	}
	if err := s.Ping(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return s, nil
}

// Ping reports whether the bucket can be reached.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.bucket.IsAccessible(ctx)
	if err == nil && !ok {
		err = errors.New("the bucket does not exist")
	}
	if err == nil && s.dir != "" {
		// fileblob lists a directory that went away as an empty bucket.
		if fi, serr := os.Stat(s.dir); serr != nil {
			err = serr
		} else if !fi.IsDir() {
			err = errors.New(s.dir + " is not a directory")
		}
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

// Encode returns an object's bytes.
func Encode(o *Object) ([]byte, error) {
	snap, err := snapshot.EncodeJSON(o.Snapshot)
	if err != nil {
		return nil, err
	}
	h := o.History
	if h == nil {
		h = []wire.HistoryEntry{}
	}
	return json.Marshal(objectJSON{Format: Format, SessionID: o.Snapshot.ID, ArchivedAt: o.ArchivedAt.UTC(), Snapshot: snap, History: h})
}

// Decode reads an object's bytes.
func Decode(b []byte) (*Object, error) {
	var v objectJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("archive: object: %v", err)
	}
	if v.Format != Format {
		return nil, fmt.Errorf("archive: object format %d, this build reads %d", v.Format, Format)
	}
	var s snapshot.Snapshot
	if err := s.UnmarshalJSON(v.Snapshot); err != nil {
		return nil, fmt.Errorf("archive: object of %s: %v", v.SessionID, err)
	}
	return &Object{Snapshot: &s, History: v.History, ArchivedAt: v.ArchivedAt}, nil
}

// Put writes the object of a terminal session. Writing it again is
// harmless: the key is a function of the snapshot.
func (s *Store) Put(ctx context.Context, o *Object) error {
	if o.Snapshot == nil || !o.Snapshot.Terminal() {
		return errors.New("archive: only a terminal session is archived")
	}
	b, err := Encode(o)
	if err != nil {
		return err
	}
	key := Key(o.Snapshot.ID, o.Snapshot.State.String(), EndedAt(o.Snapshot))
	if err := s.bucket.WriteAll(ctx, key, b, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("archive %s: writing %s: %v", s.url, key, err)
	}
	return nil
}

// Get reads the archived object of session id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Object, error) {
	if !fsm.ValidSessionID(id) {
		return nil, ErrNotFound
	}
	objs, _, err := s.bucket.ListPage(ctx, blob.FirstPageToken, 2, &blob.ListOptions{Prefix: root + id + "/"})
	if err != nil {
		return nil, fmt.Errorf("archive %s: listing %s: %v", s.url, id, err)
	}
	for _, o := range objs {
		if _, ok := parseKey(o.Key); !ok {
			continue
		}
		b, err := s.bucket.ReadAll(ctx, o.Key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, ErrNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("archive %s: reading %s: %v", s.url, o.Key, err)
		}
		return Decode(b)
	}
	return nil, ErrNotFound
}

// List returns up to limit archived sessions whose id starts with prefix,
// in key order, after cursor (from a previous List; "" for the first
// page), and the cursor of the next page ("" after the last).
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]Entry, string, error) {
	if limit <= 0 {
		return nil, "", errors.New("archive: limit must be positive")
	}
	token := blob.FirstPageToken
	if cursor != "" {
		t, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(t) == 0 {
			return nil, "", ErrBadCursor
		}
		token = t
	}
	objs, next, err := s.bucket.ListPage(ctx, token, limit, &blob.ListOptions{Prefix: root + prefix})
	if err != nil {
		if cursor != "" && gcerrors.Code(err) == gcerrors.InvalidArgument {
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
	if len(next) == 0 || bytes.Equal(next, blob.FirstPageToken) {
		return out, "", nil
	}
	return out, base64.RawURLEncoding.EncodeToString(next), nil
}

// ErrBadCursor is returned by List for a cursor it did not make.
var ErrBadCursor = errors.New("archive: the cursor is not one this service made")
