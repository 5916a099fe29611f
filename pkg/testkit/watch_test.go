package testkit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/testkit"
)

// TestStartWaitsForTheWatch: once Start returns, a watch answers at once,
// so what is sent after it opens is delivered.
func TestStartWaitsForTheWatch(t *testing.T) {
	st := testkit.Start(t)
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.QueryURL+"/v1/watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a watch right after Start: %s, want 200 OK", resp.Status)
	}
}

// TestStackClient drives the stack with its client: a watch opened right
// after Start, once connected, sees the changes of what is sent after it,
// the cancellation the projector derives for a child included, and
// AwaitState waits for that derived state, which has no position to wait
// for.
func TestStackClient(t *testing.T) {
	st := testkit.Start(t, testkit.WithAuth())
	c := st.Client()
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()

	connected := make(chan string, 8)
	changes := make(chan client.Change, 64)
	errc := make(chan error, 1)
	go func() {
		onConnect := client.OnConnect(func(cursor string) { connected <- cursor })
		for ch, err := range c.Watch(ctx, client.IDPrefix("fam:"), onConnect) {
			if err != nil {
				errc <- err
				return
			}
			changes <- ch
		}
	}()
	select {
	case <-connected:
	case err := <-errc:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the watch never connected")
	}

	if _, err := c.SendAndWait(ctx,
		client.SessionCreated("fam:parent"), client.SessionStarted("fam:parent"),
		client.SessionCreated("fam:child", client.Parent("fam:parent")), client.SessionStarted("fam:child"),
		client.CancellationRequested("fam:parent", "done", client.Graceful)); err != nil {
		t.Fatal(err)
	}
	snap, err := c.AwaitState(ctx, "fam:child", "CANCELLING", "CANCELLED")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Cancellation == nil || snap.Cancellation.Reason != "parent_cancelled" {
		t.Errorf("the child's cancellation: %+v, want reason parent_cancelled", snap.Cancellation)
	}
	// A session that ended otherwise can never reach the state awaited.
	if _, err := c.Send(ctx, client.SessionCancelled("fam:parent")); err != nil {
		t.Fatal(err)
	}
	if snap, err := c.AwaitState(ctx, "fam:parent", "COMPLETED"); !errors.Is(err, client.ErrEnded) || snap == nil || snap.State != "CANCELLED" {
		t.Errorf("awaiting COMPLETED of a cancelled session: %v %v, want ErrEnded with the CANCELLED snapshot", snap, err)
	}
	if _, err := c.AwaitState(ctx, "fam:parent", "Active"); err == nil {
		t.Error("awaiting a state that does not exist: no error")
	}

	// The child's derived change reaches the watch.
	for {
		select {
		case ch := <-changes:
			if ch.SessionID == "fam:child" && ch.To == "CANCELLING" {
				return
			}
		case err := <-errc:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal("the child's cancellation never reached the watch")
		}
	}
}
