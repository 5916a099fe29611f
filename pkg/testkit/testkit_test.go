package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/testkit"
)

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	// Generous: the bound is there so that a broken stack fails the test
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ev(id, typ string) map[string]any {
	return map[string]any{"sessionId": id, "type": typ, "payload": map[string]any{}}
}

func TestStartSendWait(t *testing.T) {
	started := time.Now()
	st := testkit.Start(t)
	t.Logf("testkit.Start: ready in %v", time.Since(started).Round(time.Millisecond))
	ctx := ctxFor(t)

	pos, err := st.Send(ctx, ev("s-1", "SessionCreated"), `{"sessionId":"s-1","type":"SessionStarted","payload":{}}`,
		[]byte(`{"sessionId":"s-2","type":"SessionCreated","payload":{"goal":"g"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(pos) != 3 {
		t.Fatalf("positions %v, want 3", pos)
	}
	snap, err := st.WaitSession(ctx, "s-1", pos[1])
	if err != nil {
		t.Fatal(err)
	}
	if snap.State != "ACTIVE" || snap.Version != 2 {
		t.Fatalf("s-1: state %s version %d, want ACTIVE 2", snap.State, snap.Version)
	}
	if err := st.WaitFolded(ctx, pos[2]); err != nil {
		t.Fatal(err)
	}
	if snap, err := st.WaitSession(ctx, "s-2"); err != nil || snap.Goal != "g" {
		t.Fatalf("s-2: %+v %v", snap, err)
	}
	if len(st.Brokers) == 0 || st.RedisURL == "" || st.ProjectorURL == "" {
		t.Fatalf("endpoints missing: %+v", st)
	}
	if st.Tokens != (testkit.Tokens{}) {
		t.Fatal("tokens without WithAuth")
	}
}

func TestSendRefused(t *testing.T) {
	st := testkit.Start(t, testkit.WithPartitions(1))
	ctx := ctxFor(t)
	_, err := st.Send(ctx, ev("", "SessionCreated"))
	var se *testkit.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusBadRequest {
		t.Fatalf("an event without sessionId: %v, want a 400 StatusError", err)
	}
	// The error names the field and the reason, as the client's does.
	const want = "client: send: status 400: 1 problem in 1 event; nothing was produced; event 0 sessionId: must be 1-128 characters of [A-Za-z0-9._:-]"
	if err.Error() != want {
		t.Errorf("error\n got %q\nwant %q", err, want)
	}
	// The index is the event's in the call, across its requests.
	events := make([]any, 1002)
	for i := range events {
		events[i] = ev(fmt.Sprintf("refused-%d", i), "SessionCreated")
	}
	events[1001] = ev("", "SessionCreated")
	if _, err := st.Send(ctx, events...); err == nil || !strings.HasSuffix(err.Error(), "; event 1001 sessionId: must be 1-128 characters of [A-Za-z0-9._:-]") {
		t.Errorf("the second request's refusal: %v, want it to name event 1001", err)
	}
	if _, err := st.Send(ctx, "{not json"); err == nil {
		t.Fatal("invalid JSON sent")
	}
	if _, err := client.ParsePosition("x:1"); !errors.Is(err, testkit.ErrBadPosition) {
		t.Fatalf("bad position: %v", err)
	}
}

func TestWithAuth(t *testing.T) {
	st := testkit.Start(t, testkit.WithAuth())
	ctx := ctxFor(t)
	tok := st.Tokens
	if tok.Acme == "" || tok.Globex == "" || tok.Admin == "" {
		t.Fatalf("tokens %+v", tok)
	}
	if _, err := st.SendAs(ctx, "", ev(testkit.AcmePrefix+"1", "SessionCreated")); err == nil {
		t.Fatal("sent without a token")
	}
	var se *testkit.StatusError
	if _, err := st.SendAs(ctx, tok.Acme, ev(testkit.GlobexPrefix+"1", "SessionCreated")); !errors.As(err, &se) || se.Status != http.StatusForbidden {
		t.Fatalf("acme sending a globex session: %v, want 403", err)
	}
	pos, err := st.SendAs(ctx, tok.Acme, ev(testkit.AcmePrefix+"1", "SessionCreated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WaitSession(ctx, testkit.AcmePrefix+"1", pos[0]); err != nil {
		t.Fatal(err)
	}
}

func TestKillAndRestartProjector(t *testing.T) {
	st := testkit.Start(t, testkit.WithRedisURL(redistest.Start(t).URL()), testkit.WithPartitions(2))
	ctx := ctxFor(t)
	pos, err := st.Send(ctx, ev("k-1", "SessionCreated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WaitSession(ctx, "k-1", pos[0]); err != nil {
		t.Fatal(err)
	}

	if err := st.KillProjector(); err != nil {
		t.Fatal(err)
	}
	if err := st.KillProjector(); err == nil {
		t.Fatal("killed a stopped projector")
	}
	pos, err = st.Send(ctx, ev("k-1", "SessionStarted"))
	if err != nil {
		t.Fatal(err)
	}
	// Nothing folds while the projector is down.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := st.WaitFolded(short, pos[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("folded without a projector: %v", err)
	}
	if err := st.StartProjector(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := st.WaitSession(ctx, "k-1", pos[0])
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 2 {
		t.Fatalf("after the restart: version %d, want 2", snap.Version)
	}

	if err := st.RestartProjector(ctx); err != nil {
		t.Fatal(err)
	}
	pos, err = st.Send(ctx, ev("k-1", "SessionPaused"))
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := st.WaitSession(ctx, "k-1", pos[0]); err != nil || snap.Version != 3 {
		t.Fatalf("after a graceful restart: %+v %v", snap, err)
	}
}
