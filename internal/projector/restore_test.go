package projector

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// restoreCounts counts what a projector folded and restored.
type restoreCounts struct {
	nopObserver
	folded, skipped  atomic.Int64
	restores, gaps   atomic.Int64
	restoredSessions atomic.Int64
}

func (c *restoreCounts) Folded(*kgo.Record, *fsm.Event, *snapshot.Snapshot, fsm.Outcome) { c.folded.Add(1) }
func (c *restoreCounts) Skipped(*kgo.Record)                                               { c.skipped.Add(1) }
func (c *restoreCounts) Restored(_ int32, n int, gap bool) {
	c.restores.Add(1)
	c.restoredSessions.Add(int64(n))
	if gap {
		c.gaps.Add(1)
	}
}

// changelogConfig is the test configuration with the changelog on.
func (e *env) changelogConfig(instance string) Config {
	cfg := e.config(instance)
	cfg.ChangelogEnabled = true
	return cfg
}

// startCounting starts a projector with the changelog on and counts.
func (e *env) startCounting(prefix string, hook func(crashPoint) bool) (*running, *restoreCounts) {
	c := &restoreCounts{}
	cfg := e.changelogConfig("cl")
	cfg.Group = "g-" + prefix
	r := e.startWith(cfg, prefix, func(p *Projector) {
		p.crash.hook = hook
		p.obs = c
	})
	return r, c
}

// TestRestoreUnderARunningProjector empties Redis under a running
// projector: every partition is restored from the changelog (not folded
// from the start of the log: the fold after the loss reads only what was
// produced after it), and the read model ends equal to an uninterrupted
// fold.
func TestRestoreUnderARunningProjector(t *testing.T) {
	e := newEnv(t, 3)
	events := workloadEvents(61, 300)
	half := len(events) / 2
	e.produce(events[:half])
	r, c := e.startCounting("a", nil)
	e.waitCaughtUp("a", 60*time.Second)
	before := c.folded.Load() + c.skipped.Load()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if !testwait.Eventually(30*time.Second, func() bool { return c.restores.Load() == 3 }) {
		t.Fatalf("%d partitions restored from the changelog, want 3", c.restores.Load())
	}
	e.waitCaughtUp("a", 60*time.Second)
	if after := c.folded.Load() + c.skipped.Load(); after != before {
		t.Fatalf("the restore folded %d records again: it read the log, not the changelog", after-before)
	}
	e.produce(events[half:])
	e.waitCaughtUp("a", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	got := e.dump("a")
	want := e.reference("ref")
	e.assertSame(want, got)
	if n := c.restoredSessions.Load(); n == 0 {
		t.Fatal("no session restored")
	}
}

// TestRestoreOnStart empties Redis while the projector is stopped: the
// next start restores every partition from the changelog and folds only
// what came after its checkpoints.
func TestRestoreOnStart(t *testing.T) {
	e := newEnv(t, 3)
	events := workloadEvents(62, 300)
	half := len(events) / 2
	e.produce(events[:half])
	r, _ := e.startCounting("b", nil)
	e.waitCaughtUp("b", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.produce(events[half:])
	r, c := e.startCounting("b", nil)
	e.waitCaughtUp("b", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if c.restores.Load() != 3 {
		t.Fatalf("%d partitions restored from the changelog, want 3", c.restores.Load())
	}
	if n := c.folded.Load() + c.skipped.Load(); n > int64(len(events)-half) {
		t.Fatalf("the restart folded %d records, more than the %d produced after the changelog's checkpoints", n, len(events)-half)
	}
	got := e.dump("b")
	e.assertSame(e.reference("ref"), got)
}

// TestRestoreSkipsArchived: a session whose last changelog record says it
// was archived is not written back by a restore.
func TestRestoreSkipsArchived(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(63, 80))
	r, _ := e.startCounting("d", nil)
	e.waitCaughtUp("d", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	stored := e.dump("d")
	var gone string
	var s snapshot.Snapshot
	for id, b := range stored {
		if err := snapshot.Decode(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.Terminal() {
			gone = id
			break
		}
	}
	if gone == "" {
		t.Fatal("no terminal session to archive")
	}
	if err := snapshot.Decode(stored[gone], &s); err != nil {
		t.Fatal(err)
	}
	cl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, changelog.ArchivedRecord(changelog.Topic(topic), gone, s.Position)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, c := e.startCounting("d", nil)
	e.waitCaughtUp("d", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if c.restores.Load() != 2 {
		t.Fatalf("%d partitions restored, want 2", c.restores.Load())
	}
	got := e.dump("d")
	if _, ok := got[gone]; ok {
		t.Fatalf("the archived session %s was written back", gone)
	}
	delete(stored, gone)
	e.assertSame(stored, got)
}

var _ = fmt.Sprint
var _ = strings.Contains
var _ = kafka.DLQTopic
