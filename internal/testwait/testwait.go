// Package testwait waits, in tests, for state that another goroutine or
// process changes: a session folded, a server listening, a key written.
//
// A test waits on what it can observe, never for a fixed time: a fixed
// sleep is either too short on a loaded machine (the test flakes) or too
// long everywhere else (the suite is slow). The functions here poll a
// condition with a short backoff (1 ms, doubling to 50 ms) until it holds
// or a timeout passes; the timeout only bounds a test that would otherwise
// hang, so make it generous.
//
// A condition runs on the calling goroutine, between sleeps, and must be
// safe to call concurrently with whatever it observes (read atomics, take
// the lock, ask the server).
package testwait

import (
	"testing"
	"time"

	"github.com/correx/sessions/pkg/backoff"
)

// pause is the wait between two calls of a condition.
var pause = backoff.Exponential{Min: time.Millisecond, Max: 50 * time.Millisecond}

// Until polls cond until it returns true, and fails the test with
// "timed out after <timeout> waiting for <what>" if it has not by timeout.
// Call it from the test's goroutine: it stops the test with t.Fatalf.
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Eventually(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// UntilSeen is Until for a condition that also says what it saw; the last
// thing it saw ends the failure message, so a timeout shows how far the
// state got.
func UntilSeen(t testing.TB, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var seen string
	if !Eventually(timeout, func() (ok bool) { ok, seen = cond(); return ok }) {
		t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, seen)
	}
}

// WhileProgressing polls cond until it returns true, and fails the test
// with "no progress for <stall> waiting for <what>: <seen>" once what cond
// says it saw has not changed for stall. It bounds a wait by the lack of
// progress rather than by the time the work takes: a loaded machine slows
// such a wait down without failing it, and a stuck one still fails it
// within stall. seen must describe the progress (offsets, counts), not
// something that changes without it (a clock).
func WhileProgressing(t testing.TB, what string, stall time.Duration, cond func() (bool, string)) {
	t.Helper()
	if ok, seen := Progressing(stall, cond); !ok {
		t.Fatalf("no progress for %v waiting for %s: %s", stall, what, seen)
	}
}

// Progressing polls cond like WhileProgressing, and reports whether it
// returned true before what it saw stopped changing for stall, with what
// it saw last. It does not fail the test: use it where the caller names
// what is left, or checks it later.
func Progressing(stall time.Duration, cond func() (bool, string)) (bool, string) {
	var last string
	since := time.Now()
	for i := 0; ; i++ {
		ok, seen := cond()
		if ok {
			return true, seen
		}
		if i == 0 || seen != last {
			last, since = seen, time.Now()
		} else if time.Since(since) >= stall {
			return false, seen
		}
		time.Sleep(pause.Wait(i))
	}
}

// Eventually polls cond until it returns true, for at most timeout, and
// reports whether it did. cond is called at least once, and once more at
// the deadline, so a condition that holds by then is not reported false.
// It does not fail the test: use it where a timeout is a result to check
// (or to report from a goroutine other than the test's).
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(pause.Wait(i), left))
	}
}
