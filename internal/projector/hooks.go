package projector

import (
	"context"
	"errors"
	"sync/atomic"
)

// errCrashed ends Run after a test hook simulated a crash.
var errCrashed = errors.New("projector: simulated crash")

// crashPoints lets tests simulate a crash at named points of the fold and
// of a write ("fold", "before-put", "after-put", "before-checkpoint",
// "after-checkpoint", and "cascade-page" after each page of a cascade's
// children). Safe for concurrent use once hook is set (before Run).
type crashPoints struct {
	// hook, when set by tests, is called at named points and returns true
	// to simulate a crash there.
	hook    func(point string) bool
	crashed atomic.Bool
	// stop cancels the flush context on a crash, so that nothing more is
	// written; set by Run.
	stop context.CancelFunc
}

// at reports whether a test hook asks for a crash at point, and records it.
func (c *crashPoints) at(point string) bool {
	if c.hook == nil || c.crashed.Load() {
		return c.crashed.Load()
	}
	if c.hook(point) {
		c.crashed.Store(true)
		if c.stop != nil {
			c.stop()
		}
		return true
	}
	return false
}
