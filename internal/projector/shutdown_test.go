package projector

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
)

// TestShutdownDuringRedisOutage stops a projector gracefully while Redis
// hangs (SIGSTOP: connections stay open, nothing answers) and a batch is
// being retried against it: Run must give up after ShutdownTimeout and say
// so, instead of retrying until Redis comes back. Nothing is lost: the
// batch never reached its checkpoint, so a projector started once Redis is
// back folds it again.
func TestShutdownDuringRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): a graceful stop waiting out ShutdownTimeout against a hung Redis (about 20 s); make test runs it")
	}
	t.Parallel() // its own broker and redis-server; mostly waits out ShutdownTimeout
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"hung", syscall.SIGSTOP}, {"down", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			events := workloadEvents(41, 200)
			half := len(events) / 2
			e.produce(events[:half])
			cfg := e.config("outage")
			cfg.ShutdownTimeout = 2 * time.Second
			var logs lockedBuffer
			p := New(cfg, e.store("outage"), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			// puts counts the batches whose write began once Redis was
			// down: such a write can neither complete nor be given up
			// but by the shutdown timeout.
			var down atomic.Bool
			var puts atomic.Int64
			p.crash.hook = func(pt crashPoint) bool {
				if pt == crashBeforePut && down.Load() {
					puts.Add(1)
				}
				return false
			}
			c, cancel := contextWithCancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(c) }()
			e.waitCaughtUp("outage", 30*time.Second)

			down.Store(true)
			if tc.sig == syscall.SIGKILL {
				e.srv.Stop()
			} else if err := e.srv.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			restored := false
			restore := func() {
				if restored {
					return
				}
				restored = true
				if tc.sig == syscall.SIGKILL {
					e.srv.Restart(t)
				} else if err := e.srv.Signal(syscall.SIGCONT); err != nil {
					t.Error(err)
				}
			}
			defer restore()
			e.produce(events[half:])
			// A batch's write begun, not the first warning: the deadline
			// firers warn first ("firing deadlines", about a second
			// before a batch's first retry against a Redis that refuses
			// connections; a hung one's write warns only once it times
			// out), and a stop before the second half was fetched has
			// nothing to give up on: Run then rightly returns nil.
			testwait.Until(t, "a batch's write begun against the unreachable Redis", 30*time.Second, func() bool {
				return puts.Load() > 0
			})
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, ErrShutdownTimeout) {
					t.Fatalf("Run returned %v, want ErrShutdownTimeout", err)
				}
				t.Logf("Run: %v", err)
			case <-time.After(30 * time.Second):
				restore() // so that Run can end and the test with it
				err := <-done
				t.Fatalf("Run still waited for Redis 30s after the stop, with a shutdown timeout of %v (it returned %v once Redis was back)",
					cfg.ShutdownTimeout, err)
			}
			restore()
			// A new projector folds what the stopped one could not write.
			r := e.start(e.config("outage"), "outage", nil)
			e.waitCaughtUp("outage", 60*time.Second)
			if err := r.halt(); err != nil {
				t.Fatal(err)
			}
			e.assertSame(e.reference("ref"), e.dump("outage"))
		})
	}
}
