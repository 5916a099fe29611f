package projector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// restoreCounts counts what a projector folded and restored.
type restoreCounts struct {
	nopObserver
	folded, skipped  atomic.Int64
	restores, gaps   atomic.Int64
	restoredSessions atomic.Int64
}

func (c *restoreCounts) Folded(*kgo.Record, *fsm.Event, *snapshot.Snapshot, fsm.Outcome) {
	c.folded.Add(1)
}
func (c *restoreCounts) Skipped(*kgo.Record) { c.skipped.Add(1) }
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
	var rp atomic.Pointer[Projector]
	var during atomic.Value
	r, c := e.startCounting("a", func(p crashPoint) bool {
		if q := rp.Load(); p == crashRestoreWritten && q != nil && during.Load() == nil {
			during.Store(fmt.Sprint(q.Ready(ctx)))
		}
		return false
	})
	rp.Store(r.p)
	e.waitCaughtUp("a", 60*time.Second)
	before := c.folded.Load() + c.skipped.Load()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if !testwait.Eventually(30*time.Second, func() bool { return c.restores.Load() == 3 }) {
		t.Fatalf("%d partitions restored from the changelog, want 3", c.restores.Load())
	}
	e.waitCaughtUp("a", 60*time.Second)
	if got, _ := during.Load().(string); !strings.Contains(got, "restoring from the changelog") {
		t.Fatalf("readiness during the restore: %q, want a partition restoring from the changelog", got)
	}
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
	// A graceful stop waits for the changelog's last checkpoint records.
	cps, err := e.store("b").Checkpoints(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for id, l := range e.changelogLatest(3) {
		if !l.HasCheckpoint || l.Checkpoint.Offset != cps[id].Offset {
			t.Fatalf("partition %d: the changelog's checkpoint is %+v, Redis's %d", id, l.Checkpoint, cps[id].Offset)
		}
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

// TestStartWaitsForItsTopics: the group can assign the partitions before
// Run has created the changelog's topic (the client joins as soon as it
// exists). The start must not look the changelog up before that: it found
// the topic unknown, and kept finding it so in the client's metadata cache
// (franz-go's MetadataMinAge, 5s), so that a fresh stack folded nothing
// for seconds. The broker holds the changelog's CreateTopics until the
// changelog is looked up, or for a second after the partitions are
// assigned.
func TestStartWaitsForItsTopics(t *testing.T) {
	e := newEnv(t, 3)
	e.produce(workloadEvents(63, 40))
	var started atomic.Pointer[Projector]
	var held, lookedUp atomic.Bool
	names := func(ts []kmsg.MetadataRequestTopic) bool {
		for _, tp := range ts {
			if tp.Topic != nil && *tp.Topic == changelog.Topic(topic) {
				return true
			}
		}
		return false
	}
	e.kc.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.kc.KeepControl()
		if names(r.(*kmsg.MetadataRequest).Topics) && !held.Load() {
			lookedUp.Store(true)
		}
		return nil, nil, false
	})
	e.kc.ControlKey(int16(kmsg.CreateTopics), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.kc.KeepControl()
		for _, tp := range r.(*kmsg.CreateTopicsRequest).Topics {
			if tp.Topic != changelog.Topic(topic) || held.Load() {
				continue
			}
			var assignedAt time.Time
			e.kc.SleepControl(func() {
				testwait.Eventually(30*time.Second, func() bool {
					if p := started.Load(); assignedAt.IsZero() && p != nil && p.st.assigned.Load() > 0 {
						assignedAt = time.Now()
					}
					return lookedUp.Load() || (!assignedAt.IsZero() && time.Since(assignedAt) > time.Second)
				})
			})
			held.Store(true)
		}
		return nil, nil, false
	})
	var logs syncBuffer
	cfg := e.changelogConfig("w")
	cfg.Group = "g-w"
	p := New(cfg, e.store("w"), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	started.Store(p)
	c, cancel := context.WithCancel(ctx)
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	e.waitCaughtUp("w", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if !held.Load() {
		t.Fatal("the changelog's topic was not created through the broker")
	}
	if lookedUp.Load() || strings.Contains(logs.String(), "reading checkpoints for assigned partitions") {
		t.Fatalf("the start looked the changelog up before its topic existed (and retried):\n%s", logs.String())
	}
	e.assertSame(e.reference("ref"), e.dump("w"))
}

// TestRestoreFallsBackOnABadSnapshot: the changelog's read takes only each
// snapshot's head; a kept snapshot whose body does not decode makes the
// partition's changelog unusable before anything is reset or written, and
// the partition is folded from the start of the log instead, exact.
func TestRestoreFallsBackOnABadSnapshot(t *testing.T) {
	e := newEnv(t, 2)
	e.produce(workloadEvents(64, 80))
	r, _ := e.startCounting("f", nil)
	e.waitCaughtUp("f", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	stored := e.dump("f")
	var victim string
	for id := range stored {
		victim = id
		break
	}
	// A later position with the body cut short: the head reads, the rest
	// does not.
	bad := append([]byte{}, stored[victim][:len(stored[victim])-5]...)
	var s snapshot.Snapshot
	if err := snapshot.Decode(stored[victim], &s); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(bad[5:13], uint64(s.Position.Offset+1))
	if id, pos, err := snapshot.DecodeHead(bad); err != nil || id != victim || pos.Offset != s.Position.Offset+1 {
		t.Fatalf("the bad snapshot's head: %q %v %v", id, pos, err)
	}
	if err := snapshot.Decode(bad, &snapshot.Snapshot{}); err == nil {
		t.Fatal("the bad snapshot decodes")
	}
	cl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, changelog.SnapshotRecord(changelog.Topic(topic), s.Position.Partition, victim, bad)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, c := e.startCounting("f", nil)
	e.waitCaughtUp("f", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if c.restores.Load() != 1 {
		t.Fatalf("%d partitions restored, want 1 (the other folded from the log's start)", c.restores.Load())
	}
	if c.folded.Load() == 0 {
		t.Fatal("nothing folded: the partition with the bad snapshot was not folded from the log")
	}
	e.assertSame(stored, e.dump("f"))
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
	archived := changelog.ArchivedRecord(changelog.Topic(topic), gone, s.Position)
	e.systemKeys().Sign(archived) // as the sweeper writes it
	if err := cl.ProduceSync(ctx, archived).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, c := e.startCounting("d", nil)
	e.waitCaughtUp("d", 60*time.Second)
	// A restore counts itself once its checkpoint is stored and read back:
	// the count follows the checkpoints by a moment.
	testwait.Eventually(10*time.Second, func() bool { return c.restores.Load() == 2 })
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

// TestRestoreAtEveryCrashPoint kills the projector at each crash point of
// the changelog's write and of a restore, with Redis emptied before or
// after, restarts it, and requires the read model equal to an
// uninterrupted fold every time.
func TestRestoreAtEveryCrashPoint(t *testing.T) {
	flush := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, flush: true} }
	kill := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, crash: true} }
	flushKill := func(point crashPoint, n int) lossStep { return lossStep{point: point, n: n, flush: true, crash: true} }
	cases := []struct {
		name  string
		steps []lossStep
	}{
		{"killed after the changelog's snapshots, emptied later", []lossStep{kill(crashAfterChangelog, 2), flush(crashAfterCheckpoint, 2)}},
		{"killed after the changelog's checkpoint, emptied and killed", []lossStep{kill(crashAfterChangelogCheckpoint, 2), flushKill(crashAfterPut, 1)}},
		{"emptied, killed once the restore is written", []lossStep{flush(crashAfterCheckpoint, 3), kill(crashRestoreWritten, 1)}},
		{"emptied, killed once the restore's checkpoint is stored", []lossStep{flush(crashAfterCheckpoint, 3), kill(crashRestoreCheckpoint, 1)}},
		{"emptied and killed, killed in the restore on start", []lossStep{flushKill(crashAfterCheckpoint, 3), kill(crashRestoreWritten, 1)}},
		{"emptied and killed, killed after the reset on start", []lossStep{flushKill(crashAfterCheckpoint, 3), kill(crashRebuildReset, 1)}},
		{"emptied and killed, killed after the deletes on start", []lossStep{flushKill(crashAfterCheckpoint, 3), kill(crashRebuildDeleted, 1)}},
		{"emptied during the restore's write", []lossStep{flush(crashAfterCheckpoint, 3), flush(crashRestoreWritten, 1)}},
		{"emptied after the changelog's snapshots, before the checkpoints", []lossStep{flush(crashAfterChangelog, 3)}},
		{"emptied after the snapshots, before the changelog's", []lossStep{flush(crashAfterChangelog, 2), flush(crashAfterPut, 1)}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 3)
			e.produce(workloadEvents(64, 200))
			prefix := fmt.Sprintf("cp%d", i)
			l := &losses{e: e, steps: c.steps}
			var counts []*restoreCounts
			for run := 0; ; run++ {
				if run > len(c.steps) {
					t.Fatalf("%d restarts for %d steps", run, len(c.steps))
				}
				r, rc := e.startCounting(prefix, l.hook)
				counts = append(counts, rc)
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
					continue
				}
				e.waitCaughtUp(prefix, 60*time.Second)
				if err := r.halt(); err != nil {
					t.Fatal(err)
				}
				break
			}
			got := e.dump(prefix)
			e.assertSame(e.reference("ref"), got)
			restores := int64(0)
			for _, rc := range counts {
				restores += rc.restores.Load()
			}
			if restores == 0 {
				t.Fatal("Redis was emptied and nothing was restored from the changelog")
			}
			t.Logf("%d runs, %d restores", len(counts), restores)
		})
	}
}

// TestRestoreWithAFiniteLog runs over an events topic with a retention.ms,
// which kfake applies on ApplyRetention, and records produced with
// timestamps that place them before or after it: a restore from a
// changelog checkpoint at or after the log's start is exact, and one from
// a checkpoint older than the log's start (the events in between are gone)
// restores what the changelog holds and raises the alert: /readyz names
// the partition and the restore is counted as a gap.
func TestRestoreWithAFiniteLog(t *testing.T) {
	cluster := kafkatest.Start(t)
	srv := redistest.Start(t)
	e := &env{t: t, brokers: cluster.ListenAddrs(), rdb: srv.Client(t), srv: srv}
	cl := e.client()
	adm := kadm.NewClient(cl)
	// Which records expire is set by their timestamps, not by the clock:
	// kfake drops a batch older than retention.ms only on ApplyRetention,
	// so a slow machine cannot expire a batch the test wants kept.
	setRetention := func(d time.Duration) {
		t.Helper()
		ms := strconv.FormatInt(d.Milliseconds(), 10)
		for _, tp := range []string{topic, kafka.DLQTopic(topic)} {
			rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &ms}}, tp)
			if err == nil {
				_, err = rs.On(tp, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	retention := strconv.FormatInt((2 * time.Hour).Milliseconds(), 10)
	for _, tp := range []string{topic, kafka.DLQTopic(topic)} {
		if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": &retention}, tp); err != nil {
			t.Fatal(err)
		}
	}
	start := func() int64 {
		t.Helper()
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := starts.Lookup(topic, 0)
		return o.Offset
	}
	now := time.Now()
	a, b := workloadEvents(71, 40), workloadEvents(72, 40)
	e.produceAt(a, now.Add(-3*time.Hour)) // past the retention of 2 hours
	r, _ := e.startCounting("f", nil)
	e.waitCaughtUp("f", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.produceAt(b, now.Add(-time.Hour))
	want := e.reference("ref") // a and b, before a expires
	cluster.ApplyRetention()
	if s, end := start(), int64(len(a)); s != end {
		t.Fatalf("the log starts at %d after retention, want %d (kfake applies retention.ms)", s, end)
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, c := e.startCounting("f", nil)
	e.waitCaughtUp("f", 60*time.Second)
	// The rebuild's mark is dropped by the fold once it sees its
	// checkpoint past the rebuild's end, just after the write the wait
	// above sees: readiness follows within a poll.
	testwait.UntilSeen(t, "readiness after a restore within the log", 30*time.Second, func() (bool, string) {
		err := r.p.Ready(ctx)
		return err == nil, fmt.Sprint(err)
	})
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if c.restores.Load() != 1 || c.gaps.Load() != 0 {
		t.Fatalf("%d restores, %d over a gap; want 1 and 0", c.restores.Load(), c.gaps.Load())
	}
	e.assertSame(want, e.dump("f"))

	// The changelog's checkpoint is now at the end of b. d expires before
	// any projector folds it: the next restore starts before the log.
	// With a retention of 30 minutes, b and d expire, g stays.
	d, g := workloadEvents(73, 30), workloadEvents(74, 30)
	e.produceAt(d, now.Add(-time.Hour))
	e.produceAt(g, now)
	setRetention(30 * time.Minute)
	cluster.ApplyRetention()
	if s := start(); s != int64(len(a)+len(b)+len(d)) {
		t.Fatalf("the log starts at %d after retention, want %d", s, len(a)+len(b)+len(d))
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r, c = e.startCounting("f", nil)
	e.waitCaughtUp("f", 60*time.Second)
	var ready error
	testwait.UntilSeen(t, "the rebuild's mark dropped", 30*time.Second, func() (bool, string) {
		ready = r.p.Ready(ctx)
		return ready == nil || !strings.Contains(ready.Error(), "rebuilding from the log"), fmt.Sprint(ready)
	})
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if c.restores.Load() != 1 || c.gaps.Load() != 1 {
		t.Fatalf("%d restores, %d over a gap; want 1 and 1", c.restores.Load(), c.gaps.Load())
	}
	wantMsg := fmt.Sprintf("partition 0: restored from the changelog's checkpoint %d, older than the log's start %d", len(a)+len(b), len(a)+len(b)+len(d))
	if ready == nil || !strings.Contains(ready.Error(), wantMsg) {
		t.Fatalf("readiness: %v, want %q", ready, wantMsg)
	}
	got := e.dump("f")
	for id, w := range want {
		if !bytes.Equal(got[id], w) {
			t.Fatalf("session %s restored from the changelog differs", id)
		}
	}
	fromD, fromG := 0, 0
	for id := range got {
		switch {
		case strings.HasPrefix(id, "s73"):
			fromD++
		case strings.HasPrefix(id, "s74"):
			fromG++
		}
	}
	if fromD != 0 || fromG == 0 {
		t.Fatalf("%d sessions of the expired events, %d of those after them; want none and some", fromD, fromG)
	}
}

// changelogLatest reads every partition of the changelog to its end.
func (e *env) changelogLatest(partitions int32) map[int32]*changelog.Latest {
	e.t.Helper()
	t := changelog.Topic(topic)
	cl := e.client(kgo.ConsumeTopics(t), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, t)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]*changelog.Latest{}
	left := int64(0)
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset; left += o.Offset })
	for id := range partitions {
		out[id] = &changelog.Latest{}
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end[r.Partition] {
				return
			}
			left--
			rec, err := changelog.DecodeRecord(r)
			if err != nil {
				e.t.Fatal(err)
			}
			out[r.Partition].Add(rec)
		})
	}
	return out
}

// TestRestoreNeverLossyUnderATrimmedLog: with the events log trimmed
// (retention) past the sessions' creation, a changelog record the restore
// cannot use as its session's latest, (a) one without the changelog's
// header, (b) a snapshot whose position lies beyond the log's end (signed:
// the position check alone refuses it), (c) an archived record for a live
// session without the system's MAC, must not lead to a fold from the log's
// start, which would lose every session whose creation left the log. The
// partition stalls with the alert instead, writing nothing; once the
// session's authentic record follows (a usable record of the key), the
// restore is exact.
func TestRestoreNeverLossyUnderATrimmedLog(t *testing.T) {
	cluster := kafkatest.Start(t)
	srv := redistest.Start(t)
	e := &env{t: t, brokers: cluster.ListenAddrs(), rdb: srv.Client(t), srv: srv}
	cl := e.client()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	retention := "1000"
	for _, tp := range []string{topic, kafka.DLQTopic(topic)} {
		if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": &retention}, tp); err != nil {
			t.Fatal(err)
		}
	}
	a := workloadEvents(75, 40)
	e.produce(a)
	r, _ := e.startCounting("n", nil)
	e.waitCaughtUp("n", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // past retention.ms
	e.produce(workloadEvents(76, 1)[:1])
	cluster.ApplyRetention()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != int64(len(a)) {
		t.Fatalf("the log starts at %d after retention, want %d", o.Offset, len(a))
	}
	r, _ = e.startCounting("n", nil) // folds the one event after a
	e.waitCaughtUp("n", 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	want := e.dump("n")
	var victim string
	var s snapshot.Snapshot
	for id, b := range want {
		if err := snapshot.Decode(b, &s); err != nil {
			t.Fatal(err)
		}
		if !s.Terminal() && s.FirstOffset < int64(len(a)) {
			victim = id
			break
		}
	}
	if victim == "" {
		t.Fatal("no live session created in the trimmed part of the log")
	}
	if err := snapshot.Decode(want[victim], &s); err != nil {
		t.Fatal(err)
	}
	keys := e.systemKeys()
	manual := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer manual.Close()
	cltopic := changelog.Topic(topic)
	beyond := append([]byte{}, want[victim]...)
	binary.BigEndian.PutUint64(beyond[5:13], 999999999)
	forgedPosition := changelog.SnapshotRecord(cltopic, 0, victim, beyond)
	keys.Sign(forgedPosition)
	for _, tc := range []struct {
		name string
		bad  *kgo.Record
	}{
		{"headerless", &kgo.Record{Topic: cltopic, Partition: 0, Key: []byte(victim), Value: want[victim]}},
		{"position beyond the log", forgedPosition},
		{"forged archived", changelog.ArchivedRecord(cltopic, victim, s.Position)},
	} {
		if err := manual.ProduceSync(ctx, tc.bad).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r, c := e.startCounting("n", nil)
		stalled := testwait.Eventually(30*time.Second, func() bool {
			err := r.p.Ready(ctx)
			return err != nil && strings.Contains(err.Error(), "whose latest record cannot be used")
		})
		ready := r.p.Ready(ctx)
		if err := r.halt(); err != nil {
			t.Fatal(err)
		}
		if !stalled {
			t.Fatalf("%s: readiness %v, want the partition stalled on the unusable record", tc.name, ready)
		}
		if got := e.dump("n"); len(got) != 0 || c.folded.Load() != 0 || c.restores.Load() != 0 {
			t.Fatalf("%s: %d sessions, %d records folded, %d restores while stalled; want none", tc.name, len(got), c.folded.Load(), c.restores.Load())
		}
		// The session's authentic record follows: the restore is exact.
		again := changelog.SnapshotRecord(cltopic, 0, victim, want[victim])
		keys.Sign(again)
		if err := manual.ProduceSync(ctx, again).FirstErr(); err != nil {
			t.Fatal(err)
		}
		r, c = e.startCounting("n", nil)
		e.waitCaughtUp("n", 60*time.Second)
		// The restore stores the checkpoint, then clears its readiness
		// mark: ready follows the checkpoint by a moment.
		testwait.Eventually(10*time.Second, func() bool { ready = r.p.Ready(ctx); return ready == nil })
		if err := r.halt(); err != nil {
			t.Fatal(err)
		}
		if ready != nil || c.restores.Load() != 1 {
			t.Fatalf("%s, then the authentic record: readiness %v, %d restores; want ready, 1", tc.name, ready, c.restores.Load())
		}
		e.assertSame(want, e.dump("n"))
	}
}
