package projector

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWriteOrder pins the steps of a write, and the crash points between
// them, to the order the package doc argues exactly-once effect from
// ("How exactly-once effect is kept"), restated here independently of
// writeSteps: reordering the table fails it.
func TestWriteOrder(t *testing.T) {
	want := []string{
		"crash before-put",
		"mark",      // before any write: a Cluster master that changes during them is noticed
		"outbox",    // before the snapshots: a replay that skips a stored snapshot finds what its record did
		"snapshots", // fenced
		"crash after-put",
		"deadlines", // after the snapshots, before the checkpoints: a crash between replays and arms them again
		"crash after-deadlines",
		"records",                         // the change feed and the derived events, after the snapshots they reflect
		"children",                        // the cascade, after the stored ends it reads
		"acknowledged (with checkpoints)", // dead letters and derived records, before a checkpoint passes them
		"crash before-checkpoint",
		// after the records they reflect are acknowledged (a restore skips
		// them), before the checkpoints, only for partitions Redis kept
		"changelog (with checkpoints, changelog)",
		"crash after-changelog",
		"replicas (with checkpoints)", // a failover cannot lose what a checkpoint passed
		"checkpoints (with checkpoints)",
		"crash after-checkpoint",
		// after its snapshots are acknowledged: never ahead of them
		"changelog-checkpoints (with checkpoints, changelog)",
		"crash after-changelog-checkpoint",
		"offsets (with checkpoints)", // for lag tools only, last
	}
	got := []string{"crash " + crashBeforePut.String()}
	for _, s := range writeSteps {
		name := s.step.String()
		switch {
		case s.checkpointed && s.changelog:
			name += " (with checkpoints, changelog)"
		case s.checkpointed:
			name += " (with checkpoints)"
		case s.changelog:
			name += " (changelog)"
		}
		got = append(got, name)
		if s.crash != crashNone {
			got = append(got, "crash "+s.crash.String())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the write's steps:\n got %s\nwant %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	for i, s := range writeSteps {
		if s.step != writeStep(i) || s.run == nil {
			t.Errorf("writeSteps[%d] is %v, want step %v with a function", i, s.step, writeStep(i))
		}
	}
}

// TestWriteCrashPointsInOrder runs a projector and records every crash
// point its writes reach: each write reaches them in the order of
// writeSteps, the checkpoints' only when it has some, the changelog's only
// when it is on.
func TestWriteCrashPointsInOrder(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("changelog=%v", on), func(t *testing.T) { testWriteCrashPointsInOrder(t, on) })
	}
}

func testWriteCrashPointsInOrder(t *testing.T, changelogOn bool) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(5, 200))
	var mu sync.Mutex
	var seen []crashPoint
	cfg := e.config("a")
	cfg.ChangelogEnabled = changelogOn
	r := e.start(cfg, "order", func(p crashPoint) bool {
		if p != crashFold {
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
		}
		return false
	})
	e.waitCaughtUp("order", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	full := []crashPoint{crashBeforePut, crashAfterPut, crashAfterDeadlines, crashBeforeCheckpoint, crashAfterCheckpoint}
	if changelogOn {
		full = []crashPoint{crashBeforePut, crashAfterPut, crashAfterDeadlines, crashBeforeCheckpoint, crashAfterChangelog,
			crashAfterCheckpoint, crashAfterChangelogCheckpoint}
	}
	writes, checkpointed := 0, 0
	for rest := seen; len(rest) > 0; writes++ {
		n := 0
		for n < len(full) && n < len(rest) && rest[n] == full[n] {
			n++
		}
		if n != 3 && n != len(full) {
			t.Fatalf("write %d reached %v, want %v or its first three", writes, rest[:min(len(rest), len(full))], full)
		}
		if n == len(full) {
			checkpointed++
		}
		rest = rest[n:]
	}
	if checkpointed == 0 {
		t.Fatalf("none of %d writes wrote checkpoints", writes)
	}
	t.Logf("%d writes, %d with checkpoints", writes, checkpointed)
}

// TestCrashPointNames keeps the names tests and their logs know the crash
// points by.
func TestCrashPointNames(t *testing.T) {
	want := []string{"fold", "before-put", "after-put", "after-deadlines", "before-checkpoint", "after-checkpoint",
		"cascade-page", "fired", "rebuild-reset", "rebuild-deleted", "after-changelog", "after-changelog-checkpoint",
		"restore-written", "restore-checkpoint"}
	var got []string
	for p := crashNone + 1; p < numCrashPoints; p++ {
		got = append(got, p.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("crash points: got %v, want %v", got, want)
	}
}
