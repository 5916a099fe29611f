package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/correx/sessions/pkg/wire"
)

// Entries produces a session's history entries, in version order, by
// calling yield once per entry; it stops at yield's first error and
// returns it. PutStream takes one, so that a writer never needs a whole
// history in memory.
type Entries func(yield func(wire.HistoryEntry) error) error

// Put writes the object of a terminal session, in Format 2: PutStream over
// o.History. Writing it again is harmless: the key is a function of the
// snapshot.
func (s *Store) Put(ctx context.Context, o *Object) error {
	c := *o
	c.History = nil
	return s.putStream(ctx, &c, historyOf(o.History), 0)
}

// historyOf produces the entries of a history held in memory.
func historyOf(h []wire.HistoryEntry) Entries {
	return func(yield func(wire.HistoryEntry) error) error {
		for _, e := range h {
			if err := yield(e); err != nil {
				return err
			}
		}
		return nil
	}
}

// PutStream writes the object of a terminal session as Put does, with the
// history produced by each instead of o.History, which must be nil. The
// object is written as each produces the entries: every chunk, once
// full, goes to the bucket, and only the chunk being filled and the
// footer's index are held, so that memory does not grow with the history.
// Until PutStream returns nil no object is visible under the key (or the
// one written before stays): an error from each, from the bucket, or ctx
// done aborts the write. Entries whose offsets decrease are refused
// (errFormat): a history page is found by offset.
func (s *Store) PutStream(ctx context.Context, o *Object, each Entries) error {
	if o.History != nil {
		return fmt.Errorf("%w: PutStream takes the history from each, not from the object", errFormat)
	}
	return s.putStream(ctx, o, each, 0)
}

// putStream is PutStream, where every call that hands the bucket bytes
// (a chunk, the footer, the close that commits the object, the file://
// sync) must return within stall when it is positive; past it the write is
// aborted with errStalled. Time spent in each, producing the entries,
// does not count: a slow log read is not a slow archive.
func (s *Store) putStream(ctx context.Context, o *Object, each Entries, stall time.Duration) error {
	if o.Snapshot == nil || !o.Snapshot.Terminal() {
		return fmt.Errorf("%w: only a terminal session is archived", errFormat)
	}
	head, err := encodeHead(o)
	if err != nil {
		return fmt.Errorf("%w: %v", errFormat, err)
	}
	key := Key(o.Snapshot.ID, o.Snapshot.State.String(), EndedAt(o.Snapshot))
	// Cancelling wctx before Close is what aborts a Bucket's writer: the
	// object is then never committed (file:// removes its temporary file,
	// s3 aborts the multipart upload).
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	guard := func(f func() error) error {
		if stall <= 0 {
			return f()
		}
		t := time.AfterFunc(stall, func() { cancel(errStalled) })
		err := f()
		t.Stop()
		return err
	}
	failed := func(what string, err error) error {
		if errors.Is(err, errFormat) {
			return err
		}
		if errors.Is(context.Cause(wctx), errStalled) {
			return fmt.Errorf("archive %s: %s %s: %w (%v)", s.url, what, key, errStalled, err)
		}
		return fmt.Errorf("archive %s: %s %s: %v", s.url, what, key, err)
	}
	w, err := s.bucket.NewWriter(wctx, key, ContentType)
	if err != nil {
		return failed("writing", err)
	}
	ow := &objectWriter{w: w, guard: guard, limit: s.chunkBytes}
	if ow.limit <= 0 {
		ow.limit = ChunkBytes
	}
	ow.enc = json.NewEncoder(&ow.chunk)
	abort := func(err error) error {
		cancel(err)
		_ = w.Close() // with wctx cancelled: nothing is committed
		return err
	}
	if err := ow.write(head); err != nil {
		return abort(failed("writing", err))
	}
	ow.at = int64(len(head))
	var werr error // the bucket's, as opposed to each's
	err = each(func(e wire.HistoryEntry) error {
		if werr = ow.add(e); werr != nil {
			return werr
		}
		return nil
	})
	switch {
	case werr != nil:
		return abort(failed("writing", werr))
	case err != nil:
		return abort(err)
	}
	if err := ow.finish(int64(len(head))); err != nil {
		return abort(failed("writing", err))
	}
	if err := guard(w.Close); err != nil {
		return failed("writing", err)
	}
	return nil
}

// objectWriter encodes a format 2 object's history into chunks and its
// footer, writing each chunk as it fills. Not safe for concurrent use.
type objectWriter struct {
	w     io.Writer
	guard func(func() error) error
	limit int

	chunk   bytes.Buffer
	enc     *json.Encoder // into chunk
	cur     chunkJSON     // the chunk being filled
	chunks  []chunkJSON
	entries int64
	at      int64 // where the chunk being filled starts in the object
	last    int64 // the last entry's offset
}

func (ow *objectWriter) write(b []byte) error {
	return ow.guard(func() error { _, err := ow.w.Write(b); return err })
}

// add encodes e into the current chunk, and writes the chunk once full.
func (ow *objectWriter) add(e wire.HistoryEntry) error {
	if ow.entries > 0 && e.Position.Offset < ow.last {
		return fmt.Errorf("%w: history entry at offset %d after one at %d: the history must be in the log's order",
			errFormat, e.Position.Offset, ow.last)
	}
	if ow.cur.Entries == 0 {
		ow.cur = chunkJSON{At: ow.at, FirstOffset: e.Position.Offset, FirstVersion: e.Version}
	}
	if err := ow.enc.Encode(e); err != nil {
		return fmt.Errorf("%w: %v", errFormat, err)
	}
	ow.cur.Entries++
	ow.cur.LastOffset = e.Position.Offset
	ow.entries++
	ow.last = e.Position.Offset
	if ow.chunk.Len() >= ow.limit {
		return ow.flush()
	}
	return nil
}

// flush writes the current chunk, if it holds an entry.
func (ow *objectWriter) flush() error {
	if ow.cur.Entries == 0 {
		return nil
	}
	b := ow.chunk.Bytes()
	ow.cur.Len = int64(len(b))
	ow.cur.CRC = crc32.Checksum(b, castagnoli)
	if err := ow.write(b); err != nil {
		return err
	}
	ow.chunks = append(ow.chunks, ow.cur)
	ow.at += ow.cur.Len
	ow.cur = chunkJSON{}
	ow.chunk.Reset()
	return nil
}

// finish writes the last chunk, the footer and the trailer.
func (ow *objectWriter) finish(headLen int64) error {
	if err := ow.flush(); err != nil {
		return err
	}
	chunks := ow.chunks
	if chunks == nil {
		chunks = []chunkJSON{}
	}
	footer, err := json.Marshal(footerJSON{Entries: ow.entries, Chunks: chunks})
	if err != nil {
		return err
	}
	footer = append(footer, '\n')
	t := trailer{head: headLen, footer: ow.at, footerLen: int64(len(footer))}
	return ow.write(t.append(footer))
}
