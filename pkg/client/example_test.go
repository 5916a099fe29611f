package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/correx/sessions/pkg/client"
)

func Example() {
	ctx := context.Background()
	c, err := client.New(client.IngestURL("http://127.0.0.1:8081"), client.QueryURL("http://127.0.0.1:8082"))
	if err != nil {
		log.Fatal(err)
	}
	id := "acme:run-1"
	out, err := c.SendAndWait(ctx,
		client.SessionCreated(id, client.Goal("fix the build"), client.Labels(map[string]string{"team": "core"})),
		client.SessionStarted(id),
		client.ToolRequested(id),
		client.ToolCompleted(id, false),
		client.SessionPaused(id),
		client.ModelRequested(id), // not while PAUSED: rejected
	)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range out {
		fmt.Println(o.EventID, o.Status, o.Reason)
	}
	s := out[len(out)-1].Snapshot
	fmt.Println(s.State, s.Version, s.Counters.ToolFailures)
}

func ExampleClient_Send() {
	ctx := context.Background()
	c, err := client.New(client.Token("cx_..."))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Send(ctx,
		client.SessionCreated("acme:run-2", client.WithTimeouts(client.Timeouts{Execution: 2 * time.Hour})),
		client.Custom("acme:run-2", "x.acme.BudgetChecked", map[string]any{"spent": 3}, client.ExpectedVersion(1)),
	)
	var ve *client.ValidationError
	switch {
	case errors.As(err, &ve):
		for _, p := range ve.Problems {
			fmt.Printf("event %d: %s: %s\n", p.Index, p.Field, p.Message)
		}
	case err != nil:
		log.Fatal(err)
	default:
		last := res.Accepted[len(res.Accepted)-1]
		snap, err := c.Get(ctx, "acme:run-2", client.MinPosition(last.Position()))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(snap.State)
	}
}

func ExampleBatcher() {
	ctx := context.Background()
	c, err := client.New()
	if err != nil {
		log.Fatal(err)
	}
	b, err := c.NewBatcher(client.Linger(10*time.Millisecond), client.OnResult(func(ev client.Event, _ client.Accepted, err error) {
		if err != nil {
			log.Printf("event %s of %s: %v", ev.ID, ev.SessionID, err)
		}
	}))
	if err != nil {
		log.Fatal(err)
	}
	// From any number of goroutines:
	_ = b.Add(ctx, client.ModelRequested("acme:run-1"))
	_ = b.Add(ctx, client.ToolRequested("acme:run-1"))

	if err := b.Close(ctx); err != nil { // sends what is queued
		log.Print(err)
	}
}

func ExampleClient_List() {
	ctx := context.Background()
	c, err := client.New()
	if err != nil {
		log.Fatal(err)
	}
	for page, err := range c.List(ctx, client.StateIs("AWAITING_APPROVAL"), client.IDPrefix("acme:"), client.Limit(100)) {
		if err != nil {
			log.Fatal(err)
		}
		for _, s := range page.Sessions {
			fmt.Println(s.SessionID, s.StateEnteredAt)
		}
	}
}

func ExampleClient_Watch() {
	ctx := context.Background()
	c, err := client.New()
	if err != nil {
		log.Fatal(err)
	}
	cursor := "" // or the cursor stored with the last change handled
	for ch, err := range c.Watch(ctx, client.StateIs("FAILED"), client.Cursor(cursor)) {
		if errors.Is(err, client.ErrCursorExpired) {
			log.Fatal("read the snapshots again, then watch without a cursor")
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ch.SessionID, ch.From, "->", ch.To, ch.Reason)
		cursor = ch.Cursor
	}
}

// An event that cannot be encoded says so, and Send and Add refuse it
// before any I/O.
func ExampleEvent_Err() {
	ev := client.Custom("acme:run-1", "x.acme.Note", func() {}) // a func is not JSON
	fmt.Println(errors.Is(ev.Err(), client.ErrInvalidEvent))
	// Output: true
}
