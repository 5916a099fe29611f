package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestVerify damages a stored snapshot in Redis (a byte of it changed in
// place) behind a stack whose background verifier is off, so that only
// `correx verify` can see it: it reports the session (exit 1), repairs it
// with --repair (exit 0), and finds nothing left after.
func TestVerify(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{Redis: redisconn.Config{URL: srv.URL(), Prefix: "cv"}, Partitions: 2,
		FlushInterval: 20 * time.Millisecond, Projector: func(c *projector.Config) { c.VerifyRate = 0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	c, err := client.New(client.IngestURL(st.IngestURL), client.QueryURL(st.QueryURL))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		id := fmt.Sprintf("cv:s-%d", i)
		if _, err := c.SendAndWait(ctx, client.SessionCreated(id, client.Goal("verify me")), client.SessionStarted(id),
			client.ToolRequested(id)); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"CORREX_INGEST_URL": st.IngestURL, "CORREX_QUERY_URL": st.QueryURL}
	wantCode(t, runCLI(t, env, "", "verify", "--prefix", "cv:"), ExitOK)

	const damaged = "cv:s-2"
	key := fmt.Sprintf("cv:{b%03d}:s:%s", snapshot.Bucket(damaged), damaged)
	raw, err := rdb.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var s snapshot.Snapshot
	if err := snapshot.Decode(raw, &s); err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(raw, s.Digest[:])
	if at < 0 {
		t.Fatal("the digest is not in the stored bytes")
	}
	if err := rdb.SetRange(ctx, key, int64(at), string([]byte{raw[at] ^ 0xff})).Err(); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, env, "", "verify", "--prefix", "cv:")
	wantCode(t, r, ExitError)
	if !strings.Contains(r.stdout, damaged) || !strings.Contains(r.stdout, "corrupt") || strings.Count(r.stdout, "cv:s-") != 1 {
		t.Errorf("stdout %q: want the damaged session alone, corrupt", r.stdout)
	}
	if !strings.Contains(r.stderr, "4 sessions checked, 1 mismatches, 1 left") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = runCLI(t, env, "", "verify", "--prefix", "cv:", "--repair")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, damaged) || !strings.Contains(r.stderr, "1 mismatches, 0 left") {
		t.Errorf("repair: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = runCLI(t, env, "", "verify", "--prefix", "cv:", "-o", "json")
	wantCode(t, r, ExitOK)
	if !strings.Contains(r.stdout, `"checked": 4`) || !strings.Contains(r.stdout, `"mismatches": []`) {
		t.Errorf("after the repair: %s", r.stdout)
	}
	if got, err := rdb.Get(ctx, key).Bytes(); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("the repaired snapshot is not the projector's: %v", err)
	}
}
