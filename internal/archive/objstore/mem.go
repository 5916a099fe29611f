package objstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Mem is a mem:// bucket: the objects in a map, gone with the
// bucket. Every Open of mem:// is a new, empty bucket.
type Mem struct {
	mu   sync.RWMutex
	objs map[string][]byte // never changed once stored: a write stores a new slice
}

// NewMem returns a new, empty mem:// bucket.
func NewMem() *Mem { return &Mem{objs: map[string][]byte{}} }

func (b *Mem) Accessible(context.Context) (bool, error) { return true, nil }
func (b *Mem) Close() error                             { return nil }

func (b *Mem) List(_ context.Context, prefix string, token []byte, limit int) ([]ObjectInfo, []byte, error) {
	after := string(token)
	b.mu.RLock()
	var objs []ObjectInfo
	for k, v := range b.objs {
		if strings.HasPrefix(k, prefix) && (after == "" || k > after) {
			objs = append(objs, ObjectInfo{Key: k, Size: int64(len(v))})
		}
	}
	b.mu.RUnlock()
	return page(objs, limit)
}

func (b *Mem) NewRangeReader(_ context.Context, key string, off, n int64) (io.ReadCloser, int64, error) {
	b.mu.RLock()
	v, ok := b.objs[key]
	b.mu.RUnlock()
	if !ok {
		return nil, 0, ErrObjectNotFound
	}
	size := int64(len(v))
	if off < 0 || off > size {
		return nil, 0, fmt.Errorf("range from %d of an object of %d bytes", off, size)
	}
	if n < 0 || off+n > size {
		n = size - off
	}
	return io.NopCloser(bytes.NewReader(v[off : off+n])), size, nil
}

func (b *Mem) NewWriter(ctx context.Context, key, _ string) (io.WriteCloser, error) {
	return &memWriter{ctx: ctx, b: b, key: key}, nil
}

type memWriter struct {
	ctx context.Context
	b   *Mem
	key string
	buf bytes.Buffer
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.ctx.Err() != nil {
		return 0, context.Cause(w.ctx)
	}
	return w.buf.Write(p)
}

func (w *memWriter) Close() error {
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	w.b.mu.Lock()
	w.b.objs[w.key] = bytes.Clone(w.buf.Bytes())
	w.b.mu.Unlock()
	return nil
}
