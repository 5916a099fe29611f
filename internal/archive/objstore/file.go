package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// File is a file:// bucket: one file per object under a directory,
// at the key's path ('/' separating directories), as gocloud.dev's fileblob
// lays them out, so that an archive it wrote reads the same (its attribute
// sidecars, key.attrs, are left alone and never listed).
//
// An object is written to a temporary file beside its place (a name
// starting with '.' and ending in .tmp, never listed), which is fsynced,
// renamed into place, and then every directory from the object's up to the
// bucket's is fsynced: once Close returns, a crash loses neither the object
// nor the entries that name it, so the session may leave Redis. A write
// aborted (its context cancelled before Close) removes its temporary file.
type File struct {
	dir string // absolute
	// fsync flushes one file or directory to its disk (syncPath; tests
	// watch it).
	fsync func(path string) error
}

// Dir is the bucket's directory, made absolute.
func (b *File) Dir() string { return b.dir }

// tempSuffix and attrsSuffix end the names of files that are not objects.
const (
	tempSuffix  = ".tmp"
	attrsSuffix = ".attrs"
)

// OpenFile opens the file:// bucket u names: file:///abs/dir, or
// file://./rel/dir relative to the working directory. The directory need
// not exist yet; Accessible says whether it does.
func OpenFile(u *url.URL) (*File, error) {
	path := u.Path
	switch u.Host {
	case "", "localhost":
	case ".": // file://./dir: relative to the working directory
		path = strings.TrimPrefix(path, "/")
	default:
		return nil, fmt.Errorf("a file:// URL names a local directory, not one on host %q (file:///abs/dir, or file://./rel/dir)", u.Host)
	}
	if path == "" {
		return nil, errors.New("the file:// URL names no directory")
	}
	dir, err := filepath.Abs(filepath.FromSlash(path))
	if err != nil {
		return nil, err
	}
	return &File{dir: dir, fsync: syncPath}, nil
}

// path is the file of key, or an error for a key that is no file's name
// under the directory.
func (b *File) path(key string) (string, error) {
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." || strings.ContainsRune(part, os.PathSeparator) {
			return "", fmt.Errorf("key %q is not a path under the bucket", key)
		}
	}
	if strings.HasSuffix(key, tempSuffix) || strings.HasSuffix(key, attrsSuffix) {
		return "", fmt.Errorf("key %q ends in %s or %s, which name no object in a file:// bucket", key, tempSuffix, attrsSuffix)
	}
	return filepath.Join(b.dir, filepath.FromSlash(key)), nil
}

func (b *File) Accessible(context.Context) (bool, error) {
	fi, err := os.Stat(b.dir) // a missing directory says so: "stat /dir: no such file or directory"
	switch {
	case err != nil:
		return false, err
	case !fi.IsDir():
		return false, errors.New(b.dir + " is not a directory")
	}
	return true, nil
}

func (b *File) Close() error { return nil }

// List walks the directories the prefix can be in and sorts what it finds:
// the walk's order (by name within each directory) is not the keys' ('-'
// sorts before '/'), and the token is the last key of the page before.
func (b *File) List(ctx context.Context, prefix string, token []byte, limit int) ([]ObjectInfo, []byte, error) {
	root := b.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		root = filepath.Join(b.dir, filepath.FromSlash(prefix[:i]))
	}
	after := string(token)
	var objs []ObjectInfo
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll // nothing under the prefix
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, rerr := filepath.Rel(b.dir, path)
		if rerr != nil || rel == "." {
			return rerr
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Below a directory that does not start as the prefix does, no
			// key can.
			if dk := key + "/"; !strings.HasPrefix(dk, prefix) && !strings.HasPrefix(prefix, dk) {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !d.Type().IsRegular() || strings.HasSuffix(name, tempSuffix) || strings.HasSuffix(name, attrsSuffix) ||
			!strings.HasPrefix(key, prefix) || (after != "" && key <= after) {
			return nil
		}
		fi, ierr := d.Info()
		if errors.Is(ierr, fs.ErrNotExist) {
			return nil // replaced or removed since the directory was read
		}
		if ierr != nil {
			return ierr
		}
		objs = append(objs, ObjectInfo{Key: key, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return page(objs, limit)
}

func (b *File) NewRangeReader(_ context.Context, key string, off, n int64) (io.ReadCloser, int64, error) {
	path, err := b.path(key)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, ErrObjectNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	size := fi.Size()
	if off < 0 || off > size {
		f.Close()
		return nil, 0, fmt.Errorf("range from %d of an object of %d bytes", off, size)
	}
	if n < 0 || off+n > size {
		n = size - off
	}
	return readCloser{io.NewSectionReader(f, off, n), f}, size, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (b *File) NewWriter(ctx context.Context, key, _ string) (io.WriteCloser, error) {
	path, err := b.path(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return nil, err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(r[:])+tempSuffix)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, err
	}
	return &fileWriter{ctx: ctx, b: b, f: f, path: path}, nil
}

// fileWriter writes one object to its temporary file; Close puts it in
// place.
type fileWriter struct {
	ctx  context.Context
	b    *File
	f    *os.File
	path string
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.ctx.Err() != nil {
		return 0, context.Cause(w.ctx)
	}
	return w.f.Write(p)
}

func (w *fileWriter) Close() error {
	tmp := w.f.Name()
	err := w.ctx.Err()
	if err == nil {
		err = w.b.fsync(tmp)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.ctx.Err() // aborted while syncing: commit nothing
	}
	if err == nil {
		err = os.Rename(tmp, w.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if w.ctx.Err() != nil {
			return context.Cause(w.ctx)
		}
		return err
	}
	for dir := filepath.Dir(w.path); ; dir = filepath.Dir(dir) {
		if err := w.b.fsync(dir); err != nil {
			return err
		}
		if dir == w.b.dir || !strings.HasPrefix(dir, w.b.dir) || filepath.Dir(dir) == dir {
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
