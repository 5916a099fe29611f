package query_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
)

// A watch streams the changes that pass its filters, each with a cursor,
// and the filters combine (all must hold).
func TestWatchStreamsChangesWithFilters(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	paths := map[string]string{
		"all":    "/v1/watch",
		"state":  "/v1/watch?state=PAUSED",
		"labels": "/v1/watch?label=team=a&label=env=prod",
		"prefix": "/v1/watch?prefix=acme:",
		"parent": "/v1/watch?parent=p-1",
		"mixed":  "/v1/watch?prefix=acme:&state=PAUSED&label=team=a",
	}
	streams := map[string]*sseStream{}
	for name, p := range paths {
		streams[name] = f.open(p, "")
	}
	with := func(c feed.Change, labels map[string]string, parent string) feed.Change {
		c.Labels, c.ParentSessionID = labels, parent
		return c
	}
	cs := []feed.Change{
		chg("acme:1", 0, 0, "ACTIVE"),
		with(chg("beta:1", 0, 1, "PAUSED"), map[string]string{"team": "a", "env": "prod"}, ""),
		with(chg("acme:2", 0, 2, "PAUSED"), map[string]string{"team": "a"}, "p-1"),
		with(chg("beta:2", 0, 3, "ACTIVE"), map[string]string{"team": "a", "env": "dev"}, "p-1"),
		with(chg("acme:3", 0, 4, "PAUSED"), map[string]string{"team": "b", "env": "prod"}, "p-2"),
	}
	// The last change passes every filter: each stream is read up to it.
	sentinel := with(chg("acme:z", 0, 5, "PAUSED"), map[string]string{"team": "a", "env": "prod"}, "p-1")
	f.produce(append(cs, sentinel)...)
	want := map[string][]string{ // restated by hand from the table above
		"all":    {"acme:1", "beta:1", "acme:2", "beta:2", "acme:3", "acme:z"},
		"state":  {"beta:1", "acme:2", "acme:3", "acme:z"},
		"labels": {"beta:1", "acme:z"},
		"prefix": {"acme:1", "acme:2", "acme:3", "acme:z"},
		"parent": {"acme:2", "beta:2", "acme:z"},
		"mixed":  {"acme:2", "acme:z"},
	}
	for name, s := range streams {
		var got []string
		for {
			c, id := s.change()
			if _, err := f.watcher.DecodeCursor(id); err != nil {
				t.Fatalf("%s: id %q is not a cursor: %v", name, id, err)
			}
			got = append(got, c.SessionID)
			if c.SessionID == "acme:z" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[name]) {
			t.Errorf("%s (%s): got %v, want %v", name, paths[name], got, want[name])
		}
	}
	// The data is the change's canonical JSON.
	s := f.open("/v1/watch", "")
	f.produce(sentinel)
	ev := s.next()
	if want := string(sentinel.AppendJSON(nil)); ev.data != want {
		t.Errorf("data\n%s\nwant\n%s", ev.data, want)
	}
}

// Resuming with the id of the last event read (Last-Event-ID, or ?cursor=)
// delivers exactly the records after it, across partitions: none missed,
// none twice.
func TestWatchResumesWithoutGapOrDuplicate(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	s := f.open("/v1/watch", "")
	var cs []feed.Change
	for i := range 30 {
		cs = append(cs, chg(fmt.Sprintf("s-%d", i%7), int32(i%watchParts), int64(i), "ACTIVE"))
	}
	f.produce(cs...)
	seen := map[string]bool{}
	var last string
	for range 10 {
		c, id := s.change()
		seen[c.EventID], last = true, id
	}
	s.resp.Body.Close() // the connection drops
	var more []feed.Change
	for i := 30; i < 50; i++ {
		more = append(more, chg(fmt.Sprintf("s-%d", i%7), int32(i%watchParts), int64(i), "PAUSED"))
	}
	f.produce(more...)
	want := map[string]bool{}
	for _, c := range append(cs, more...) {
		if !seen[c.EventID] {
			want[c.EventID] = true
		}
	}
	for _, how := range []string{"header", "query"} {
		var r *sseStream
		if how == "header" {
			r = f.open("/v1/watch", "", "Last-Event-ID", last)
		} else {
			r = f.open("/v1/watch?cursor="+last, "")
		}
		got := map[string]bool{}
		for range len(want) {
			c, _ := r.change()
			if got[c.EventID] || seen[c.EventID] {
				t.Fatalf("%s: %s delivered twice", how, c.EventID)
			}
			got[c.EventID] = true
		}
		// One more change shows that nothing else was pending before it.
		tail := chg("s-tail-"+how, 1, 100, "ACTIVE")
		f.produce(tail)
		if c, _ := r.change(); c.EventID != tail.EventID {
			t.Fatalf("%s: after the missed records came %s, want the new %s", how, c.EventID, tail.EventID)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: resumed with %d records, want %d", how, len(got), len(want))
		}
		r.resp.Body.Close()
		want[tail.EventID] = true // a later resume from the same id gets it too
	}
}

// A cursor older than the feed's retention gets 410, and bad cursors and
// parameters get 400 naming the field.
func TestWatchRefusesBadRequests(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	f.produce(chg("s-1", 0, 0, "ACTIVE"), chg("s-1", 0, 1, "PAUSED"))
	old := f.watcher.EncodeCursor([]int64{0, 0, 0})
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: feed.Topic(topic), Partition: 0, At: 2})
	if _, err := f.adm.DeleteRecords(context.Background(), offs); err != nil {
		t.Fatal(err)
	}
	get := func(path string, header ...string) (*http.Response, []byte) {
		resp := f.request(path, "", header...)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp, b[:n]
	}
	resp, body := get("/v1/watch", "Last-Event-ID", old)
	if resp.StatusCode != http.StatusGone || !strings.Contains(string(body), query.TypeCursorExpired) {
		t.Errorf("expired cursor: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct{ path, header, field string }{
		{"/v1/watch?state=BOGUS", "", "state"},
		{"/v1/watch?label=Team=a", "", "label"},
		{"/v1/watch?label=team", "", "label"},
		{"/v1/watch?prefix=bad%20prefix", "", "prefix"},
		{"/v1/watch?parent=bad%20id", "", "parent"},
		{"/v1/watch?cursor=not-a-cursor", "", "cursor"},
		{"/v1/watch", "garbage!", "Last-Event-ID"},
		{"/v1/watch?cursor=" + f.watcher.EncodeCursor([]int64{0, 0, 0, 0, 0}), "", "cursor"},
		{"/v1/sessions/bad%20id/watch", "", "id"},
	} {
		var resp *http.Response
		var body []byte
		if c.header != "" {
			resp, body = get(c.path, "Last-Event-ID", c.header)
		} else {
			resp, body = get(c.path)
		}
		wantProblem(t, resp, body, 400, c.field)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// A token bound to a prefix sees only its sessions' changes, whatever the
// filters ask, and a session watch outside its prefix is a 404 with the
// same bytes as a missing session.
func TestWatchTenantsAreIsolated(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{}, "acme", "beta")
	acme := f.open("/v1/watch", f.tokens["acme"])
	acmeWide := f.open("/v1/watch?prefix=ac", f.tokens["acme"])
	acmeAsksBeta := f.open("/v1/watch?prefix=beta:", f.tokens["acme"])
	beta := f.open("/v1/watch", f.tokens["beta"])
	f.produce(chg("beta:1", 0, 0, "ACTIVE"), chg("acme:1", 0, 1, "ACTIVE"), chg("beta:2", 0, 2, "ACTIVE"),
		chg("acme:2", 0, 3, "ACTIVE"), chg("beta:z", 0, 4, "ACTIVE"), chg("acme:z", 0, 5, "ACTIVE"))
	for name, c := range map[string]struct {
		s    *sseStream
		want string
	}{
		"acme": {acme, "[acme:1 acme:2 acme:z]"}, "acme wide prefix": {acmeWide, "[acme:1 acme:2 acme:z]"},
		"beta": {beta, "[beta:1 beta:2 beta:z]"},
	} {
		var got []string
		for len(got) == 0 || !strings.HasSuffix(got[len(got)-1], ":z") {
			ch, _ := c.s.change()
			got = append(got, ch.SessionID)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s: got %v, want %s", name, got, c.want)
		}
	}
	// The reader offered beta:z and acme:z (partition 0, in order) after
	// every earlier change, so a beta change for acme would be queued by
	// now; give the stream a moment to have written it.
	f.produce(chg("acme:after", 0, 6, "ACTIVE"))
	acme.change()
	for quiet := time.After(100 * time.Millisecond); ; {
		select {
		case ev := <-acmeAsksBeta.events:
			if ev.comment == "" && !ev.idOnly() { // a sealed cursor may come
				t.Errorf("acme watching prefix beta: got %+v", ev)
			}
			continue
		case <-quiet:
		}
		break
	}

	var s snapshot.Snapshot
	var r fsm.Reducer
	e := fsm.NewEvent(fsm.EventID{1}, "beta:1", fsm.SessionCreated, changeAt, fsm.Fields{})
	s.Fold(&r, &e, snapshot.Position{Partition: 0, Offset: 0})
	if _, err := f.store.PutBatch(context.Background(), []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	read := func(path, token string) (int, string) {
		resp := f.request(path, token)
		defer resp.Body.Close()
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	st1, other := read("/v1/sessions/beta:1/watch", f.tokens["acme"])
	st2, missing := read("/v1/sessions/acme:nobody/watch", f.tokens["acme"])
	if st1 != 404 || st2 != 404 || other != missing {
		t.Errorf("another tenant's session: %d %s\nmissing session: %d %s", st1, other, st2, missing)
	}
	bs := f.open("/v1/sessions/beta:1/watch", f.tokens["beta"])
	if ev := bs.next(); ev.name != "snapshot" {
		t.Errorf("the owner's session watch began with %+v", ev)
	}
}

// A session's watch begins with its snapshot; changes at or below the
// snapshot's position that arrive afterwards are dropped, later ones and
// only the session's follow.
func TestSessionWatchStartsWithSnapshot(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, et := range []fsm.EventType{fsm.SessionCreated, fsm.SessionStarted} {
		e := fsm.NewEvent(fsm.EventID{byte(i + 1)}, "s-1", et, changeAt.Add(time.Duration(i)*time.Second), fsm.Fields{})
		s.Fold(&r, &e, snapshot.Position{Partition: 1, Offset: 10 + int64(i)})
	}
	if _, err := f.store.PutBatch(context.Background(), []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	w := f.open("/v1/sessions/s-1/watch", "")
	ev := w.next()
	var got snapshot.Snapshot
	if ev.name != "snapshot" || json.Unmarshal([]byte(ev.data), &got) != nil || got.ID != "s-1" || got.Version != 2 {
		t.Fatalf("first event: %+v", ev)
	}
	if _, err := f.watcher.DecodeCursor(ev.id); err != nil {
		t.Fatalf("snapshot id %q: %v", ev.id, err)
	}
	f.produce(chg("s-1", 1, 10, "CREATED"), chg("s-1", 1, 11, "ACTIVE"), chg("o-1", 1, 12, "ACTIVE"),
		chg("s-1", 1, 13, "PAUSED"), chg("s-1", 1, 14, "ACTIVE"))
	c1, id1 := w.change()
	c2, _ := w.change()
	if c1.Position.Offset != 13 || c2.Position.Offset != 14 || c1.SessionID != "s-1" || c2.SessionID != "s-1" {
		t.Fatalf("after the snapshot: %+v then %+v, want s-1 at 1:13 and 1:14", c1.Position, c2.Position)
	}
	// Resuming after 1:13 gives 1:14 and nothing before it.
	rw := f.open("/v1/sessions/s-1/watch", "", "Last-Event-ID", id1)
	if c, _ := rw.change(); c.Position.Offset != 14 {
		t.Fatalf("resumed at %+v, want 1:14", c.Position)
	}
	resp := f.request("/v1/sessions/nobody/watch", "")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("missing session: %d", resp.StatusCode)
	}
}

// An idle stream carries a comment heartbeat, and outlives the server's
// read and write timeouts (300 ms in the fixture).
func TestWatchHeartbeat(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{Heartbeat: 20 * time.Millisecond})
	s := f.open("/v1/watch", "")
	pings := 0
	start := time.Now()
	for time.Since(start) < 600*time.Millisecond {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended after %v", time.Since(start))
			}
			if ev.comment == "ping" {
				pings++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no heartbeat within 10s")
		}
	}
	if pings == 0 {
		t.Fatal("no heartbeat")
	}
	f.produce(chg("s-1", 0, 0, "ACTIVE"))
	if c, _ := s.change(); c.SessionID != "s-1" {
		t.Fatalf("got %s", c.SessionID)
	}
}
