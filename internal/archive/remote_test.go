package archive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/wire"
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

// TestRemoteWriteBoundedByProgress: a Remote's write of a session whose
// history takes several times the timeout to produce succeeds and leaves
// the archive reachable (the timeout bounds the bucket's steps, not the
// whole write); one whose bucket stops taking parts midway (the S3 server
// hung with SIGSTOP after the write began) fails with ErrUnreachable about
// a timeout later, and leaves no object.
func TestRemoteWriteBoundedByProgress(t *testing.T) {
	srv := s3test.Start(t)
	url := srv.Bucket(t, "progress")
	ctx := context.Background()
	// Long enough that the S3 server, on a loaded machine, takes a part
	// well within it (500 ms did not).
	const timeout = 1500 * time.Millisecond
	r, err := StartRemote(ctx, url, RemoteOptions{Timeout: timeout, Probe: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	testwait.Until(t, "the archive to be opened", 30*time.Second, r.Reachable)
	snaps := terminal(t)
	hist := history(4000, 0)
	slow := func(yield func(wire.HistoryEntry) error) error {
		for i, e := range hist {
			if i%200 == 199 {
				// A slow log read: 20 pauses, 4 timeouts in all.
				time.Sleep(timeout / 5)
			}
			if err := yield(e); err != nil {
				return err
			}
		}
		return nil
	}
	if err := r.PutStream(ctx, &Object{Snapshot: snaps[0], ArchivedAt: time.Now()}, slow); err != nil {
		t.Fatalf("a write slower than the timeout, with the bucket answering: %v", err)
	}
	if !r.Reachable() {
		t.Fatal("a slow write marked the archive unreachable")
	}
	if o, err := r.Get(ctx, snaps[0].ID); err != nil || len(o.History) != len(hist) {
		t.Fatalf("read back: %v", err)
	}

	// Hung midway: past the writer's 5 MiB buffer, the part upload hangs.
	var other = snaps[0]
	for _, sn := range snaps {
		if sn.ID != snaps[0].ID {
			other = sn
			break
		}
	}
	big := history(40000, 0) // about 9 MiB
	paused := false
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	hung := func(yield func(wire.HistoryEntry) error) error {
		for i, e := range big {
			if i == 100 {
				srv.Pause()
				paused = true
			}
			if err := yield(e); err != nil {
				return err
			}
		}
		return nil
	}
	start := time.Now()
	err = r.PutStream(ctx, &Object{Snapshot: other, ArchivedAt: time.Now()}, hung)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a write to a bucket that hung: %v, want ErrUnreachable", err)
	}
	if d := time.Since(start); d > timeout+5*time.Second {
		t.Errorf("the write to a hung bucket failed after %v (timeout %v)", d, timeout)
	}
	if r.Reachable() {
		t.Error("the hung write left the archive reachable")
	}
	srv.Resume()
	paused = false
	testwait.Until(t, "the archive to be reachable once the server continues", 30*time.Second, r.Reachable)
	if _, err := r.Get(ctx, other.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the aborted write, Get: %v, want ErrNotFound", err)
	}
}
