package testkit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/correx/sessions/pkg/testkit"
)

// Run starts a stack outside a test; in a test, testkit.Start(t) does the
// same and stops it when the test ends.
func ExampleRun() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := testkit.Run(ctx, testkit.WithPartitions(1))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	pos, err := st.Send(ctx,
		`{"sessionId":"demo-1","type":"SessionCreated","payload":{"goal":"triage the alert"}}`,
		`{"sessionId":"demo-1","type":"SessionStarted","payload":{}}`,
		`{"sessionId":"demo-1","type":"SessionCompleted","payload":{}}`,
	)
	if err != nil {
		log.Fatal(err)
	}
	snap, err := st.WaitSession(ctx, "demo-1", pos[len(pos)-1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(snap.State, snap.Version, snap.Terminal, snap.Goal)
	// Output: COMPLETED 3 true triage the alert
}

// KillProjector and StartProjector show what a service sees while the read
// model lags behind the events it sent.
func ExampleStack_KillProjector() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := testkit.Run(ctx, testkit.WithPartitions(1))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	pos, err := st.Send(ctx, `{"sessionId":"demo-2","type":"SessionCreated","payload":{}}`)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.WaitSession(ctx, "demo-2", pos[0]); err != nil {
		log.Fatal(err)
	}
	if err := st.KillProjector(); err != nil {
		log.Fatal(err)
	}
	pos, err = st.Send(ctx, `{"sessionId":"demo-2","type":"SessionStarted","payload":{}}`)
	if err != nil {
		log.Fatal(err)
	}
	stale, err := st.WaitSession(ctx, "demo-2") // no projector: still the old snapshot
	if err != nil {
		log.Fatal(err)
	}
	if err := st.StartProjector(ctx); err != nil {
		log.Fatal(err)
	}
	fresh, err := st.WaitSession(ctx, "demo-2", pos[0])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(stale.State, "->", fresh.State)
	// Output: CREATED -> ACTIVE
}
