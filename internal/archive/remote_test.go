package archive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/testwait"
)

// TestRemoteOutage: a Remote starts while the S3 server refuses
// connections, opens the bucket once it answers, and while the server is
// killed or hung (SIGSTOP) reports it unreachable and fails each call at
// once, instead of after the timeout; once the server is back it works
// again.
func TestRemoteOutage(t *testing.T) {
	srv := s3test.Start(t)
	url := srv.Bucket(t, "outage")
	snaps := terminal(t)
	srv.Kill() // refused from the start
	ctx := context.Background()
	const timeout = 2 * time.Second
	r, err := StartRemote(ctx, url, RemoteOptions{Timeout: timeout, Probe: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	quick := func(what string, f func() error) {
		t.Helper()
		start := time.Now()
		err := f()
		if !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%s while the archive is down: %v, want ErrUnreachable", what, err)
		}
		// Well under the timeout: the call did not wait for the bucket.
		if d := time.Since(start); d >= timeout/2 {
			t.Fatalf("%s while the archive is down took %v (timeout %v)", what, d, timeout)
		}
	}
	down := func() {
		t.Helper()
		if r.Reachable() || r.Status() == nil {
			t.Fatal("reachable while the server is down")
		}
		quick("Get", func() error { _, err := r.Get(ctx, snaps[0].ID); return err })
		quick("List", func() error { _, _, err := r.List(ctx, "", "", 10); return err })
		quick("Put", func() error { return r.Put(ctx, &Object{Snapshot: snaps[0], ArchivedAt: time.Now()}) })
	}
	time.Sleep(300 * time.Millisecond)
	down()

	srv.Restart()
	testwait.Until(t, "the archive to be opened once the server answers", 30*time.Second, r.Reachable)
	if err := r.Put(ctx, &Object{Snapshot: snaps[0], ArchivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// Hung: the first call runs into the timeout and marks the archive
	// unreachable; the probes find it so too.
	srv.Pause()
	start := time.Now()
	if _, err := r.Get(ctx, snaps[0].ID); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Get from a hung server: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > timeout+time.Second {
		t.Fatalf("Get from a hung server took %v, longer than the timeout %v", d, timeout)
	}
	down()
	srv.Resume()
	testwait.Until(t, "the archive to be reachable once the server continues", 30*time.Second, r.Reachable)
	o, err := r.Get(ctx, snaps[0].ID)
	if err != nil || o.Snapshot.ID != snaps[0].ID {
		t.Fatalf("Get after the outage: %v, %v", o, err)
	}

	// Killed while open.
	srv.Kill()
	testwait.Until(t, "the probes to find the server gone", 30*time.Second, func() bool { return !r.Reachable() })
	down()
}
