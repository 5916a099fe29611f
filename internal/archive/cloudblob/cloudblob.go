// Package cloudblob registers the archive's cloud buckets with
// internal/archive/objstore: s3:// (AWS S3 and any S3-compatible store) and gs://
// (Google Cloud Storage), both through gocloud.dev/blob and its drivers.
// The service binaries that open an archive (cmd/projector, cmd/query)
// import it for that effect alone:
//
//	import _ "github.com/correx/sessions/internal/archive/cloudblob"
//
// internal/archive itself implements file:// and mem:// and links no
// gocloud.dev, so that a program which archives to a directory or to memory
// (pkg/testkit, the devstack) links no cloud SDK, nor the gRPC that
// gocloud.dev's errors bring: the AWS and Google Cloud SDKs and gRPC are
// several hundred packages. archive.Open names this package when a URL's
// scheme needs a driver the program does not link.
package cloudblob

import (
	"context"
	"io"
	"net/url"

	"github.com/correx/sessions/internal/archive/objstore"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/gcsblob" // gs://
	_ "gocloud.dev/blob/s3blob"  // s3://
	"gocloud.dev/gcerrors"
)

func init() {
	objstore.Register("s3", open)
	objstore.Register("gs", open)
}

func open(ctx context.Context, u *url.URL) (objstore.Bucket, error) {
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, err
	}
	return bucket{b}, nil
}

// bucket is an objstore.Bucket over a gocloud.dev bucket.
type bucket struct{ b *blob.Bucket }

func (c bucket) Accessible(ctx context.Context) (bool, error) { return c.b.IsAccessible(ctx) }
func (c bucket) Close() error                                 { return c.b.Close() }

func (c bucket) List(ctx context.Context, prefix string, token []byte, limit int) ([]objstore.ObjectInfo, []byte, error) {
	t := blob.FirstPageToken
	if token != nil {
		t = token
	}
	objs, next, err := c.b.ListPage(ctx, t, limit, &blob.ListOptions{Prefix: prefix})
	if err != nil {
		if token != nil && gcerrors.Code(err) == gcerrors.InvalidArgument {
			return nil, nil, objstore.ErrBadToken
		}
		return nil, nil, err
	}
	out := make([]objstore.ObjectInfo, len(objs))
	for i, o := range objs {
		out[i] = objstore.ObjectInfo{Key: o.Key, Size: o.Size}
	}
	if len(next) == 0 || string(next) == string(blob.FirstPageToken) {
		next = nil
	}
	return out, next, nil
}

func (c bucket) NewRangeReader(ctx context.Context, key string, off, n int64) (io.ReadCloser, int64, error) {
	r, err := c.b.NewRangeReader(ctx, key, off, n, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, 0, objstore.ErrObjectNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	return r, r.Size(), nil
}

// NewWriter uploads in parts of objstore.WriteBuffer, one at a time (the
// s3:// driver; gs:// ignores both).
func (c bucket) NewWriter(ctx context.Context, key, contentType string) (io.WriteCloser, error) {
	return c.b.NewWriter(ctx, key, &blob.WriterOptions{ContentType: contentType, BufferSize: objstore.WriteBuffer, MaxConcurrency: 1})
}
