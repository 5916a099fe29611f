package client_test

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
)

// counter counts the requests it passes on.
type counter struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(req)
}

// refusedURL is the URL of a port nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func countingClient(t *testing.T, base string) (*client.Client, *counter) {
	t.Helper()
	cnt := &counter{base: http.DefaultTransport.(*http.Transport).Clone()}
	c, err := client.New(client.IngestURL(base), client.QueryURL(base), client.HTTPClient(&http.Client{Transport: cnt}),
		client.Retry(10, time.Millisecond, 2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c, cnt
}

func TestCustomRefusesBuiltInTypes(t *testing.T) {
	for _, typ := range []string{client.TypeSessionCompleted, "SessionCompleted", "x.acme", "x..Note", "x.Acme.Note", "x.acme.9Note", ""} {
		ev := client.Custom("s-1", typ, nil)
		if err := ev.Err(); !errors.Is(err, client.ErrInvalidEvent) {
			t.Errorf("Custom(%q).Err() = %v, want ErrInvalidEvent", typ, err)
		}
	}
	for _, typ := range []string{"x.acme.Note", "x.a-1.n9"} {
		ev := client.Custom("s-1", typ, map[string]int{"n": 1})
		if err := ev.Err(); err != nil {
			t.Errorf("Custom(%q).Err() = %v", typ, err)
		}
	}
	c, cnt := countingClient(t, refusedURL(t))
	_, err := c.Send(ctxFor(t, 10*time.Second), client.Custom("s-1", "SessionCompleted", nil))
	var ve *client.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Field != "type" {
		t.Errorf("Send of a built-in type through Custom: %v, want a *ValidationError naming the type", err)
	}
	if !errors.Is(err, client.ErrInvalidEvent) {
		t.Errorf("Send of a built-in type through Custom: %v, want it to match ErrInvalidEvent", err)
	}
	if n := cnt.n.Load(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func TestSessionIDsAreChecked(t *testing.T) {
	c, cnt := countingClient(t, refusedURL(t))
	ctx := ctxFor(t, 10*time.Second)
	for _, id := range []string{"", "a/b", "a b", "ü", strings.Repeat("a", 129), ".", "..", "..."} {
		ev := client.SessionStarted(id)
		if err := ev.Err(); !errors.Is(err, client.ErrInvalidEvent) {
			t.Errorf("SessionStarted(%q).Err() = %v, want ErrInvalidEvent", id, err)
		}
		_, err := c.Send(ctx, client.Event{ID: "e-1", SessionID: id, Type: client.TypeSessionStarted})
		var ve *client.ValidationError
		if !errors.As(err, &ve) || ve.Problems[0].Field != "sessionId" {
			t.Errorf("Send with session id %q: %v, want a *ValidationError naming sessionId", id, err)
		}
		if !errors.Is(err, client.ErrInvalidEvent) || !errors.Is(err, client.ErrInvalidSessionID) {
			t.Errorf("Send with session id %q: %v, want it to match ErrInvalidEvent and ErrInvalidSessionID", id, err)
		}
		if _, err := c.Get(ctx, id); !errors.Is(err, client.ErrInvalidSessionID) {
			t.Errorf("Get(%q) = %v, want ErrInvalidSessionID", id, err)
		}
	}
	if n := cnt.n.Load(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

func TestWrongURLFailsFast(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c, cnt := countingClient(t, refusedURL(t))
	_, err := c.Get(ctx, "s-1")
	var re *client.ReadError
	if !errors.As(err, &re) || re.Op != "get" || re.SessionID != "s-1" || re.Attempts != 3 {
		t.Errorf("Get from a refused port: %#v, want a *ReadError of 3 attempts", err)
	}
	if n := cnt.n.Load(); n != 3 {
		t.Errorf("Get from a refused port: %d requests, want 3", n)
	}
	cnt.n.Store(0)
	_, err = c.Send(ctx, client.SessionCreated("s-1"))
	var se *client.SendError
	if !errors.As(err, &se) || se.Attempts != 3 {
		t.Errorf("Send to a refused port: %v, want a *SendError of 3 attempts", err)
	}
	if n := cnt.n.Load(); n != 3 {
		t.Errorf("Send to a refused port: %d requests, want 3", n)
	}
	cnt.n.Store(0)
	for _, err := range c.Watch(ctx) {
		if !errors.As(err, &re) || re.Op != "watch" || re.Attempts != 3 {
			t.Errorf("Watch of a refused port: %v, want a *ReadError of 3 attempts", err)
		}
	}
	if n := cnt.n.Load(); n != 3 {
		t.Errorf("Watch of a refused port: %d requests, want 3", n)
	}

	c, cnt = countingClient(t, "http://correx.invalid")
	_, err = c.Get(ctx, "s-1")
	var dns *net.DNSError
	if !errors.As(err, &dns) || !dns.IsNotFound {
		t.Skipf("this machine's resolver does not answer that .invalid names do not exist: %v", err)
	}
	if !errors.As(err, &re) || re.Attempts != 1 {
		t.Errorf("Get from an unknown host: %v, want a *ReadError of 1 attempt", err)
	}
	if n := cnt.n.Load(); n != 1 {
		t.Errorf("Get from an unknown host: %d requests, want 1", n)
	}
}
