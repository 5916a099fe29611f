package client_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/client"
)

// refusals is an http.RoundTripper that counts the watch requests whose
// connection was refused, and the streams that opened.
type refusals struct {
	base    http.RoundTripper
	refused atomic.Int32
	streams atomic.Int32
}

func (r *refusals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if strings.HasSuffix(req.URL.Path, "/v1/watch") {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			r.refused.Add(1)
		case err == nil && resp.StatusCode == http.StatusOK:
			r.streams.Add(1)
		}
	}
	return resp, err
}

// TestWatchSurvivesQueryRestart stops the query service under an
// established watch, keeps it down until the watch's connections have been
// refused more often than a fresh request tolerates, sends events
// meanwhile, and starts it again on the same address: the watch resumes
// from its last cursor and delivers every change once, in order.
func TestWatchSurvivesQueryRestart(t *testing.T) {
	st := startStack(t, 2)
	rt := &refusals{base: http.DefaultTransport}
	c, err := client.New(client.IngestURL(st.IngestURL), client.QueryURL(st.QueryURL),
		client.Retry(50, 10*time.Millisecond, 200*time.Millisecond), client.HTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 90*time.Second)
	changes := make(chan client.Change, 256)
	errc := make(chan error, 1)
	go func() {
		for ch, err := range c.Watch(ctx, client.IDPrefix("restart:")) {
			if err != nil {
				errc <- err
				return
			}
			changes <- ch
		}
	}()
	testwait.Until(t, "the watch opens", 30*time.Second, func() bool { return rt.streams.Load() > 0 })

	// The feed is ordered per session (per partition); each session's
	// changes are compared in order.
	want, got := map[string][]string{}, map[string][]string{}
	wanted, received := 0, 0
	// expect records the changes a session's lifecycle writes: every event
	// but the applied execution events 2-4 (see TestWatchPipeline).
	expect := func(evs []client.Event) {
		for i, e := range evs {
			if i < 2 || i > 4 {
				want[e.SessionID] = append(want[e.SessionID], e.ID)
				wanted++
			}
		}
	}
	receive := func(n int) {
		t.Helper()
		for received < n {
			select {
			case ch := <-changes:
				got[ch.SessionID] = append(got[ch.SessionID], ch.EventID)
				received++
			case err := <-errc:
				t.Fatalf("the watch ended after %d changes of %d: %v", received, n, err)
			case <-ctx.Done():
				t.Fatalf("got %d changes of %d", received, n)
			}
		}
	}

	before := lifecycle("restart:before")
	expect(before)
	if _, err := c.SendAndWait(ctx, before...); err != nil {
		t.Fatal(err)
	}
	receive(wanted)

	if err := st.StopQuery(); err != nil {
		t.Fatal(err)
	}
	// Written while the query service is down: the watch must resume from
	// its cursor to see these.
	during := lifecycle("restart:during")
	expect(during)
	if _, err := c.Send(ctx, during...); err != nil {
		t.Fatal(err)
	}
	// A request that never reached a stream gives up after 3 refusals;
	// an established watch must not.
	var ended error
	testwait.Until(t, "the watch's connections are refused 5 times", 30*time.Second, func() bool {
		select {
		case ended = <-errc:
			return true
		default:
			return rt.refused.Load() >= 5
		}
	})
	if ended != nil {
		t.Fatalf("the watch ended while the query service was down, after %d refused connections: %v", rt.refused.Load(), ended)
	}
	if err := st.StartQuery(); err != nil {
		t.Fatal(err)
	}
	after := lifecycle("restart:after")
	expect(after)
	if _, err := c.SendAndWait(ctx, after...); err != nil {
		t.Fatal(err)
	}
	receive(wanted)
	for id, w := range want {
		if !slices.Equal(got[id], w) {
			t.Errorf("%s: changes\n got %v\nwant %v", id, got[id], w)
		}
	}
	select {
	case ch := <-changes:
		t.Errorf("an extra change %s %s", ch.EventID, ch.Type)
	default:
	}
	t.Logf("%d changes over %d streams, %d connections refused", received, rt.streams.Load(), rt.refused.Load())
}
