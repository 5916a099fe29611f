package query

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
)

// watchStream writes one watch's events. It is used by one goroutine, the
// request's.
type watchStream struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	wt     *Watcher
	filter watchFilter
	sub    *subscriber
	next   []int64            // per partition, the next offset to write
	said   []int64            // the position of the last id written
	snap   *snapshot.Position // the snapshot written first, if any
	buf    []byte
	// granted, when set, tells whether the stream's token still grants
	// it, asked before each write: a token revoked by a reload of the
	// token file gets nothing more, even before the goroutine that ends
	// the stream on a reload has run.
	granted func() bool
}

// start writes the headers. The server's read deadline is lifted (a read
// deadline passing would cancel the request's context mid-stream) and each
// flush sets its own write deadline in place of the server's.
func (st *watchStream) start() {
	_ = st.rc.SetReadDeadline(time.Time{})
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	st.w.WriteHeader(http.StatusOK)
	st.buf = append(st.buf, ": watching\n\n"...)
	// Where the stream starts, as an id-only event: a client whose
	// connection drops before the first change resumes from here, not
	// from the end it would find on a new watch.
	st.progress()
	_ = st.flush()
}

// take moves the stream's position past ch and adds ch to the buffer if it
// is past the stream's position, passes the filter and, for a session's
// watch, is past its snapshot; it reports whether it did.
func (st *watchStream) take(ch *change) bool {
	if len(st.next) < int(ch.parts) {
		// Subscribed before the feed existed: the reader started at its
		// start, so the position grows with zeros.
		st.next = append(st.next, make([]int64, int(ch.parts)-len(st.next))...)
	}
	if int(ch.part) >= len(st.next) || ch.offset < st.next[ch.part] {
		return false
	}
	st.next[ch.part] = ch.offset + 1
	// The live queue holds only changes that match, but a catch-up reads
	// every change of the feed: the filter, which carries the token's own
	// prefix, decides here for both.
	if !ch.ok || !st.filter.match(&ch.c) {
		return false
	}
	if s := st.snap; s != nil && ch.c.Position.Partition == s.Partition && ch.c.Position.Offset <= s.Offset {
		return false
	}
	if ch.data == nil { // a catch-up's own change, written before its fetch is released
		ch.data = ch.wireBytes(false)
	}
	st.event("change", ch.data)
	return true
}

// advance moves the stream's position up to pos, where it is behind.
func (st *watchStream) advance(pos []int64) {
	if len(st.next) < len(pos) {
		st.next = append(st.next, make([]int64, len(pos)-len(st.next))...)
	}
	for p, o := range pos {
		st.next[p] = max(st.next[p], o)
	}
}

// idWritten reports whether the last id written is the stream's position.
func (st *watchStream) idWritten() bool {
	if len(st.said) != len(st.next) {
		return len(st.next) == 0
	}
	for p := range st.next {
		if st.said[p] != st.next[p] {
			return false
		}
	}
	return true
}

// progress adds an id-only event when the stream's position moved past the
// last id written (changes read and filtered out): a client that resumes
// from its last id then goes further.
func (st *watchStream) progress() {
	if st.idWritten() {
		return
	}
	st.buf = append(st.buf, "id: "...)
	st.buf = append(st.buf, st.wt.EncodeCursor(st.next)...)
	st.buf = append(st.buf, "\n\n"...)
	st.said = append(st.said[:0], st.next...)
}

func (st *watchStream) event(name string, data []byte) {
	st.buf = append(st.buf, "event: "...)
	st.buf = append(st.buf, name...)
	if len(st.next) > 0 {
		st.buf = append(st.buf, "\nid: "...)
		st.buf = append(st.buf, st.wt.EncodeCursor(st.next)...)
		st.said = append(st.said[:0], st.next...)
	}
	st.buf = append(st.buf, "\ndata: "...)
	st.buf = append(st.buf, data...)
	st.buf = append(st.buf, "\n\n"...)
}

func (st *watchStream) flush() error {
	if len(st.buf) == 0 {
		return nil
	}
	if st.granted != nil && !st.granted() {
		st.buf = st.buf[:0]
		return errRevoked
	}
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.wt.o.WriteTimeout))
	_, err := st.w.Write(st.buf)
	st.buf = st.buf[:0]
	if err == nil {
		err = st.rc.Flush()
	}
	return err
}

// errRevoked ends a stream whose token no longer grants it.
var errRevoked = errors.New("query: the watch's token no longer grants it")

// live writes the queue's changes until the client leaves, the write
// fails, the subscriber is cut, the stream's lifetime or token ends or the
// watcher stops. It ends with the stream's position written.
func (st *watchStream) live(ctx context.Context) {
	beat := time.NewTicker(st.wt.o.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			st.progress()
			_ = st.flush()
			return
		case <-st.wt.done:
			return
		case <-st.sub.cut:
			// Write what is queued: the stream then ends at a cursor
			// as far on as it can, and the client resumes from there.
			for len(st.sub.queue) > 0 {
				st.take(<-st.sub.queue)
			}
			_ = st.flush()
			return
		case ch := <-st.sub.queue:
			st.take(ch)
			for i := 0; i < maxDrain && len(st.sub.queue) > 0; i++ {
				st.take(<-st.sub.queue)
			}
		case <-beat.C:
			if pos := st.wt.drained(st.sub); pos != nil {
				st.advance(pos)
				st.progress()
			}
			st.buf = append(st.buf, ": ping\n\n"...)
		}
		if st.flush() != nil {
			return
		}
	}
}
