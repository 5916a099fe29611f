package projector

import (
	"context"
	"errors"
	"sync/atomic"
)

// errCrashed ends Run after a test hook simulated a crash.
var errCrashed = errors.New("projector: simulated crash")

// crashPoint is a point where tests may simulate a crash: in the fold,
// at the boundaries of a write's steps (writeSteps), after a page of a
// cascade's children, after a firing, and between a rebuild's or a
// restore's steps.
type crashPoint int

const (
	crashNone                     crashPoint = iota
	crashFold                                // before each record is folded
	crashBeforePut                           // a write begins (before its first step)
	crashAfterPut                            // the snapshots are stored
	crashAfterDeadlines                      // the deadlines are stored
	crashBeforeCheckpoint                    // the records are acknowledged
	crashAfterCheckpoint                     // the checkpoints are stored
	crashCascadePage                         // a page of a cascade's children is produced
	crashFired                               // a firing's records are acknowledged
	crashRebuildReset                        // a rebuild's checkpoint is put back to 0
	crashRebuildDeleted                      // a rebuilt partition's snapshots are deleted
	crashAfterChangelog                      // the snapshots are acknowledged in the changelog
	crashAfterChangelogCheckpoint            // the changelog's checkpoint records are handed to the client
	crashRestoreWritten                      // a restore's snapshots, deadlines and children are stored
	crashRestoreCheckpoint                   // a restore's checkpoint is stored, before the fold from it
	numCrashPoints
)

var crashPointNames = [numCrashPoints]string{"", "fold", "before-put", "after-put", "after-deadlines",
	"before-checkpoint", "after-checkpoint", "cascade-page", "fired", "rebuild-reset", "rebuild-deleted",
	"after-changelog", "after-changelog-checkpoint", "restore-written", "restore-checkpoint"}

func (c crashPoint) String() string {
	if c < 0 || c >= numCrashPoints {
		return "crashPoint(?)"
	}
	return crashPointNames[c]
}

// crashPoints lets tests simulate a crash at the crash points. Safe for
// concurrent use once hook is set (before Run).
type crashPoints struct {
	// hook, when set by tests, is called at each crash point reached and
	// returns true to simulate a crash there.
	hook    func(crashPoint) bool
	crashed atomic.Bool
	// stop cancels the flush context on a crash, so that nothing more is
	// written; set by Run.
	stop context.CancelFunc
}

// at reports whether a test hook asks for a crash at point, and records it.
func (c *crashPoints) at(point crashPoint) bool {
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
