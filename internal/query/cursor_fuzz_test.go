package query

import (
	"encoding/base64"
	"errors"
	"slices"
	"testing"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/snapshot"
)

// FuzzDecodeCursor: DecodeCursor never panics and answers every string with
// offsets, snapshot.ErrBadCursor (400) or errCursorForeign (410); whatever
// it opens names 1 to maxCursorPartitions non-negative offsets; and a
// cursor EncodeCursor sealed opens to the offsets sealed, while the same
// bytes with one bit flipped never open.
func FuzzDecodeCursor(f *testing.F) {
	w := NewWatcher(kafka.Config{}, "events", WatchOptions{CursorKey: []byte("a fuzzing key of some length")})
	f.Add(w.EncodeCursor([]int64{0}))
	f.Add(w.EncodeCursor([]int64{5, 0, 1 << 40}))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte{1, 2, 3, 4}))
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := w.DecodeCursor(s)
		switch {
		case err == nil:
			if len(got) == 0 || len(got) > maxCursorPartitions || slices.ContainsFunc(got, func(o int64) bool { return o < 0 }) {
				t.Fatalf("DecodeCursor(%q) = %v", s, got)
			}
			// It opened, so it was sealed with the key: sealed again,
			// it opens to the same offsets.
			again, err := w.DecodeCursor(w.EncodeCursor(got))
			if err != nil || !slices.Equal(again, got) {
				t.Fatalf("re-sealed %v opens to %v, %v", got, again, err)
			}
			b, _ := base64.RawURLEncoding.DecodeString(s)
			b[len(b)-1] ^= 1
			if _, err := w.DecodeCursor(base64.RawURLEncoding.EncodeToString(b)); err == nil {
				t.Fatalf("a cursor with a bit flipped opened: %q", s)
			}
		case errors.Is(err, snapshot.ErrBadCursor), errors.Is(err, errCursorForeign):
		default:
			t.Fatalf("DecodeCursor(%q): unexpected error %v", s, err)
		}
	})
}
