package testkit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/testkit"
)

func TestAgainstCorrex(t *testing.T) {
	st := testkit.Start(t, testkit.WithAuth()) // stopped when the test ends
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Your service gets st.IngestURL, st.QueryURL and a tenant's token; here
	// the test sends the events itself.
	pos, err := st.SendAs(ctx, st.Tokens.Acme,
		`{"sessionId":"acme:run-1","type":"SessionCreated","payload":{"goal":"summarise the incident"}}`,
		`{"sessionId":"acme:run-1","type":"SessionStarted","payload":{}}`,
	)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.WaitSession(ctx, "acme:run-1", pos[len(pos)-1])
	if err != nil {
		t.Fatal(err)
	}
	if snap.State != "ACTIVE" || snap.Goal != "summarise the incident" {
		t.Fatalf("got %s %q", snap.State, snap.Goal)
	}

	// Another tenant's token cannot touch acme's sessions.
	var refused *testkit.StatusError
	_, err = st.SendAs(ctx, st.Tokens.Globex, `{"sessionId":"acme:run-1","type":"SessionPaused"}`)
	if !errors.As(err, &refused) || refused.Status != http.StatusForbidden {
		t.Fatalf("globex wrote to acme: %v", err)
	}

	// While the projector is down, reads show the last folded snapshot.
	if err := st.KillProjector(); err != nil {
		t.Fatal(err)
	}
	pos, err = st.Send(ctx, `{"sessionId":"acme:run-1","type":"SessionCompleted"}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.StartProjector(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.WaitFolded(ctx, pos[0]); err != nil {
		t.Fatal(err)
	}
}
