// Package archive owns where closed sessions go when they leave Redis
// (docs/retention.md, DESIGN section 12.4): one object per session in a
// bucket opened through gocloud.dev/blob (file:// for make run, s3:// for
// any S3-compatible store, gs://, and mem:// in tests), its format, and
// the listing of archived sessions by id prefix.
//
// This package links the file:// and mem:// drivers only. The s3:// and
// gs:// drivers, and with them the AWS and Google Cloud SDKs, come from
// internal/archive/cloudblob, which the service binaries import; a program
// that does not (pkg/testkit) gets a clear error from Open for those URLs.
//
// An object holds the session's final snapshot (the stored JSON form,
// snapshot.EncodeJSON) and its whole history (wire.HistoryEntry, as GET
// /v1/sessions/{id}/history answers it), or, when the events log no longer
// held the session's first events when it was archived, says so
// ("historyComplete": false, the "firstVersion" it holds and the log's
// "earliestOffset" then; DESIGN 13.2). Its key carries what a listing
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
	_ "gocloud.dev/blob/memblob"  // mem://
	"gocloud.dev/gcerrors"
)

// Format is the version of the objects Put writes.
const Format = 1

// Schemes are the URL schemes Open accepts.
var Schemes = []string{"file", "s3", "gs", "mem"}

// errFormat wraps what is wrong with an object itself, not with the
// bucket.
var errFormat = errors.New("archive: object")

// ErrNotFound is returned by Get for a session that is not archived.
var ErrNotFound = errors.New("archive: session not archived")

// Object is one archived session.
type Object struct {
	Snapshot   *snapshot.Snapshot
	History    []wire.HistoryEntry
	ArchivedAt time.Time
	// Truncated, when set, says that the events log no longer held the
	// session's first events when it was archived (DESIGN 13.2): History
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

// objectJSON is an object's bytes. historyComplete is written always;
// an object written before it existed reads as complete.
type objectJSON struct {
	Format          int                 `json:"format"`
	SessionID       string              `json:"sessionId"`
	ArchivedAt      time.Time           `json:"archivedAt"`
	HistoryComplete *bool               `json:"historyComplete,omitempty"`
	FirstVersion    uint64              `json:"firstVersion,omitempty"`
	EarliestOffset  *int64              `json:"earliestOffset,omitempty"`
	Snapshot        json.RawMessage     `json:"snapshot"`
	History         []wire.HistoryEntry `json:"history"`
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
	// root is dir made absolute, as the file:// driver names its files;
	// fsync flushes one file or directory to its disk (syncPath; tests
	// watch it).
	root  string
	fsync func(path string) error
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
	if !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
		return nil, fmt.Errorf("archive URL %q: this program does not link the %s:// driver (a blank import of internal/archive/cloudblob registers it)", u.Redacted(), u.Scheme)
	}
	b, err := blob.OpenBucket(ctx, rawURL)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %v", u.Redacted(), err)
	}
	s := &Store{bucket: b, url: u.Redacted(), fsync: syncPath}
	if u.Scheme == "file" {
		s.dir = filepath.FromSlash(u.Path)
		if s.root, err = filepath.Abs(s.dir); err != nil {
			b.Close()
			return nil, fmt.Errorf("archive %s: %v", u.Redacted(), err)
		}
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
	v := objectJSON{Format: Format, SessionID: o.Snapshot.ID, ArchivedAt: o.ArchivedAt.UTC(), Snapshot: snap, History: h}
	complete := o.HistoryComplete()
	v.HistoryComplete = &complete
	if !complete {
		v.FirstVersion, v.EarliestOffset = o.FirstVersion(), &o.Truncated.EarliestOffset
	}
	return json.Marshal(v)
}

// Decode reads an object's bytes.
func Decode(b []byte) (*Object, error) {
	var v objectJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", errFormat, err)
	}
	if v.Format != Format {
		return nil, fmt.Errorf("%w format %d, this build reads %d", errFormat, v.Format, Format)
	}
	var s snapshot.Snapshot
	if err := s.UnmarshalJSON(v.Snapshot); err != nil {
		return nil, fmt.Errorf("%w of %s: %v", errFormat, v.SessionID, err)
	}
	o := &Object{Snapshot: &s, History: v.History, ArchivedAt: v.ArchivedAt}
	if v.HistoryComplete != nil && !*v.HistoryComplete {
		o.Truncated = &Truncation{}
		if v.EarliestOffset != nil {
			o.Truncated.EarliestOffset = *v.EarliestOffset
		}
	}
	return o, nil
}

// Put writes the object of a terminal session. Writing it again is
// harmless: the key is a function of the snapshot.
func (s *Store) Put(ctx context.Context, o *Object) error {
	if o.Snapshot == nil || !o.Snapshot.Terminal() {
		return fmt.Errorf("%w: only a terminal session is archived", errFormat)
	}
	b, err := Encode(o)
	if err != nil {
		return fmt.Errorf("%w: %v", errFormat, err)
	}
	key := Key(o.Snapshot.ID, o.Snapshot.State.String(), EndedAt(o.Snapshot))
	if err := s.bucket.WriteAll(ctx, key, b, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("archive %s: writing %s: %v", s.url, key, err)
	}
	if s.dir != "" {
		if err := s.syncFile(ctx, key); err != nil {
			return fmt.Errorf("archive %s: syncing %s: %v", s.url, key, err)
		}
	}
	return nil
}

// syncFile makes a file:// write durable before Put returns, and so before
// the session leaves Redis. The file:// driver writes a temporary file,
// its attributes sidecar (key.attrs, which a read decodes whole when it
// exists) and renames the file into place, making the directories it
// needs, but fsyncs none of it: a crash could then lose an object whose
// session has already left Redis. So the object, its sidecar and every
// directory from the object's up to the bucket's (the rename's entry and
// those of the directories made) are fsynced. The driver escapes some keys
// into other file names, so the file is the one the driver itself opens
// for the key.
func (s *Store) syncFile(ctx context.Context, key string) error {
	var path string
	r, err := s.bucket.NewReader(ctx, key, &blob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
		var f *os.File
		if as(&f) {
			path = f.Name()
		}
		return nil
	}})
	if err != nil {
		return err
	}
	_ = r.Close()
	if path == "" {
		return errors.New("the file:// driver did not name the object's file")
	}
	if err := s.fsync(path); err != nil {
		return err
	}
	if err := s.fsync(path + ".attrs"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if err := s.fsync(dir); err != nil {
			return err
		}
		if dir == s.root || !strings.HasPrefix(dir, s.root) || filepath.Dir(dir) == dir {
			return nil
		}
	}
}

// syncPath fsyncs one file or directory.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
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

// Entries produces a session's history entries, in version order, by
// calling yield once per entry; it stops at yield's first error and
// returns it. PutStream takes one, so that a writer never needs a whole
// history in memory.
type Entries func(yield func(wire.HistoryEntry) error) error

// PutStream writes the object of a terminal session as Put does, with the
// history produced by each instead of o.History, which must be nil.
func (s *Store) PutStream(ctx context.Context, o *Object, each Entries) error {
	if o.History != nil {
		return fmt.Errorf("%w: PutStream takes the history from each, not from the object", errFormat)
	}
	c := *o
	if err := each(func(e wire.HistoryEntry) error { c.History = append(c.History, e); return nil }); err != nil {
		return err
	}
	return s.Put(ctx, &c)
}
