package projector

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// lossStep is one step of a loss scenario: at the n-th time the projector
// reaches point (counted from the previous step), Redis is emptied
// (FLUSHALL), saved, or put back to what was saved (gone back in time, as a
// lagging replica promoted would be), and the projector may be killed right
// there.
type lossStep struct {
	point             crashPoint
	n                 int
	flush, save, back bool
	crash             bool
}

// losses runs the steps from the projector's crash points, across the
// restarts of a crashed projector.
type losses struct {
	e     *env
	mu    sync.Mutex
	steps []lossStep
	i     int
	hits  int
	saved map[string]string
	// killed is set when a step killed the running projector.
	killed bool
}

func (l *losses) hook(point crashPoint) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.i >= len(l.steps) || l.steps[l.i].point != point {
		return false
	}
	if l.hits++; l.hits < l.steps[l.i].n {
		return false
	}
	s := l.steps[l.i]
	l.i, l.hits = l.i+1, 0
	switch {
	case s.save:
		l.saved = l.e.saveRedis()
	case s.back:
		l.e.restoreRedis(l.saved)
	case s.flush:
		if err := l.e.rdb.FlushAll(ctx).Err(); err != nil {
			l.e.t.Error(err)
		}
	}
	l.killed = l.killed || s.crash
	return s.crash
}

// killedRun reports whether a step killed the running projector.
func (l *losses) killedRun() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.killed
}

// takeKill reports whether a step killed the running projector, and
// forgets it for the next run.
func (l *losses) takeKill() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.killed
	l.killed = false
	return k
}

func (l *losses) done() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.i == len(l.steps)
}

// saveRedis returns every key of Redis, dumped.
func (e *env) saveRedis() map[string]string {
	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	saved := map[string]string{}
	for _, k := range keys {
		v, err := e.rdb.Dump(ctx, k).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		saved[k] = v
	}
	return saved
}

// restoreRedis empties Redis and puts back what saveRedis returned.
func (e *env) restoreRedis(saved map[string]string) {
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		e.t.Error(err)
	}
	for k, v := range saved {
		if err := e.rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			e.t.Error(err)
		}
	}
}

// TestRedisLostAtEveryStep empties Redis, or sends it back in time, at each
// step of a flush and of the rebuild that follows, once or twice, with or
// without a projector killed right there and restarted: the read model
// must end equal to an uninterrupted fold every time. A loss is noticed
// only through the checkpoints, so each case puts one where the projector
// knows least: before the first checkpoint of a fresh fold or of a
// rebuild, between a rebuild's steps, and across a restart.
func TestRedisLostAtEveryStep(t *testing.T) {
	e := newEnv(t, 3)
	e.produce(workloadEvents(41, 160))
	want := e.reference("ref")
	flush := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, flush: true} }
	kill := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, crash: true} }
	flushKill := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, flush: true, crash: true} }
	save := lossStep{point: crashAfterCheckpoint, n: 2, save: true}
	back := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, back: true} }
	cases := []struct {
		name  string
		steps []lossStep
	}{
		{"emptied before the first checkpoint", []lossStep{flush(crashAfterPut, 1)}},
		{"emptied before the first checkpoint, after a restart", []lossStep{kill(crashBeforePut, 1), flush(crashAfterPut, 1)}},
		{"emptied with the first checkpoint, then killed", []lossStep{flushKill(crashAfterCheckpoint, 1)}},
		{"emptied, then again before the rebuild's first checkpoint", []lossStep{flush(crashAfterCheckpoint, 2), flush(crashAfterPut, 1)}},
		{"emptied, then again after the rebuild's reset", []lossStep{flush(crashAfterCheckpoint, 2), flush(crashRebuildReset, 1)}},
		{"emptied, then again after the rebuild's deletes", []lossStep{flush(crashAfterCheckpoint, 2), flush(crashRebuildDeleted, 1)}},
		{"emptied, killed in the rebuild, emptied after the restart", []lossStep{flush(crashAfterCheckpoint, 2), kill(crashAfterPut, 2), flush(crashAfterPut, 1)}},
		{"emptied twice, killed twice", []lossStep{flush(crashAfterCheckpoint, 2), kill(crashAfterCheckpoint, 1), flush(crashBeforeCheckpoint, 1), kill(crashAfterPut, 1)}},
		{"back in time, killed after the rebuild's reset", []lossStep{save, back(crashAfterCheckpoint, 2), kill(crashRebuildReset, 1)}},
		{"back in time, killed after the rebuild's deletes", []lossStep{save, back(crashAfterCheckpoint, 2), kill(crashRebuildDeleted, 1)}},
		{"back in time, killed in the rebuild's first batch", []lossStep{save, back(crashAfterCheckpoint, 2), kill(crashAfterCheckpoint, 1)}},
		{"back in time, killed, emptied after the restart", []lossStep{save, back(crashAfterCheckpoint, 2), kill(crashAfterPut, 1), flush(crashAfterPut, 2)}},
		{"emptied, back in time between the rebuild's reset and its deletes, killed", []lossStep{save, flush(crashAfterCheckpoint, 1), back(crashRebuildReset, 1), kill(crashAfterPut, 1)}},
		{"emptied, back in time after the rebuild's deletes, killed", []lossStep{save, flush(crashAfterCheckpoint, 1), back(crashRebuildDeleted, 1), kill(crashAfterPut, 1)}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, brokers: e.brokers, rdb: e.rdb, srv: e.srv}
			prefix := "loss" + string(rune('a'+i))
			l := &losses{e: e, steps: c.steps}
			cfg := e.config("loss")
			cfg.Group = prefix
			for run := 0; ; run++ {
				if run > len(c.steps) {
					t.Fatalf("%d restarts for %d steps", run, len(c.steps))
				}
				r := e.start(cfg, prefix, l.hook)
				if !testwait.Eventually(30*time.Second, func() bool { return l.killedRun() || l.done() }) {
					t.Fatalf("step %d of %d not reached", l.i, len(c.steps))
				}
				if l.takeKill() {
					select {
					case err := <-r.done:
						if !errors.Is(err, errCrashed) {
							t.Fatalf("run %d: %v", run, err)
						}
					case <-time.After(30 * time.Second):
						t.Fatalf("run %d: still running 30s after it was killed", run)
					}
					continue // killed: start again
				}
				e.waitCaughtUp(prefix, 60*time.Second)
				if err := r.halt(); err != nil {
					t.Fatal(err)
				}
				break
			}
			e.assertSame(want, e.dump(prefix))
		})
	}
}

// TestRestartResumesARebuild starts a projector on a partition whose
// rebuild was cut short right after its checkpoint was reset (the owner was
// killed before its deletes): the new owner deletes the partition's
// snapshots again before folding, reports the rebuild on /readyz until it
// ends, and ends equal to an uninterrupted fold.
func TestRestartResumesARebuild(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(43, 60))
	want := e.reference("ref")
	st := e.store("resume")
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var s snapshot.Snapshot
	var red fsm.Reducer
	ev := fsm.NewEvent(fsm.EventID{7}, "left-over", fsm.SessionCreated, at, fsm.Fields{Goal: "from before the loss"})
	s.Fold(&red, &ev, snapshot.Position{Partition: 0, Offset: 1 << 40})
	if _, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(&s)}); err != nil {
		t.Fatal(err)
	}
	if err := st.ResetCheckpoint(ctx, topic, 0, endOffsets(t, e.brokers)[0], time.Now()); err != nil {
		t.Fatal(err)
	}
	var rp atomic.Pointer[Projector]
	var readyErr atomic.Value
	r := e.start(e.config("resume"), "resume", func(point crashPoint) bool {
		if p := rp.Load(); point == crashBeforePut && p != nil && readyErr.Load() == nil {
			readyErr.Store(fmt.Sprint(p.Ready(ctx)))
		}
		return false
	})
	rp.Store(r.p)
	e.waitCaughtUp("resume", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if got, _ := readyErr.Load().(string); !strings.Contains(got, "partition 0: rebuilding from the log") {
		t.Fatalf("readiness during the resumed rebuild: %q, want partition 0 rebuilding", got)
	}
	cps, err := st.Checkpoints(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if cps[0].RebuildUntil != 0 {
		t.Fatalf("the rebuild mark stayed after the rebuild: %+v", cps[0])
	}
	e.assertSame(want, e.dump("resume"))
}
