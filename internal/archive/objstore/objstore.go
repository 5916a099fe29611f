// Package objstore owns the object stores the archive (internal/archive)
// keeps closed sessions in: what the archive needs of one (Bucket: keys in
// order, objects written whole or not at all, read by range), the file://
// and mem:// buckets (File, Mem), and the drivers of the other schemes by
// scheme (Register, Open).
//
// It links the standard library only. The s3:// and gs:// buckets, through
// gocloud.dev/blob and the AWS and Google Cloud SDKs, come from
// internal/archive/cloudblob, which registers them when the service
// binaries import it; a program that does not (pkg/testkit, the devstack)
// opens file:// and mem:// only, and links none of it.
package objstore

import (
	"context"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Bucket is an object store. Safe for concurrent use.
type Bucket interface {
	// List returns up to limit objects whose keys start with prefix, in
	// key order, from the page that token names (nil for the first), and
	// the token of the next page (nil after the last). A token the bucket
	// did not give may be ErrBadToken.
	List(ctx context.Context, prefix string, token []byte, limit int) (objs []ObjectInfo, next []byte, err error)
	// NewWriter starts writing the object at key. Nothing of it is
	// visible until Close returns nil, and then all of it is, replacing
	// any object that was there; cancelling ctx before Close aborts the
	// write, and Close then commits nothing.
	NewWriter(ctx context.Context, key, contentType string) (io.WriteCloser, error)
	// NewRangeReader reads n bytes of the object at key from off (to its
	// end when n < 0), and says how long the whole object is. An object
	// that does not exist is ErrObjectNotFound.
	NewRangeReader(ctx context.Context, key string, off, n int64) (r io.ReadCloser, size int64, err error)
	// Accessible reports whether the bucket exists and can be reached.
	Accessible(ctx context.Context) (bool, error)
	Close() error
}

// ObjectInfo is an object in a listing.
type ObjectInfo struct {
	Key  string
	Size int64
}

var (
	// ErrObjectNotFound is a Bucket's answer for a key that names no
	// object.
	ErrObjectNotFound = errors.New("no such object")
	// ErrBadToken is a Bucket's answer for a page token it did not give.
	ErrBadToken = errors.New("bad page token")
)

// WriteBuffer is the writer's buffering in a bucket that uploads in parts:
// the s3:// driver (internal/archive/cloudblob) uploads an object of more
// than one buffer in parts of WriteBuffer (5 MiB, S3's smallest part), one
// part at a time, so that a write holds at most WriteBuffer beside what
// the writer holds itself, whatever the object's length. File and Mem
// write as they are given (Mem keeps the object, for tests).
const WriteBuffer = 5 << 20

// OpenFunc opens the bucket a URL names.
type OpenFunc func(ctx context.Context, u *url.URL) (Bucket, error)

// drivers are the schemes a program can open, by scheme.
var drivers = struct {
	sync.RWMutex
	open map[string]OpenFunc
}{open: map[string]OpenFunc{
	"file": func(_ context.Context, u *url.URL) (Bucket, error) { return OpenFile(u) },
	"mem":  func(context.Context, *url.URL) (Bucket, error) { return NewMem(), nil },
}}

// Register makes Open open URLs of scheme with open. Registering a scheme
// again replaces its driver.
func Register(scheme string, open OpenFunc) {
	drivers.Lock()
	defer drivers.Unlock()
	drivers.open[scheme] = open
}

// Driver is the driver of scheme, or nil when the program links none.
func Driver(scheme string) OpenFunc {
	drivers.RLock()
	defer drivers.RUnlock()
	return drivers.open[scheme]
}

// page is the first limit of objs in key order, and the token of the page
// after: its last key, for File and Mem, whose listings start after the
// token's key.
func page(objs []ObjectInfo, limit int) ([]ObjectInfo, []byte, error) {
	slices.SortFunc(objs, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	if len(objs) <= limit {
		return objs, nil, nil
	}
	objs = objs[:limit]
	return objs, []byte(objs[limit-1].Key), nil
}
