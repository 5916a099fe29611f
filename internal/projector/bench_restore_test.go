package projector

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/changelog"
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
