package objstore

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob"
)

// buckets are the buckets this package implements.
func buckets(t *testing.T) map[string]Bucket {
	f, err := OpenFile(&url.URL{Scheme: "file", Path: filepath.ToSlash(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Bucket{"file": f, "mem": NewMem()}
}

func put(t *testing.T, b Bucket, key, body string) {
	t.Helper()
	w, err := b.NewWriter(context.Background(), key, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func listAll(t *testing.T, b Bucket, prefix string, limit int) (keys []string, pages int) {
	t.Helper()
	var token []byte
	for {
		objs, next, err := b.List(context.Background(), prefix, token, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) > limit {
			t.Fatalf("a page of %d objects, limit %d", len(objs), limit)
		}
		pages++
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		if next == nil {
			return keys, pages
		}
		token = next
	}
}

// TestListInKeyOrder: listings are in key order, page after page, also
// where a directory walk's order is not ("a-b/..." sorts before "a/..."
// though the walk visits "a" first), and only under the prefix.
func TestListInKeyOrder(t *testing.T) {
	keys := []string{"sessions/a/X/1.json", "sessions/a-b/X/1.json", "sessions/a.c/X/2.json", "sessions/a/Y/3.json", "sessions/b/X/1.json", "other/a/X/1.json"}
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			for _, k := range keys {
				put(t, b, k, k)
			}
			want := slices.Clone(keys[:5])
			slices.Sort(want)
			for _, limit := range []int{1, 2, 5, 100} {
				got, pages := listAll(t, b, "sessions/", limit)
				if !slices.Equal(got, want) {
					t.Errorf("limit %d: %q\nwant %q", limit, got, want)
				}
				if wantPages := (len(want) + limit - 1) / limit; pages != wantPages && pages != wantPages+1 {
					t.Errorf("limit %d: %d pages", limit, pages)
				}
			}
			if got, _ := listAll(t, b, "sessions/a", 2); !slices.Equal(got, want[:4]) {
				t.Errorf("prefix sessions/a: %q, want %q", got, want[:4])
			}
			if got, _ := listAll(t, b, "sessions/a/", 10); !slices.Equal(got, []string{"sessions/a/X/1.json", "sessions/a/Y/3.json"}) {
				t.Errorf("prefix sessions/a/: %q", got)
			}
			if got, _ := listAll(t, b, "nothing/here/", 10); len(got) != 0 {
				t.Errorf("prefix nothing/here/: %q", got)
			}
		})
	}
}

// TestWriteReadAbort: a range read says the object's whole size; a
// missing key is ErrObjectNotFound; a write whose context ends before
// Close commits nothing and leaves an object already there as it was.
func TestWriteReadAbort(t *testing.T) {
	for name, b := range buckets(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const key = "sessions/s/COMPLETED/1.json"
			put(t, b, key, "0123456789")
			r, size, err := b.NewRangeReader(ctx, key, 3, 4)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r)
			r.Close()
			if string(got) != "3456" || size != 10 {
				t.Errorf("range 3+4: %q of %d, want \"3456\" of 10", got, size)
			}
			if _, _, err := b.NewRangeReader(ctx, "sessions/none/X/1.json", 0, -1); !errors.Is(err, ErrObjectNotFound) {
				t.Errorf("a missing key: %v, want ErrObjectNotFound", err)
			}
			for _, k := range []string{key, "sessions/new/COMPLETED/2.json"} {
				wctx, cancel := context.WithCancel(ctx)
				w, err := b.NewWriter(wctx, k, "text/plain")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(w, "partial")
				cancel()
				if err := w.Close(); err == nil {
					t.Errorf("%s: Close after the context ended succeeded", k)
				}
			}
			if keys, _ := listAll(t, b, "", 10); !slices.Equal(keys, []string{key}) {
				t.Errorf("after aborted writes: %q", keys)
			}
			r, _, err = b.NewRangeReader(ctx, key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ = io.ReadAll(r)
			r.Close()
			if string(got) != "0123456789" {
				t.Errorf("an aborted rewrite changed the object: %q", got)
			}
			if f, ok := b.(*File); ok {
				var files []string
				_ = filepath.Walk(f.Dir(), func(p string, fi os.FileInfo, err error) error {
					if err == nil && !fi.IsDir() {
						files = append(files, p)
					}
					return nil
				})
				if len(files) != 1 {
					t.Errorf("files in the directory: %q, want the object's only", files)
				}
			}
		})
	}
}

// TestFileReadsWhatFileblobWrote: an archive directory written through
// gocloud.dev's fileblob, as file:// archives were, lists and reads the
// same: its attribute sidecars (key.attrs) are not objects.
func TestFileReadsWhatFileblobWrote(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	old, err := blob.OpenBucket(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"sessions/acme:s-1/COMPLETED/5.json", "sessions/acme:s-1.x/FAILED/6.json"}
	for _, k := range keys {
		if err := old.WriteAll(ctx, k, []byte("object "+k), &blob.WriterOptions{ContentType: "application/x-ndjson"}); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(keys[0])+".attrs")); err != nil {
		t.Fatalf("fileblob wrote no sidecar, so this test shows nothing: %v", err)
	}
	b, err := OpenFile(&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(keys)) // "s-1.x/" before "s-1/"
	if got, _ := listAll(t, b, "sessions/", 10); !slices.Equal(got, want) {
		t.Errorf("listing: %q, want %q", got, want)
	}
	r, size, err := b.NewRangeReader(ctx, keys[1], 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "object "+keys[1] || size != int64(len(got)) {
		t.Errorf("read %q (%d bytes)", got, size)
	}
}

// TestFileRefusesKeysOutsideItsDirectory: no key names a file outside
// the bucket's directory, or one of its temporary files.
func TestFileRefusesKeysOutsideItsDirectory(t *testing.T) {
	b, err := OpenFile(&url.URL{Scheme: "file", Path: filepath.ToSlash(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"../x", "a/../../x", "/abs", "a//b", "a/./b", "a/b.tmp", "a/b.attrs", ""} {
		if _, err := b.NewWriter(context.Background(), k, ""); err == nil {
			t.Errorf("NewWriter(%q) succeeded", k)
		}
	}
}
