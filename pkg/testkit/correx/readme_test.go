//go:build integration

package correx_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/testkit/correx"
)

func TestAgainstCorrexContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := correx.Run(ctx, correx.WithPartitions(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Terminate(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ingest, err := c.IngestURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	query, err := c.QueryURL(ctx)
	if err != nil {
		t.Fatal(err)
	}

	resp, err := http.Post(ingest+"/v1/events", "application/json",
		strings.NewReader(`{"sessionId":"run-1","type":"SessionCreated","payload":{"goal":"g"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("send: %s", resp.Status)
	}
	// Poll until the projector has folded the event.
	for {
		resp, err := http.Get(query + "/v1/sessions/run-1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Logf("%s", body)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("not folded: %s %s", resp.Status, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
