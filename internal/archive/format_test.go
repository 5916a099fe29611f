package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/correx/sessions/internal/archive/objstore"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/wire"
)

// history returns n entries at offsets first, first+2, ... (so that an
// offset between two entries can be asked for too).
func history(n int, first int64) []wire.HistoryEntry {
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	h := make([]wire.HistoryEntry, n)
	for i := range h {
		h[i] = wire.HistoryEntry{Version: uint64(i + 1), Position: wire.Position{Partition: 3, Offset: first + 2*int64(i)},
			EventID: fmt.Sprintf("01JDXKQ3Z1ABCDEF%010d", i), Type: "ModelRequested", OccurredAt: at.Add(time.Duration(i) * time.Millisecond),
			Outcome: "applied", From: "ACTIVE", To: "ACTIVE"}
	}
	return h
}

// buckets are the real buckets the read and write tests run against.
var buckets = []struct {
	scheme string
	url    func(t *testing.T) string
}{
	{"mem", func(*testing.T) string { return "mem://" }},
	{"file", func(t *testing.T) string { return "file://" + filepath.ToSlash(t.TempDir()) }},
}

func openStore(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// putWhole writes o as format 1 objects were written: one JSON document,
// application/json, under the same key.
func putWhole(t *testing.T, s *Store, o *Object) {
	t.Helper()
	b, err := Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	key := Key(o.Snapshot.ID, o.Snapshot.State.String(), EndedAt(o.Snapshot))
	writeObject(t, s.bucket, key, b)
}

// TestRangeReadsTouchOnlyWhatTheyNeed: of a format 2 object of many
// chunks, Head reads the tail and the head line, not the history, and a
// page reads the chunks that hold its entries and no other (counted in
// bytes read from the bucket). Paging through the whole history with the
// pages' own positions gives exactly the history written, each page's Seen
// and More saying where it is.
func TestRangeReadsTouchOnlyWhatTheyNeed(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.scheme, func(t *testing.T) {
			s := openStore(t, b.url(t))
			s.chunkBytes = 8 << 10
			ctx := context.Background()
			snap := terminal(t)[0]
			hist := history(20000, 100)
			if err := s.Put(ctx, &Object{Snapshot: snap, History: hist, ArchivedAt: time.Unix(5, 0)}); err != nil {
				t.Fatal(err)
			}
			key, size, err := s.find(ctx, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			before := s.BytesRead()
			h, err := s.Head(ctx, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			headRead := s.BytesRead() - before
			if h.Format != Format || h.Key != key || h.Size != size || h.Entries != int64(len(hist)) || len(h.chunks) < 100 {
				t.Fatalf("head: format %d, key %s, size %d, %d entries in %d chunks; want format %d, %s, %d, %d entries in 100 chunks or more",
					h.Format, h.Key, h.Size, h.Entries, len(h.chunks), Format, key, size, len(hist))
			}
			if h.Snapshot.ID != snap.ID || h.Snapshot.Digest != snap.Digest || !h.ArchivedAt.Equal(time.Unix(5, 0)) || !h.HistoryComplete() {
				t.Fatalf("head: %+v", h)
			}
			if max := int64(TailBytes) + h.chunks[0].At; headRead > max || headRead >= size/4 {
				t.Errorf("Head read %d bytes of a %d-byte object, want at most %d (the tail and the head line)", headRead, size, max)
			}

			// A page in the middle, from an offset between two entries.
			mid := hist[12345].Position.Offset - 1
			before = s.BytesRead()
			p, err := s.HistoryPage(ctx, h, mid, 50)
			if err != nil {
				t.Fatal(err)
			}
			pageRead := s.BytesRead() - before
			if !reflect.DeepEqual(p.Entries, hist[12345:12395]) || !p.More || p.Seen != 12395 {
				t.Fatalf("page from offset %d: %d entries from %+v, more %v, seen %d; want 50 from entry 12345, more, seen 12395",
					mid, len(p.Entries), p.Entries[0].Position, p.More, p.Seen)
			}
			var need int64
			for _, c := range h.chunks {
				if c.LastOffset >= hist[12345].Position.Offset && c.FirstOffset <= hist[12394].Position.Offset {
					need += c.Len
				}
			}
			if pageRead != need {
				t.Errorf("the page read %d bytes, want %d: the chunks holding its entries and nothing else", pageRead, need)
			}

			// Every page, each from the last one's position.
			var got []wire.HistoryEntry
			from := int64(-1)
			for pages := 0; ; pages++ {
				if pages > len(hist)/700+1 {
					t.Fatal("paging does not end")
				}
				p, err := s.HistoryPage(ctx, h, from, 700)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p.Entries...)
				if p.Seen != int64(len(got)) {
					t.Fatalf("page %d: seen %d after %d entries", pages, p.Seen, len(got))
				}
				if !p.More {
					break
				}
				from = p.Entries[len(p.Entries)-1].Position.Offset + 1
			}
			if !reflect.DeepEqual(got, hist) {
				t.Fatalf("paged %d entries, wrote %d (or they differ)", len(got), len(hist))
			}
			if p, err := s.HistoryPage(ctx, h, hist[len(hist)-1].Position.Offset+1, 10); err != nil || len(p.Entries) != 0 || p.More {
				t.Errorf("a page past the end: %+v, %v", p, err)
			}
			// Get still reads it whole.
			o, err := s.Get(ctx, snap.ID)
			if err != nil || !reflect.DeepEqual(o.History, hist) {
				t.Fatalf("Get: %v", err)
			}
		})
	}
}

// TestFormat1StillRead: objects written before format 2, one JSON
// document, are read by Get, Head and HistoryPage, small and large, whole
// or truncated.
func TestFormat1StillRead(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.scheme, func(t *testing.T) {
			s := openStore(t, b.url(t))
			ctx := context.Background()
			snaps := terminal(t)
			hist := history(3000, 7) // well past TailBytes
			big := &Object{Snapshot: snaps[0], History: hist, ArchivedAt: time.Unix(9, 0)}
			var small *Object
			for _, sn := range snaps[1:] {
				if sn.ID != snaps[0].ID {
					small = &Object{Snapshot: sn, History: []wire.HistoryEntry{}, ArchivedAt: time.Unix(9, 0), Truncated: &Truncation{EarliestOffset: 42}}
					break
				}
			}
			if small == nil {
				t.Fatal("the corpus has one terminal session only")
			}
			putWhole(t, s, big)
			putWhole(t, s, small)
			for _, o := range []*Object{big, small} {
				got, err := s.Get(ctx, o.Snapshot.ID)
				if err != nil || !reflect.DeepEqual(got.History, o.History) || got.HistoryComplete() != o.HistoryComplete() {
					t.Fatalf("Get %s: %v", o.Snapshot.ID, err)
				}
				h, err := s.Head(ctx, o.Snapshot.ID)
				if err != nil {
					t.Fatal(err)
				}
				if h.Format != 1 || h.Snapshot.Digest != o.Snapshot.Digest || h.Entries != int64(len(o.History)) ||
					h.HistoryComplete() != o.HistoryComplete() || h.FirstVersion() != o.FirstVersion() {
					t.Fatalf("Head %s: %+v", o.Snapshot.ID, h)
				}
				if o.Truncated != nil && h.Truncated.EarliestOffset != 42 {
					t.Fatalf("Head %s: truncation %+v", o.Snapshot.ID, h.Truncated)
				}
				before := s.BytesRead()
				p, err := s.HistoryPage(ctx, h, 8, 100)
				if err != nil {
					t.Fatal(err)
				}
				if s.BytesRead() != before {
					t.Errorf("a page of a format 1 head read the object again")
				}
				want := o.History[min(1, len(o.History)):min(101, len(o.History))]
				if len(want) == 0 {
					want = p.Entries[:0:0]
				}
				if !reflect.DeepEqual(p.Entries, want) || p.More != (len(o.History) > 101) {
					t.Fatalf("page of %s: %d entries, more %v", o.Snapshot.ID, len(p.Entries), p.More)
				}
			}
		})
	}
}

// TestAbortedWriteLeavesNoObject: a PutStream that fails midway, past
// several chunks (its entries' producer fails, or its context is
// cancelled), leaves no object, and an object written before under the
// key stays as it was.
func TestAbortedWriteLeavesNoObject(t *testing.T) {
	for _, b := range buckets {
		t.Run(b.scheme, func(t *testing.T) {
			url := b.url(t)
			s := openStore(t, url)
			s.chunkBytes = 4 << 10
			snap := terminal(t)[0]
			hist := history(5000, 0)
			failing := func(after int, fail func() error) Entries {
				return func(yield func(wire.HistoryEntry) error) error {
					for i, e := range hist {
						if i == after {
							if err := fail(); err != nil {
								return err
							}
						}
						if err := yield(e); err != nil {
							return err
						}
					}
					return nil
				}
			}
			boom := errors.New("the log read failed")
			if err := s.PutStream(context.Background(), &Object{Snapshot: snap, ArchivedAt: time.Now()},
				failing(4000, func() error { return boom })); !errors.Is(err, boom) {
				t.Fatalf("PutStream with a failing producer: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			err := s.PutStream(ctx, &Object{Snapshot: snap, ArchivedAt: time.Now()}, failing(4000, func() error { cancel(); return nil }))
			if err == nil {
				t.Fatal("PutStream cancelled midway returned nil")
			}
			if _, err := s.Get(context.Background(), snap.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after aborted writes, Get: %v, want ErrNotFound", err)
			}
			if l, _, err := s.List(context.Background(), "", "", 10); err != nil || len(l) != 0 {
				t.Fatalf("after aborted writes, the listing: %v %v", l, err)
			}
			if fb, ok := s.bucket.(*objstore.File); ok {
				dir := fb.Dir()
				var files []string
				_ = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
					if err == nil && !fi.IsDir() {
						files = append(files, path)
					}
					return nil
				})
				if len(files) != 0 {
					t.Errorf("files left in the bucket's directory: %v", files)
				}
			}

			// Over an object already there, an aborted rewrite leaves it.
			if err := s.Put(context.Background(), &Object{Snapshot: snap, History: hist[:10], ArchivedAt: time.Unix(1, 0)}); err != nil {
				t.Fatal(err)
			}
			if err := s.PutStream(context.Background(), &Object{Snapshot: snap, ArchivedAt: time.Now()},
				failing(4000, func() error { return boom })); !errors.Is(err, boom) {
				t.Fatalf("PutStream with a failing producer: %v", err)
			}
			o, err := s.Get(context.Background(), snap.ID)
			if err != nil || !reflect.DeepEqual(o.History, hist[:10]) || !o.ArchivedAt.Equal(time.Unix(1, 0)) {
				t.Fatalf("the object before the aborted rewrite: %v", err)
			}
		})
	}
}

// TestPutStreamRefusesDisorder: entries whose offsets go back are refused,
// and nothing is written, since pages are found by offset.
func TestPutStreamRefusesDisorder(t *testing.T) {
	s := openStore(t, "mem://")
	snap := terminal(t)[0]
	h := history(3, 10)
	h[2].Position.Offset = 11
	if err := s.Put(context.Background(), &Object{Snapshot: snap, History: h, ArchivedAt: time.Now()}); !errors.Is(err, errFormat) {
		t.Fatalf("Put of a history out of order: %v", err)
	}
	if _, err := s.Get(context.Background(), snap.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
}

// TestTrailerIsFixedSize: the trailer takes TrailerLen bytes whatever its
// numbers, and reads back.
func TestTrailerIsFixedSize(t *testing.T) {
	for _, tr := range []trailer{{1, 1, 1}, {1 << 40, 1 << 50, 1 << 61}} {
		b := tr.append(nil)
		if len(b) != TrailerLen {
			t.Fatalf("%+v: %d bytes, want %d: %s", tr, len(b), TrailerLen, b)
		}
		size := tr.footer + tr.footerLen + int64(TrailerLen)
		got, ok, err := parseTrailer(b, size)
		if !ok || err != nil || got != tr {
			t.Fatalf("%+v read back as %+v, %v, %v", tr, got, ok, err)
		}
	}
}

// FuzzDecode: Decode never panics, whatever the bytes, and an object it
// reads as format 2 reads the same through Head's whole-object path;
// encoding what it read (format 1) and decoding that gives it back.
func FuzzDecode(f *testing.F) {
	snap := terminal(f)[0]
	s, err := Open(context.Background(), "mem://")
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	s.chunkBytes = 256
	for _, n := range []int{0, 1, 7} {
		o := &Object{Snapshot: snap, History: history(n, 3), ArchivedAt: time.Unix(3, 0)}
		if err := s.Put(context.Background(), o); err != nil {
			f.Fatal(err)
		}
		b, err := readAll(context.Background(), s.bucket, Key(snap.ID, snap.State.String(), EndedAt(snap)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		w, _ := Encode(o)
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := Decode(b)
		if err != nil {
			return
		}
		if o.Snapshot == nil {
			t.Fatal("decoded without a snapshot")
		}
		h, err := wholeHead("k", b)
		if err != nil || h.Entries != int64(len(o.History)) {
			t.Fatalf("Decode read %d entries, wholeHead %v", len(o.History), err)
		}
		w, err := Encode(o)
		if err != nil {
			return // a snapshot the JSON form does not take back
		}
		again, err := Decode(w)
		if err != nil || !reflect.DeepEqual(again.History, o.History) && len(o.History) > 0 {
			t.Fatalf("re-encoded: %v", err)
		}
	})
}

// TestDecodeBoundsEntriesByBytes: a footer that claims more entries than
// its chunks' bytes can hold is a format error, found before anything is
// allocated for them, not gigabytes of memory reserved for a history the
// object cannot contain.
func TestDecodeBoundsEntriesByBytes(t *testing.T) {
	s := openStore(t, "mem://")
	snap := terminal(t)[0]
	o := &Object{Snapshot: snap, History: history(1, 3), ArchivedAt: time.Unix(3, 0)}
	if err := s.Put(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	b, err := readAll(context.Background(), s.bucket, Key(snap.ID, snap.State.String(), EndedAt(snap)))
	if err != nil {
		t.Fatal(err)
	}
	tr, ok, err := parseTrailer(b, int64(len(b)))
	if !ok || err != nil {
		t.Fatalf("parseTrailer: %v %v", ok, err)
	}
	var f footerJSON
	if err := json.Unmarshal(b[tr.footer:tr.footer+tr.footerLen], &f); err != nil || len(f.Chunks) != 1 {
		t.Fatalf("footer: %v, %d chunks", err, len(f.Chunks))
	}
	const claimed = 1 << 24 // about 3 GB of entries, in a chunk of a few hundred bytes
	f.Entries, f.Chunks[0].Entries = claimed, claimed
	footer, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	footer = append(footer, '\n')
	forged := append(append([]byte{}, b[:tr.footer]...), footer...)
	forged = trailer{head: tr.head, footer: tr.footer, footerLen: int64(len(footer))}.append(forged)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Decode(forged)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errFormat) {
		t.Errorf("Decode of a footer claiming %d entries in %d bytes: %v, want a format error", claimed, f.Chunks[0].Len, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("Decode allocated %d MiB for an object of %d bytes", got>>20, len(forged))
	}
}
