package query_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/feed"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// v1Cursor is a cursor in the first format, which carried the offsets in
// clear: base64url of the version 1, the partition count and one uvarint
// offset per partition (offsets below 128 here, one byte each).
func v1Cursor(offsets ...byte) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{1, byte(len(offsets))}, offsets...))
}

// A catch-up cut short by its time limit still moves the stream's cursor
// past what it read, filtered changes included, so that resuming from the
// last id a client got always goes further: with a limit shorter than any
// fetch, a watch whose own changes lie behind thousands of another
// tenant's still gets them after a few resumes.
func TestWatchCatchUpAlwaysProgresses(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{CatchUpTimeout: time.Nanosecond}, "acme", "beta")
	s := f.open("/v1/watch", f.tokens["acme"])
	f.produce(chg("acme:0", 0, 0, "ACTIVE"))
	_, last := s.change()
	s.resp.Body.Close()
	var others []feed.Change
	for i := range 20000 {
		others = append(others, chg(fmt.Sprintf("beta:%d", i), int32(i%watchParts), int64(1+i), "ACTIVE"))
	}
	for len(others) > 0 { // in batches of 300, so that a fetch holds some of them
		n := min(300, len(others))
		f.produce(others[:n]...)
		others = others[n:]
	}
	f.produce(chg("acme:1", 1, 30000, "ACTIVE"), chg("acme:2", 2, 30001, "ACTIVE"))
	// Resume once the reader has read it all: the catch-ups read it all.
	testwait.Until(t, "the reader has read the feed", 10*time.Second, func() bool { return f.watcher.Offered() == 20003 })
	got := map[string]bool{}
	first, resumes := last, 0
	for len(got) < 2 {
		if resumes == 200 {
			t.Fatalf("after %d resumes acme got %v of its 2 changes (the last id moved: %v)", resumes, got, last != first)
		}
		resumes++
		r := f.open("/v1/watch", f.tokens["acme"], "Last-Event-ID", last)
		// Read until the stream ends (its catch-up's limit) or, caught
		// up and live, has delivered both.
		timeout := time.After(10 * time.Second)
	read:
		for len(got) < 2 {
			select {
			case ev, ok := <-r.events:
				if !ok {
					break read
				}
				if ev.id != "" {
					last = ev.id
				}
				if ev.name == "change" {
					var c feed.Change
					if err := feed.Decode([]byte(ev.data), &c); err != nil {
						t.Fatal(err)
					}
					if got[c.SessionID] || !strings.HasPrefix(c.SessionID, "acme:") || c.SessionID == "acme:0" {
						t.Fatalf("resume %d delivered %s (had %v)", resumes, c.SessionID, got)
					}
					got[c.SessionID] = true
				}
			case <-timeout:
				t.Fatalf("resume %d: the stream neither ended nor delivered within 10s (got %v)", resumes, got)
			}
		}
		r.resp.Body.Close()
	}
	t.Logf("delivered after %d resumes", resumes)
}

// A token taken out of the token file loses its open watches when the file
// is reloaded, not only its next requests; other tokens' watches go on.
func TestWatchEndsWhenItsTokenIsRevoked(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{}, "acme", "beta")
	acme := f.open("/v1/watch", f.tokens["acme"])
	beta := f.open("/v1/watch", f.tokens["beta"])
	f.produce(chg("acme:1", 0, 0, "ACTIVE"), chg("beta:1", 0, 1, "ACTIVE"))
	acme.change()
	beta.change()
	if err := os.WriteFile(f.tokenFile, []byte(f.lines["beta"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "acme's token is refused", 10*time.Second, func() bool {
		resp := f.request("/v1/sessions/acme:1", f.tokens["acme"])
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	})
	f.produce(chg("acme:2", 0, 2, "ACTIVE"), chg("beta:2", 0, 3, "ACTIVE"))
	for _, ev := range acme.ends() {
		if ev.name != "" {
			t.Errorf("the revoked token's watch got %+v", ev)
		}
	}
	if c, _ := beta.change(); c.SessionID != "beta:2" {
		t.Fatalf("beta's watch: got %s, want beta:2", c.SessionID)
	}
}

// A watch opened before the changes topic exists (right after a start: the
// projector creates it) is answered 200 and waits, then delivers the feed
// from its first record, those written before the watcher noticed the
// topic included.
func TestWatchBeforeTheFeedExists(t *testing.T) {
	f := newWatchFixtureOn(t, kfake.SeedTopics(watchParts, topic), query.WatchOptions{Heartbeat: 50 * time.Millisecond})
	s := f.open("/v1/watch", "")
	sess := f.open("/v1/watch?prefix=s-1", "")
	if _, err := f.adm.CreateTopic(context.Background(), watchParts, 1, nil, feed.Topic(topic)); err != nil {
		t.Fatal(err)
	}
	var want []string
	var cs []feed.Change
	for i := range 6 {
		c := chg(fmt.Sprintf("s-%d", i%2), int32(i%watchParts), int64(i/watchParts), "ACTIVE")
		cs = append(cs, c)
		want = append(want, c.EventID)
	}
	f.produce(cs...)
	got := map[string]bool{}
	for range want {
		c, _ := s.change()
		got[c.EventID] = true
	}
	for _, id := range want {
		if !got[id] {
			t.Fatalf("%s was not delivered (got %v)", id, got)
		}
	}
	for range 3 {
		if c, _ := sess.change(); c.SessionID != "s-1" {
			t.Fatalf("the filtered watch got %s", c.SessionID)
		}
	}
}

// Cursors say nothing of the feed's offsets, so a tenant cannot learn how
// busy the others are from them: two cursors of one stream, hundreds of
// other records apart, have the same length and neither is the clear
// first format. A cursor in the first format, or one altered by a client,
// is refused (410, read the snapshots and watch again).
func TestWatchCursorsAreOpaque(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{}, "acme", "beta")
	s := f.open("/v1/watch", f.tokens["acme"])
	f.produce(chg("acme:1", 0, 0, "ACTIVE"))
	_, id1 := s.change()
	var others []feed.Change
	for i := range 600 {
		others = append(others, chg(fmt.Sprintf("beta:%d", i), int32(i%watchParts), int64(1+i/watchParts), "ACTIVE"))
	}
	f.produce(others...)
	f.produce(chg("acme:2", 0, 200, "ACTIVE"))
	_, id2 := s.change()
	if len(id1) != len(id2) {
		t.Errorf("cursors of different lengths: %q then %q", id1, id2)
	}
	for _, id := range []string{id1, id2} {
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil {
			t.Fatalf("cursor %q: %v", id, err)
		}
		if len(b) > 0 && b[0] == 1 {
			t.Errorf("cursor %q (% x) is in the clear first format", id, b)
		}
	}
	get := func(header ...string) (*http.Response, string) {
		resp := f.request("/v1/watch", f.tokens["acme"], header...)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp, string(b[:n])
	}
	// One bit of the sealed bytes flipped, encoded again: still base64url,
	// so the cursor is refused for what it is, altered (410), not as text
	// that is no cursor (400), as flipping a character could make it.
	raw, err := base64.RawURLEncoding.DecodeString(id2)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	altered := base64.RawURLEncoding.EncodeToString(raw)
	for name, c := range map[string]string{"first format": v1Cursor(0, 0, 0), "altered": string(altered)} {
		resp, body := get("Last-Event-ID", c)
		if resp.StatusCode != http.StatusGone || !strings.Contains(body, query.TypeCursorExpired) {
			t.Errorf("%s cursor: %d %s", name, resp.StatusCode, body)
		}
	}
	// The cursors themselves resume.
	s.resp.Body.Close()
	f.produce(chg("acme:3", 1, 100, "ACTIVE"))
	r := f.open("/v1/watch", f.tokens["acme"], "Last-Event-ID", id1)
	for _, want := range []string{"acme:2", "acme:3"} {
		if c, _ := r.change(); c.SessionID != want {
			t.Fatalf("resumed from the first cursor: got %s, want %s", c.SessionID, want)
		}
	}
}

// A stream ends after MaxLifetime, at a cursor that resumes where it
// stopped.
func TestWatchMaxLifetime(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{MaxLifetime: 300 * time.Millisecond})
	s := f.open("/v1/watch", "")
	f.produce(chg("s-1", 0, 0, "ACTIVE"))
	var last string
	got1 := false // s-1 may come after the stream ended, on a loaded machine
	for _, ev := range s.ends() {
		if ev.id != "" {
			last = ev.id
		}
		got1 = got1 || (ev.name == "change" && strings.Contains(ev.data, `"s-1"`))
	}
	if last == "" {
		t.Fatal("the stream ended without a cursor")
	}
	f.produce(chg("s-2", 1, 1, "ACTIVE"))
	r := f.open("/v1/watch", "", "Last-Event-ID", last)
	c, _ := r.change()
	if c.SessionID == "s-1" && !got1 {
		c, _ = r.change()
	}
	if c.SessionID != "s-2" {
		t.Fatalf("resumed: got %s, want s-2 (s-1 delivered before the end: %v)", c.SessionID, got1)
	}
}

// TestWatchSaysWhereItStarts: a live watch's first block carries its
// starting cursor, so a client whose connection drops before the first
// change resumes from where it started and misses nothing written since,
// instead of starting again at the end.
func TestWatchSaysWhereItStarts(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	f.produce(chg("before", 0, 0, "ACTIVE"))
	s := f.open("/v1/watch", "")
	var start string
	timeout := time.After(10 * time.Second)
	for start == "" {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if ev.comment == "" && !ev.idOnly() {
				t.Fatalf("before any id, got %+v", ev)
			}
			start = ev.id
		case <-timeout:
			t.Fatal("no starting id within 10s")
		}
	}
	s.resp.Body.Close() // dropped before any change
	missed := chg("while-away", 1, 0, "PAUSED")
	f.produce(missed)
	r := f.open("/v1/watch", "", "Last-Event-ID", start)
	c, _ := r.change()
	if c.SessionID == "before" {
		// The watch started where the watcher's reader stood, which on
		// a loaded machine may be before the change written before it.
		c, _ = r.change()
	}
	if c.EventID != missed.EventID {
		t.Fatalf("resumed from the starting id: got %s, want %s (written after the watch started)", c.EventID, missed.EventID)
	}
}

// TestWatchWritesTheRecordsBytes: a change is written to a stream as the
// bytes the projector put in the record (its canonical JSON), not decoded
// and encoded again; a record that holds line breaks (another producer's,
// pretty-printed) is encoded again on one line, so that it cannot break the
// stream's framing.
func TestWatchWritesTheRecordsBytes(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	s := f.open("/v1/watch", "")
	canon := chg("s-canon", 0, 0, "ACTIVE")
	canon.Labels = map[string]string{"team": "core", "app/tier": "web"}
	// A member this version does not know (a later projector's) shows
	// that the bytes are the record's, not the decoded change's.
	value := canon.AppendJSON(nil)
	value = append(value[:len(value)-1], `,"later":1}`...)
	if err := f.prod.ProduceSync(context.Background(), &kgo.Record{Key: []byte(canon.SessionID), Value: value, Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ev := s.next()
	if ev.data != string(value) {
		t.Fatalf("a record written as\n%s\nwant its own bytes\n%s", ev.data, value)
	}
	pretty := chg("s-pretty", 1, 1, "PAUSED")
	var buf bytes.Buffer
	if err := json.Indent(&buf, pretty.AppendJSON(nil), "", "  "); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: []byte(pretty.SessionID), Value: buf.Bytes(), Partition: 1}
	if err := f.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ev = s.next()
	if want := string(pretty.AppendJSON(nil)); ev.name != "change" || ev.data != want {
		t.Fatalf("a pretty-printed record written as %+v\nwant it on one line\n%s", ev, want)
	}
}
