package query

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"

	"github.com/correx/sessions/pkg/snapshot"
)

// Watch cursors. A position in the change feed is, per partition, the next
// offset to read; every offset moves with every tenant's traffic, so a
// cursor in the clear (as the first format was: base64url of the version 1,
// the partition count and one uvarint per partition) tells a tenant how busy
// the others are. A cursor is therefore sealed (AES-256-GCM):
//
//	base64url( 2 | nonce (12 bytes) | seal( uvarint partitions | 8-byte big-endian offset per partition ) )
//
// The version byte is the additional data. Offsets have a fixed width, so
// not even the length of a cursor moves with the offsets; it depends only on
// the partition count. The key comes from WatchOptions.CursorKey (from
// CORREX_WATCH_CURSOR_KEY_FILE, the same on every replica, so that cursors
// survive restarts and move between replicas), or is drawn at random when
// the process starts. A cursor that does not open with the key (issued with
// another key, altered, forged) or in the first format cannot be resumed
// from: 410, like a cursor older than the retention.
const (
	cursorVersion1 = 1 // offsets in the clear, no longer accepted
	cursorVersion  = 2
	cursorNonce    = 12
	// maxCursorPartitions bounds the partitions a cursor may name, and
	// maxCursorChars the cursor before it is decoded (4096 partitions of
	// 8 bytes, sealed, in base64).
	maxCursorPartitions = 4096
	maxCursorChars      = 44 << 10
)

// cursorKeyLabel separates the cursor key from any other use of the same
// secret.
const cursorKeyLabel = "correx-sessions watch cursor v2\x00"

// errCursorForeign is returned by DecodeCursor for a cursor this process
// cannot open: the first format, another key, or altered (410).
var errCursorForeign = errors.New("a cursor this service cannot resume from")

// cursorSealer seals and opens cursors; safe for concurrent use.
type cursorSealer struct{ aead cipher.AEAD }

// newCursorSealer derives the watch cursor key from secret, or draws one at
// random when secret is empty.
func newCursorSealer(secret []byte) cursorSealer { return newSealer(cursorKeyLabel, secret) }

// newSealer derives a key for the use label names from secret (so that one
// secret seals watch and history cursors with different keys), or draws one
// at random when secret is empty.
func newSealer(label string, secret []byte) cursorSealer {
	var key [32]byte
	if len(secret) == 0 {
		_, _ = rand.Read(key[:]) // never fails (crypto/rand)
	} else {
		key = sha256.Sum256(append([]byte(label), secret...))
	}
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return cursorSealer{aead: aead}
}

// EncodeCursor returns the sealed cursor of a position in the change feed:
// per partition of the changes topic, the next offset to read.
func (w *Watcher) EncodeCursor(next []int64) string {
	plain := make([]byte, 0, binary.MaxVarintLen16+8*len(next))
	plain = binary.AppendUvarint(plain, uint64(len(next)))
	for _, o := range next {
		plain = binary.BigEndian.AppendUint64(plain, uint64(max(o, 0)))
	}
	b := make([]byte, 1+cursorNonce, 1+cursorNonce+len(plain)+w.cursors.aead.Overhead())
	b[0] = cursorVersion
	_, _ = rand.Read(b[1 : 1+cursorNonce])
	b = w.cursors.aead.Seal(b, b[1:1+cursorNonce], plain, b[:1])
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor opens a cursor written by EncodeCursor: snapshot.ErrBadCursor
// (as for the listings' cursors, 400) for a string that is no cursor,
// errCursorForeign (410) for one it cannot open.
func (w *Watcher) DecodeCursor(s string) ([]int64, error) {
	if len(s) == 0 || len(s) > maxCursorChars {
		return nil, snapshot.ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 {
		return nil, snapshot.ErrBadCursor
	}
	switch b[0] {
	case cursorVersion1:
		return nil, errCursorForeign
	case cursorVersion:
	default:
		return nil, snapshot.ErrBadCursor
	}
	if len(b) < 1+cursorNonce+w.cursors.aead.Overhead()+1 {
		return nil, snapshot.ErrBadCursor
	}
	plain, err := w.cursors.aead.Open(nil, b[1:1+cursorNonce], b[1+cursorNonce:], b[:1])
	if err != nil {
		return nil, errCursorForeign
	}
	n, k := binary.Uvarint(plain)
	if k <= 0 || n == 0 || n > maxCursorPartitions || uint64(len(plain)-k) != 8*n {
		return nil, snapshot.ErrBadCursor // sealed by this key, so never seen; kept for safety
	}
	plain = plain[k:]
	out := make([]int64, n)
	for i := range out {
		o := binary.BigEndian.Uint64(plain[8*i:])
		if o > 1<<63-1 {
			return nil, snapshot.ErrBadCursor
		}
		out[i] = int64(o)
	}
	return out, nil
}

// seal returns base64url( version | nonce | seal(plain) ), the version
// byte as the additional data.
func (c cursorSealer) seal(version byte, plain []byte) string {
	b := make([]byte, 1+cursorNonce, 1+cursorNonce+len(plain)+c.aead.Overhead())
	b[0] = version
	_, _ = rand.Read(b[1 : 1+cursorNonce])
	b = c.aead.Seal(b, b[1:1+cursorNonce], plain, b[:1])
	return base64.RawURLEncoding.EncodeToString(b)
}

// open returns what seal sealed with version: snapshot.ErrBadCursor for a
// string that is no such cursor, errCursorForeign for one sealed with
// another key or altered.
func (c cursorSealer) open(version byte, s string, maxChars int) ([]byte, error) {
	if len(s) == 0 || len(s) > maxChars {
		return nil, snapshot.ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+cursorNonce+c.aead.Overhead()+1 || b[0] != version {
		return nil, snapshot.ErrBadCursor
	}
	plain, err := c.aead.Open(nil, b[1:1+cursorNonce], b[1+cursorNonce:], b[:1])
	if err != nil {
		return nil, errCursorForeign
	}
	return plain, nil
}
