package projector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkRestore measures, in one run over a pre-filled topic
// (BENCH_SESSIONS sessions, default 50,000, about 1,000,000 events over 12
// partitions), what recovering a lost Redis costs:
//
//   - replay-s: today's full replay, a projector with the changelog off
//     folding the whole log into an empty Redis;
//   - restore-s: the same loss with the changelog on, restored from it (the
//     changelog as one catch-up wrote it), and replay/restore, the speedup;
//   - restore-10x-s: the restore once the changelog holds 10x its history
//     (every record of it produced 9 times more, as 9 more full folds
//     would), compacted by the broker (kfake's Compact) before it is
//     timed, and 10x/1x, its time over restore-s;
//   - catch-up with the changelog off and on over the same log
//     (catchup-on/off: the rate with it over the rate without it), after
//     an untimed warm-up catch-up.
//
// The restore's floor is Redis writing the sessions back: the fenced
// snapshot writes with their index entries and the deadline and closed
// entries, each a Lua step (pkg/snapshot's BenchmarkStorePut), one Redis
// core for all of it. restore-redis-cpu-s and replay-redis-cpu-s are the
// CPU Redis spent during each (INFO cpu): the restore's is most of
// restore-s.
//
// Run it once: go test -run='^$' -bench=Restore -benchtime=1x.
func BenchmarkRestore(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	run := func(prefix string, on bool) (time.Duration, *Projector) {
		cfg := e.config("g-"+prefix, "bench-"+prefix)
		cfg.ChangelogEnabled = on
		var p *Projector
		d := e.catchUpWith(b, prefix, cfg, func(q *Projector) { p = q })
		return d, p
	}
	flush := func() {
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// An untimed first catch-up warms the broker's log and the heap, which
	// would otherwise slow whichever run comes first.
	run("warm", false)
	for i := 0; b.Loop(); i++ {
		flush()
		redisBefore := e.redisCPU(b)
		off, _ := run(fmt.Sprintf("off%d", i), false) // today's full replay of a lost Redis
		redisReplay := e.redisCPU(b) - redisBefore
		flush()
		on, _ := run(fmt.Sprintf("on%d", i), true) // the same, writing the changelog
		flush()
		// Caught up is every checkpoint at the log's end: the restores
		// stored theirs (the last may stop before counting itself).
		redisBefore = e.redisCPU(b)
		restore, p := run(fmt.Sprintf("on%d", i), true)
		redisRestore := e.redisCPU(b) - redisBefore
		if n := p.restores.Load(); n == 0 {
			b.Fatal("nothing restored")
		}
		records := e.multiplyChangelog(b, 9)
		e.cluster.Compact()
		flush()
		restore10, p := run(fmt.Sprintf("on%d", i), true)
		if n := p.restores.Load(); n == 0 {
			b.Fatal("nothing restored after compaction")
		}
		b.ReportMetric(float64(e.events), "events")
		b.ReportMetric(float64(records), "changelog-records")
		b.ReportMetric(off.Seconds(), "replay-s")
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(off.Seconds()/restore.Seconds(), "replay/restore")
		b.ReportMetric(redisReplay.Seconds(), "replay-redis-cpu-s")
		b.ReportMetric(redisRestore.Seconds(), "restore-redis-cpu-s")
		b.ReportMetric(restore10.Seconds(), "restore-10x-s")
		b.ReportMetric(restore10.Seconds()/restore.Seconds(), "10x/1x")
		b.ReportMetric(off.Seconds()/on.Seconds(), "catchup-on/off")
	}
}

// redisCPU returns the CPU time (user and system) the Redis server has
// used so far, from INFO cpu.
func (e *benchEnv) redisCPU(b *testing.B) time.Duration {
	b.Helper()
	info, err := e.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// multiplyChangelog produces every record of the changelog n more times,
// on its partition, and returns how many records it held before.
func (e *benchEnv) multiplyChangelog(b *testing.B, n int) int {
	b.Helper()
	t := changelog.Topic(topic)
	ends := map[int32]int64{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumeTopics(t), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, t)
	if err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset; total += o.Offset })
	var recs []*kgo.Record
	for read := int64(0); read < total; {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				read++
				recs = append(recs, &kgo.Record{Topic: t, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers})
			}
		})
	}
	for range n {
		for _, r := range recs {
			c := *r
			cl.Produce(ctx, &c, func(_ *kgo.Record, err error) {
				if err != nil {
					panic(err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return len(recs)
}

// BenchmarkRestoreRunning measures a restore under a running projector,
// the common case of a lost Redis: a projector with the changelog on
// catches up on a pre-filled topic (BENCH_SESSIONS sessions, default
// 20,000, about 400,000 events over 12 partitions), Redis is emptied
// (FLUSHALL) while it runs, and the benchmark times the FLUSHALL to every
// partition's checkpoint back at the log's end with every session stored
// again, each partition restored from the changelog (the run fails
// otherwise):
//
//   - running-1x-s: with the changelog as that catch-up wrote it;
//   - running-6x-s: with every record of the changelog produced 5 more
//     times (as 5 more full folds would; not compacted), so 6x the
//     changelog's history over the same sessions, and 6x/1x, its time
//     over running-1x-s. The restore reads the whole changelog, so some
//     of its time grows with the history; the writes and the deletes
//     before them should grow with the sessions alone.
//
// The projector checks for a lost Redis every 50 ms here (its
// MaxFlushInterval; 2 s by default), so that the time to notice the loss
// is not most of the figure.
//
// Run it once: go test -run='^$' -bench=RestoreRunning -benchtime=1x.
func BenchmarkRestoreRunning(b *testing.B) {
	sessions := 20000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	for i := 0; b.Loop(); i++ {
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := kadm.NewClient(cl).DeleteTopics(ctx, changelog.Topic(topic)); err != nil {
			b.Fatal(err)
		}
		cl.Close()
		one := e.restoreRunning(b, fmt.Sprintf("run%d", i), sessions, 0)
		six := e.restoreRunning(b, fmt.Sprintf("run%d", i), sessions, 5)
		b.ReportMetric(float64(e.events), "events")
		b.ReportMetric(one.Seconds(), "running-1x-s")
		b.ReportMetric(six.Seconds(), "running-6x-s")
		b.ReportMetric(six.Seconds()/one.Seconds(), "6x/1x")
	}
}

// restoreRunning runs a projector with the changelog on until it is caught
// up (restoring from the changelog what it can), multiplies the changelog
// by 1+more, empties Redis under it, and returns the time from the
// FLUSHALL to every checkpoint at the log's end and every session stored.
func (e *benchEnv) restoreRunning(b *testing.B, prefix string, sessions, more int) time.Duration {
	b.Helper()
	st, err := projstore.New(e.rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	reads, err := snapshot.NewStore(e.rdb, prefix)
	if err != nil {
		b.Fatal(err)
	}
	cfg := e.config("g-"+prefix, "bench-"+prefix)
	cfg.ChangelogEnabled = true
	cfg.MaxFlushInterval = 50 * time.Millisecond
	ends := endOffsets(b, e.brokers)
	p := New(cfg, st, WithLogger(testLog()))
	c, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(c) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatal(err)
		}
	}()
	// back waits until every checkpoint is at the log's end, every session
	// is stored and at least restores partitions were restored (the
	// counter grows once a restore stored its checkpoint).
	back := func(restores int64) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if cps, err := st.Checkpoints(ctx, topic); err == nil && caughtUp(cps, ends) && p.restores.Load() >= restores {
				if n, err := reads.Count(ctx); err == nil && n.Total == int64(sessions) {
					return
				}
			}
			if time.Now().After(deadline) {
				b.Fatalf("not back within 2 minutes: %d partitions restored, want %d", p.restores.Load(), restores)
			}
			select {
			case err := <-done:
				b.Fatalf("projector stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	back(0) // caught up (a fold, or a restore of what the last run wrote)
	if more > 0 {
		e.multiplyChangelog(b, more)
	}
	restored := p.restores.Load()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	back(restored + 12)
	elapsed := time.Since(start)
	if n := p.restores.Load() - restored; n != 12 {
		b.Fatalf("%d partitions restored from the changelog after the FLUSHALL, want 12", n)
	}
	return elapsed
}
