package client_test

import (
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/client"
)

// TestErrorMessages pins the text of the client's errors: the package named
// once, the operation and the session, counts in words, one line.
func TestErrorMessages(t *testing.T) {
	_, err := client.New(client.IngestURL("localhost:8081"), client.QueryURL("ftp://q"), client.Retry(0, time.Second, time.Second))
	want := `client: IngestURL: want http(s)://host[:port], got "localhost:8081" (no scheme: http://localhost:8081?); ` +
		`QueryURL: want http(s)://host[:port], got "ftp://q"; Retry: attempts must be at least 1, got 0`
	if err == nil || err.Error() != want {
		t.Errorf("New:\n got %v\nwant %s", err, want)
	}

	base := refusedURL(t)
	c, _ := countingClient(t, base)
	ctx := ctxFor(t, 30*time.Second)
	host := strings.TrimPrefix(base, "http://")
	_, err = c.Get(ctx, "s-1")
	want = `client: get s-1: failed after 3 attempts: Get "` + base + `/v1/sessions/s-1": dial tcp ` + host + `: connect: connection refused`
	if err == nil || err.Error() != want {
		t.Errorf("Get from a refused port:\n got %v\nwant %s", err, want)
	}
	_, err = c.Send(ctx, client.SessionCreated("s-1"))
	want = `client: send: 1 event unconfirmed after 3 attempts: Post "` + base + `/v1/events": dial tcp ` + host + `: connect: connection refused`
	if err == nil || err.Error() != want {
		t.Errorf("Send to a refused port:\n got %v\nwant %s", err, want)
	}
	_, err = c.Get(ctx, "a b")
	want = `client: get: invalid session id "a b": want 1-128 characters of [A-Za-z0-9._:-]`
	if err == nil || err.Error() != want {
		t.Errorf("Get of a bad id:\n got %v\nwant %s", err, want)
	}

	for _, tc := range []struct {
		err  error
		want string
	}{
		{&client.StatusError{Op: "get", SessionID: "s-1", Status: 404, Detail: "no such session"}, "client: get s-1: status 404: no such session"},
		{&client.ReadError{Op: "get", SessionID: "s-1", Attempts: 10, Err: &client.StatusError{Op: "get", Status: 503, Title: "Service Unavailable"}},
			"client: get s-1: failed after 10 attempts: status 503: Service Unavailable"},
		{&client.ReadError{Op: "list", Attempts: 1, Err: &client.StatusError{Op: "list", Status: 503}}, "client: list: failed after 1 attempt: status 503"},
		{&client.SendError{Attempts: 10, Unconfirmed: []string{"a", "b"}, Err: &client.StatusError{Op: "send", Status: 503, Detail: "kafka is down"}},
			"client: send: 2 events unconfirmed after 10 attempts: status 503: kafka is down"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("\n got %s\nwant %s", got, tc.want)
		}
	}
}
