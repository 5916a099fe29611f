package objstore

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileWriteIsSynced: a file:// write's Close returns only after the
// object (its temporary file, before it is renamed into place) and every
// directory from the object's up to the bucket's are fsynced, so that the
// archive may let the session leave Redis: a crash after Close cannot lose
// the object or the directory entries that name it.
func TestFileWriteIsSynced(t *testing.T) {
	root := t.TempDir()
	b, err := OpenFile(&url.URL{Scheme: "file", Path: filepath.ToSlash(root)})
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	b.fsync = func(path string) error {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		synced = append(synced, filepath.ToSlash(rel))
		return syncPath(path)
	}
	const key = "sessions/s-1/COMPLETED/17.json"
	w, err := b.NewWriter(context.Background(), key, "application/x-ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"sessions/s-1/COMPLETED", "sessions/s-1", "sessions", "."}
	if len(synced) != len(want)+1 || !strings.HasPrefix(synced[0], "sessions/s-1/COMPLETED/.17.json.") || !strings.HasSuffix(synced[0], tempSuffix) ||
		strings.Join(synced[1:], " ") != strings.Join(want, " ") {
		t.Errorf("synced %s\nwant   sessions/s-1/COMPLETED/.17.json.*%s %s", strings.Join(synced, " "), tempSuffix, strings.Join(want, " "))
	}
	r, size, err := b.NewRangeReader(context.Background(), key, 0, -1)
	if err != nil || size != 3 {
		t.Fatalf("read back: size %d, %v", size, err)
	}
	r.Close()
}

// TestFileRelativeURL: file://./dir names dir in the working directory.
func TestFileRelativeURL(t *testing.T) {
	u, err := url.Parse("file://./archive/x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenFile(u)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Abs(filepath.Join("archive", "x"))
	if b.Dir() != want {
		t.Errorf("Dir() = %q, want %q", b.Dir(), want)
	}
}
