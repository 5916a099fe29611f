package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBackoff restates the policy: exponential from the minimum, capped,
// jittered into [d/2, d], never below Retry-After.
func TestBackoff(t *testing.T) {
	r := retryPolicy{attempts: 10, min: 100 * time.Millisecond, max: time.Second}
	for _, c := range []struct {
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 0, 400 * time.Millisecond, 800 * time.Millisecond},
		{9, 0, 500 * time.Millisecond, time.Second},
		{1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
	} {
		for range 100 {
			if d := r.backoff(c.attempt, c.retryAfter); d < c.lo || d > c.hi {
				t.Fatalf("backoff(%d, %v) = %v, want in [%v, %v]", c.attempt, c.retryAfter, d, c.lo, c.hi)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{{"", 0}, {"2", 2 * time.Second}, {"-1", 0}, {"x", 0}, {"100000", time.Minute}} {
		if got := parseRetryAfter(c.in); got != c.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := parseRetryAfter(time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)); got < 28*time.Second || got > 30*time.Second {
		t.Errorf("an HTTP date 30s ahead: %v", got)
	}
}

// TestNewReportsEveryProblem checks that New names each bad option at once.
func TestNewReportsEveryProblem(t *testing.T) {
	_, err := New(IngestURL("ftp://x"), QueryURL("nohost"), Retry(0, 0, 0), RequestTimeout(-1))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"IngestURL", "QueryURL", "attempts", "minBackoff", "RequestTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := New(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestSendRefusesEventsWithoutID: ingest would assign an id to each
// attempt, so a resend could double the event; such an event is refused
// before any I/O (the URL below has no server).
func TestSendRefusesEventsWithoutID(t *testing.T) {
	c, err := New(IngestURL("http://127.0.0.1:1"), Retry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(t.Context(), SessionStarted("s"), Event{SessionID: "s", Type: TypeSessionPaused})
	ve, ok := err.(*ValidationError)
	if !ok || len(ve.Problems) != 1 || ve.Problems[0].Index != 1 || ve.Problems[0].Field != "eventId" {
		t.Fatalf("err = %v, want a *ValidationError naming event 1's eventId", err)
	}
}

// stall holds every request until released, then fails it.
type stall struct{ release chan struct{} }

func (s stall) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-s.release:
	case <-req.Context().Done():
	}
	return nil, errors.New("stalled")
}

// TestBatcherBackPressure: with the ingest stalled, Add blocks once
// BufferBytes of events are queued or in flight, and returns when its
// context ends.
func TestBatcherBackPressure(t *testing.T) {
	st := stall{release: make(chan struct{})}
	c, err := New(HTTPClient(&http.Client{Transport: st}), Retry(1, time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const budget = 8 << 10
	b, err := c.NewBatcher(BufferBytes(budget), Lanes(2), Linger(0))
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		err := b.Add(ctx, SessionCreated("bp:1", Goal(strings.Repeat("x", 200))))
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Add: %v, want a deadline error", err)
			}
			break
		}
		added++
		if added > 1000 {
			t.Fatal("Add never blocked")
		}
	}
	b.mem.mu.Lock()
	used := b.mem.used
	b.mem.mu.Unlock()
	if used > budget || added < 10 {
		t.Errorf("%d events added, %d bytes held, budget %d", added, used, budget)
	}
	close(st.release)
	if err := b.Close(t.Context()); err == nil {
		t.Error("Close: no error, though every request failed")
	}
}

// TestNotSentIsFinal: an error net/http makes before a request leaves (a
// header value it refuses) is never retried: sending again cannot cure it.
func TestNotSentIsFinal(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok\n")
	_, err = http.DefaultClient.Do(req)
	if err == nil {
		t.Fatal("net/http sent a header value with a newline")
	}
	r := retryPolicy{attempts: 10}
	if !r.gaveUp(err, 1) {
		t.Errorf("%v: retried", err)
	}
}

// TestNewRefusesHeaderValues: a token or user agent no header can carry (a
// line ending read from a file) is refused by New, naming the option and
// not the secret.
func TestNewRefusesHeaderValues(t *testing.T) {
	for _, c := range []struct {
		opt  ClientOpt
		name string
	}{
		{Token("secret\n"), "Token"},
		{Token("secret\r\n"), "Token"},
		{Token("sec\x00ret"), "Token"},
		{UserAgent("agent\r"), "UserAgent"},
	} {
		_, err := New(c.opt)
		if err == nil || !strings.Contains(err.Error(), "client: "+c.name+":") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, err := New(Token("cxs_ok-token.with/chars+=")); err != nil {
		t.Errorf("a plain token: %v", err)
	}
}
