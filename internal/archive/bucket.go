package archive

import (
	"bytes"
	"context"
	"fmt"
	"net/url"

	"github.com/correx/sessions/internal/archive/objstore"
)

// OpenBucket opens the bucket at rawURL with the driver of its scheme
// (internal/archive/objstore). Open does, and then checks that it can be
// reached; tests and benchmarks use it to put objects the archive did not
// write (format 1 objects, as they were written).
func OpenBucket(ctx context.Context, rawURL string) (objstore.Bucket, error) {
	if err := CheckURL(rawURL); err != nil {
		return nil, err
	}
	u, _ := url.Parse(rawURL)
	open := objstore.Driver(u.Scheme)
	if open == nil {
		return nil, fmt.Errorf("archive URL %q: this program does not link the %s:// driver (a blank import of internal/archive/cloudblob registers it)", u.Redacted(), u.Scheme)
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %v", u.Redacted(), err)
	}
	return b, nil
}

// readAll reads the whole object at key.
func readAll(ctx context.Context, b objstore.Bucket, key string) ([]byte, error) {
	r, size, err := b.NewRangeReader(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	_, err = buf.ReadFrom(r)
	return buf.Bytes(), err
}
