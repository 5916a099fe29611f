package archive

import (
	"context"
	"testing"

	"github.com/correx/sessions/internal/archive/objstore"
)

// writeObject puts b at key as it is, as the archive did not write it (a
// format 1 object, a benchmark's fixture).
func writeObject(t testing.TB, bk objstore.Bucket, key string, b []byte) {
	t.Helper()
	w, err := bk.NewWriter(context.Background(), key, "application/json")
	if err == nil {
		_, err = w.Write(b)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
