package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/url"
	"time"

	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/wire"
)

// OnConnect sets a function a watch calls each time a stream is
// established (the service answered 200), before any of its changes, with
// the cursor the stream starts from: "" when it starts at the end, so that
// only changes made after the call are delivered. A watch without a Cursor
// starts at the end, so send what it must see after the first call (or
// send first and read the snapshots). It is called on the goroutine that
// ranges over Watch and must not block for long. Default: none.
func OnConnect(f func(cursor string)) WatchOpt {
	return watchOpt(func(s *scanSettings) { s.onConnect = f })
}

// Change is one change record of the watch stream (pkg/wire.Change) and the
// cursor that resumes right after it.
type Change struct {
	wire.Change
	// Cursor resumes the watch after this change (the Cursor option).
	// Store it with what you derived from the change to resume exactly
	// there after a restart.
	Cursor string
}

// maxSSELine bounds one line of the stream: a change record is a few KB.
const maxSSELine = 1 << 20

// Watch streams the change feed (GET /v1/watch, Server-Sent Events) as an
// iterator; every filter given (StateIs, IDPrefix, HasLabels, ParentIs)
// must hold. When the connection drops, or the service ends the stream
// (shutdown, a client that fell behind), Watch reconnects with the last
// cursor received (Last-Event-ID), so the changes continue with none
// missed and none repeated; it retries with the Retry option's backoff, as
// Get does, and yields a *ReadError once attempts in a row have failed or a
// failure that retrying cannot cure. A refusal is yielded as a *StatusError;
// a cursor older than the feed's retention matches ErrCursorExpired. Errors
// end the iteration; so do the context and a break out of the range loop.
//
// A refused connection (nothing listens) ends a watch after 3 attempts, as
// it ends Get, until a stream has been established; from then on the
// address is known to be right, so refusals are a restart of the query
// service and get the Retry option's whole budget (10 attempts, 10 to 20 s
// by default) before the watch gives up.
//
// The service's first block on a stream carries the cursor the stream
// starts from, so once a stream is established (OnConnect), a drop before
// its first change resumes from where it started, not at the end. Only a
// stream that drops before that first block (nor had a cursor) is reopened
// at the end, and changes made meanwhile are not delivered: OnConnect is
// then called again with "" to say so.
//
// The feed itself is at least once across projector crashes: a replayed
// change repeats byte for byte, so drop repeats by Change.Key() if it
// matters.
func (c *Client) Watch(ctx context.Context, opts ...WatchOpt) iter.Seq2[Change, error] {
	o := scanWith(opts, WatchOpt.applyWatch)
	return func(yield func(Change, error) bool) {
		cursor := o.cursor
		failures := 0
		// refused is how many refused connections in a row end the watch:
		// few until a stream is established (a wrong address fails fast),
		// then the whole retry budget (the service is restarting).
		refused := refusedAttempts
		for {
			got, connected, err := c.watchOnce(ctx, &o, &cursor, yield)
			if err == errStop || ctx.Err() != nil {
				return
			}
			if connected {
				refused = c.retry.attempts
			}
			if got {
				failures = 0
			}
			failures++
			var se *StatusError
			if errors.As(err, &se) && !se.Temporary() {
				yield(Change{}, err)
				return
			}
			if c.retry.gaveUpRefused(err, failures, refused) {
				yield(Change{}, &ReadError{Op: "watch", Attempts: failures, Err: err})
				return
			}
			if backoff.Sleep(ctx, c.retry.backoff(failures, se.retryAfter())) != nil {
				return
			}
		}
	}
}

func (e *StatusError) retryAfter() (d time.Duration) {
	if e != nil {
		d = e.RetryAfter
	}
	return d
}

var errStop = errors.New("stop")

// watchOnce runs one connection; it reports whether it delivered a change,
// whether the service answered 200, and why it ended (errStop when the
// consumer stopped).
func (c *Client) watchOnce(ctx context.Context, o *scanSettings, cursor *string, yield func(Change, error) bool) (got, connected bool, err error) {
	q := url.Values{}
	if o.state != "" {
		q.Set("state", o.state)
	}
	if o.prefix != "" {
		q.Set("prefix", o.prefix)
	}
	for k, v := range o.labels {
		q.Add("label", k+"="+v)
	}
	if o.parent != "" {
		q.Set("parent", o.parent)
	}
	u := c.query.JoinPath("v1", "watch")
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *cursor != "" {
		req.Header.Set("Last-Event-ID", *cursor)
	}
	c.setHeaders(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_, se := statusError("watch", resp, body)
		return false, false, se
	}
	connected = true
	if o.onConnect != nil {
		o.onConnect(*cursor)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	var event, id string
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 { // dispatch
			if id != "" {
				// The last id received is the cursor, whatever the event's
				// kind: a block with an id and no data moves it too, as
				// the SSE last event id (the service sends one past the
				// changes it read and filtered out, so a resume goes
				// further).
				got = got || id != *cursor
				*cursor = id
			}
			if event == "change" && len(data) > 0 {
				var ch Change
				if err := wire.Decode(data, &ch.Change); err != nil {
					return got, true, err
				}
				ch.Cursor = id
				got = true
				if !yield(ch, nil) {
					return got, true, errStop
				}
			}
			event, data = "", data[:0]
			continue
		}
		if line[0] == ':' {
			continue // a comment: heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "event":
			event = string(value)
		case "id":
			id = string(value)
		case "data":
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
	if err := sc.Err(); err != nil {
		return got, true, err
	}
	return got, true, io.ErrUnexpectedEOF
}
