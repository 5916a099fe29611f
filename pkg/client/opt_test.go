package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
)

// TestOptKinds: an option is of the kinds its result type says and of no
// other, even to a type assertion, so that no call takes what it ignores.
func TestOptKinds(t *testing.T) {
	for _, c := range []struct {
		name                 string
		opt                  client.Opt
		list, archive, watch bool
	}{
		{"StateIs", client.StateIs("ACTIVE"), true, false, true},
		{"HasLabels", client.HasLabels(map[string]string{"a": "b"}), true, false, true},
		{"ParentIs", client.ParentIs("p"), true, false, true},
		{"Limit", client.Limit(5), true, true, false},
		{"IDPrefix", client.IDPrefix("x:"), true, true, true},
		{"Cursor", client.Cursor("c"), true, true, true},
		{"OnConnect", client.OnConnect(func(string) {}), false, false, true},
		{"MinPosition", client.MinPosition(client.Position{}), false, false, false},
	} {
		_, list := c.opt.(client.ListOpt)
		_, archive := c.opt.(client.ArchiveOpt)
		_, watch := c.opt.(client.WatchOpt)
		if list != c.list || archive != c.archive || watch != c.watch {
			t.Errorf("%s: List %v, Archive %v, Watch %v; want %v, %v, %v", c.name, list, archive, watch, c.list, c.archive, c.watch)
		}
	}
	if _, ok := client.Goal("g").(client.EventOpt); ok {
		t.Error("Goal is an EventOpt: the other events would take it")
	}
	var _ client.CreateOpt = client.ExpectedVersion(1) // every EventOpt adjusts SessionCreated too
	if _, ok := client.Linger(0).(client.ClientOpt); ok {
		t.Error("Linger is a ClientOpt")
	}
}

// TestScanOptsOnTheWire: the options of List, Archive and Watch make the
// query strings (and Watch's Last-Event-ID) the service reads, and no
// more; an option with its zero value sends nothing.
func TestScanOptsOnTheWire(t *testing.T) {
	got := make(chan *http.Request, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		switch r.URL.Path {
		case "/v1/watch":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("id: next\nevent: change\ndata: {\"sessionId\":\"x:1\",\"eventId\":\"e1\",\"outcome\":\"applied\"}\n\n"))
		default:
			_, _ = w.Write([]byte(`{"sessions":[],"next":null}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(client.QueryURL(srv.URL), client.WithoutTracing(), client.Retry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(name, path string, want url.Values) *http.Request {
		t.Helper()
		r := <-got
		q := r.URL.Query()
		for _, vs := range q {
			slices.Sort(vs) // labels go in the map's order
		}
		if r.URL.Path != path || q.Encode() != want.Encode() {
			t.Errorf("%s: %s?%s, want %s?%s", name, r.URL.Path, r.URL.RawQuery, path, want.Encode())
		}
		return r
	}

	for _, err := range c.List(ctx) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check("List()", "/v1/sessions", url.Values{})
	for _, err := range c.List(ctx, client.StateIs(""), client.IDPrefix(""), client.HasLabels(nil), client.ParentIs(""), client.Limit(0), client.Cursor("")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check("List(zero values)", "/v1/sessions", url.Values{})
	for _, err := range c.List(ctx, client.StateIs("ACTIVE"), client.IDPrefix("x:"), client.HasLabels(map[string]string{"team": "a", "tier": "1"}),
		client.ParentIs("x:p"), client.Limit(50), client.Cursor("c1")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check("List", "/v1/sessions", url.Values{"state": {"ACTIVE"}, "prefix": {"x:"}, "label": {"team=a", "tier=1"},
		"parent": {"x:p"}, "limit": {"50"}, "cursor": {"c1"}})

	for _, err := range c.Archive(ctx, client.IDPrefix("x:"), client.Limit(2), client.Cursor("c2")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	check("Archive", "/v1/archive", url.Values{"prefix": {"x:"}, "limit": {"2"}, "cursor": {"c2"}})

	connected := ""
	for ch, err := range c.Watch(ctx, client.StateIs("FAILED"), client.IDPrefix("x:"), client.HasLabels(map[string]string{"team": "a"}),
		client.ParentIs("x:p"), client.Cursor("c3"), client.OnConnect(func(cursor string) { connected = cursor })) {
		if err != nil {
			t.Fatal(err)
		}
		if ch.SessionID != "x:1" || ch.Cursor != "next" {
			t.Errorf("change %+v", ch)
		}
		break
	}
	r := check("Watch", "/v1/watch", url.Values{"state": {"FAILED"}, "prefix": {"x:"}, "label": {"team=a"}, "parent": {"x:p"}})
	if id := r.Header.Get("Last-Event-ID"); id != "c3" || connected != "c3" {
		t.Errorf("Watch: Last-Event-ID %q, OnConnect %q; want the Cursor option's c3", id, connected)
	}
}
