//go:build integration

package correx_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/pkg/testkit/correx"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunContainers starts the stack with a token file, sends an event
// through ingest and reads it from query, then checks that Terminate leaves
// no container and no network behind.
func TestRunContainers(t *testing.T) {
	ctx := context.Background()
	token, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(auth.HashToken(token)+" admin name=test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	c, err := correx.Run(ctx, correx.WithPartitions(2), correx.WithTokensFile(tokens),
		testcontainers.WithEnv(map[string]string{"CORREX_PRODUCE_TIMEOUT": "3s"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("correx.Run: ready in %v", time.Since(started).Round(time.Millisecond))
	terminated := false
	t.Cleanup(func() {
		if !terminated {
			_ = c.Terminate(context.Background())
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
	if _, err := c.ProjectorURL(ctx); err != nil {
		t.Fatal(err)
	}
	ev := `{"sessionId":"tc-1","type":"SessionCreated","payload":{"goal":"g"}}`
	if status, body := do(t, "POST", ingest+"/v1/events", "", ev); status != http.StatusUnauthorized {
		t.Fatalf("without a token: %d %s, want 401", status, body)
	}
	status, body := do(t, "POST", ingest+"/v1/events", token, ev)
	if status != http.StatusAccepted {
		t.Fatalf("send: %d %s", status, body)
	}
	pos := body[strings.Index(body, `"position":"`)+len(`"position":"`):]
	pos = pos[:strings.IndexByte(pos, '"')]
	status, body = do(t, "GET", query+"/v1/sessions/tc-1?minPosition="+pos+"&wait=10s", token, "")
	if status != http.StatusOK || !strings.Contains(body, `"goal":"g"`) {
		t.Fatalf("read: %d %s", status, body)
	}

	if err := c.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	terminated = true
	if err := c.Terminate(ctx); err != nil {
		t.Fatalf("a second Terminate: %v", err)
	}
	dc, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	f := make(client.Filters).Add("label", correx.LabelKey+"="+c.RunID)
	ctrs, err := dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := dc.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs.Items) != 0 || len(nets.Items) != 0 {
		t.Fatalf("after Terminate: %d containers and %d networks labelled %s", len(ctrs.Items), len(nets.Items), c.RunID)
	}
}
