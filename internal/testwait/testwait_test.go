package testwait_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
)

// fakeT records a failure; Fatalf ends the calling goroutine as the real
// one does.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls wait with a fake T on a goroutine of its own (Fatalf ends it)
// and returns the failure message, empty if wait returned.
func run(wait func(testing.TB)) string {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(f)
	}()
	<-done
	return f.failed
}

func TestUntilFailsWithWhatItWaitedFor(t *testing.T) {
	start := time.Now()
	msg := run(func(tb testing.TB) {
		testwait.Until(tb, "the session to fold", 30*time.Millisecond, func() bool { return false })
	})
	if want := "timed out after 30ms waiting for the session to fold"; msg != want {
		t.Errorf("failure = %q, want %q", msg, want)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Errorf("gave up after %v, before the 30ms timeout", waited)
	}
}

func TestUntilSeenReportsTheLastThingSeen(t *testing.T) {
	var n int
	msg := run(func(tb testing.TB) {
		testwait.UntilSeen(tb, "three replicas", 20*time.Millisecond, func() (bool, string) {
			n++
			return false, fmt.Sprintf("poll %d", n)
		})
	})
	if want := fmt.Sprintf("timed out after 20ms waiting for three replicas: poll %d", n); msg != want {
		t.Errorf("failure = %q, want %q", msg, want)
	}
	if n < 2 {
		t.Errorf("cond called %d times, want it polled", n)
	}
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	if msg := run(func(tb testing.TB) {
		testwait.Until(tb, "the third poll", 10*time.Second, func() bool { calls++; return calls == 3 })
	}); msg != "" {
		t.Fatalf("failed: %s", msg)
	}
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3: Until returns as soon as it holds", calls)
	}
}

func TestEventually(t *testing.T) {
	if testwait.Eventually(10*time.Millisecond, func() bool { return false }) {
		t.Error("Eventually(false) = true")
	}
	calls := 0
	if !testwait.Eventually(0, func() bool { calls++; return true }) || calls != 1 {
		t.Errorf("Eventually(0, true) = false or cond called %d times, want true after one call", calls)
	}
	// the condition that holds at the deadline counts
	deadline := time.Now().Add(20 * time.Millisecond)
	if !testwait.Eventually(20*time.Millisecond, func() bool { return !time.Now().Before(deadline) }) {
		t.Error("a condition that holds at the deadline was reported false")
	}
}

func TestWhileProgressingWaitsAsLongAsTheStateMoves(t *testing.T) {
	calls := 0
	start := time.Now()
	if msg := run(func(tb testing.TB) {
		testwait.WhileProgressing(tb, "the offsets", 40*time.Millisecond, func() (bool, string) {
			calls++
			time.Sleep(5 * time.Millisecond)
			return time.Since(start) > 200*time.Millisecond, fmt.Sprintf("offset %d", calls)
		})
	}); msg != "" {
		t.Fatalf("failed while the state moved: %s", msg)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("returned after %v, before the condition held", waited)
	}
}

func TestWhileProgressingFailsOnceTheStateStops(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(func(tb testing.TB) {
		testwait.WhileProgressing(tb, "the offsets", 60*time.Millisecond, func() (bool, string) {
			calls++
			return false, fmt.Sprintf("offset %d", min(calls, 3))
		})
	})
	if want := "no progress for 60ms waiting for the offsets: offset 3"; msg != want {
		t.Errorf("failure = %q, want %q", msg, want)
	}
	if waited := time.Since(start); waited < 60*time.Millisecond {
		t.Errorf("gave up after %v, before 60ms without progress", waited)
	}
}

func TestProgressingReportsWhatItSawLastWithoutFailing(t *testing.T) {
	calls := 0
	ok, seen := testwait.Progressing(60*time.Millisecond, func() (bool, string) {
		calls++
		return false, fmt.Sprintf("%d keys", min(calls, 3))
	})
	if ok || seen != "3 keys" {
		t.Errorf("Progressing = %v, %q; want false, %q", ok, seen, "3 keys")
	}
	calls = 0
	ok, seen = testwait.Progressing(time.Minute, func() (bool, string) {
		calls++
		return calls == 4, fmt.Sprintf("%d keys", calls)
	})
	if !ok || seen != "4 keys" {
		t.Errorf("Progressing = %v, %q; want true, %q", ok, seen, "4 keys")
	}
}
