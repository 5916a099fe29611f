package projector

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkCatchUpTimeouts measures catch-up with a default execution and
// inactivity timeout armed on every session against no timeout at all
// (same log, same process, alternating), at BENCH_SESSIONS sessions
// (default 50,000). Run it once: -bench=CatchUpTimeouts -benchtime=1x.
func BenchmarkCatchUpTimeouts(b *testing.B) {
	sessions := 50000
	if v, err := strconv.Atoi(os.Getenv("BENCH_SESSIONS")); err == nil {
		sessions = v
	}
	e := newBenchEnv(b, sessions)
	for i := 0; b.Loop(); i++ {
		none := e.config(fmt.Sprintf("n%d", i), "bench-n")
		none.Timeouts = fsm.Timeouts{}
		armed := e.config(fmt.Sprintf("a%d", i), "bench-a")
		armed.Timeouts[fsm.TimeoutExecution] = 720 * time.Hour
		armed.Timeouts[fsm.TimeoutInactivity] = 700 * time.Hour
		dn := e.fold(b, fmt.Sprintf("n%d", i), none)
		da := e.fold(b, fmt.Sprintf("a%d", i), armed)
		armedN, err := e.rdb.Eval(ctx, `local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('ZCARD', k) end return n`,
			nil, fmt.Sprintf("a%d:{dl:*}:due", i)).Int()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(e.events), "events")
		b.ReportMetric(float64(armedN), "armed")
		b.ReportMetric(float64(e.events)/dn.Seconds(), "none-events/s")
		b.ReportMetric(float64(e.events)/da.Seconds(), "timeouts-events/s")
		b.ReportMetric(dn.Seconds()/da.Seconds(), "ratio")
	}
}

// latencyObserver records, for each deadline fired, the time from the
// deadline to the broker's acknowledgement of its TimeoutExpired.
type latencyObserver struct {
	nopObserver
	mu   sync.Mutex
	lags []time.Duration
}

func (o *latencyObserver) TimeoutFired(d projstore.ArmedDeadline, _ time.Duration, _ *kgo.Record) func(error) {
	return func(err error) {
		if err == nil {
			lag := time.Since(d.Due())
			o.mu.Lock()
			o.lags = append(o.lags, lag)
			o.mu.Unlock()
		}
	}
}

func (o *latencyObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.lags)
}

// BenchmarkFiringLatency arms BENCH_DEADLINES deadlines (default 100,000:
// one per session, an inactivity timeout, spread over 3 s a few seconds
// ahead) in one projector owning 12 partitions on the wall clock, and
// reports how long after its deadline each TimeoutExpired was acknowledged
// by the broker: p50, p99 and max.
func BenchmarkFiringLatency(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("BENCH_DEADLINES")); err == nil {
		n = v
	}
	for i := 0; b.Loop(); i++ {
		c := kafkatest.Start(b)
		srv := redistest.Start(b)
		e := &benchEnv{brokers: c.ListenAddrs(), srv: srv, rdb: srv.Client(b)}
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kafka.Partitioner()), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range []string{topic, kafka.DLQTopic(topic)} {
			if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), t, 12); err != nil {
				b.Fatal(err)
			}
		}
		obs := &latencyObserver{}
		cfg := e.config("lat", "bench-lat")
		st, err := projstore.New(e.rdb, "lat")
		if err != nil {
			b.Fatal(err)
		}
		p := New(cfg, st, WithLogger(testLog()), WithObserver(obs))
		rctx, cancel := contextWithCancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		// Created now, each with an inactivity timeout of 8 s plus up to 3 s.
		t0 := time.Now()
		for j := range n {
			var to fsm.Timeouts
			to[fsm.TimeoutInactivity] = 8*time.Second + time.Duration(j%3000)*time.Millisecond
			id, err := fsm.NewEventID(t0)
			if err != nil {
				b.Fatal(err)
			}
			ev := fsm.NewEvent(id, fmt.Sprint("lat-", j), fsm.SessionCreated, t0, fsm.Fields{Timeouts: to})
			cl.Produce(ctx, &kgo.Record{Key: []byte(ev.SessionID), Value: fsm.AppendRecord(nil, &ev)}, func(_ *kgo.Record, err error) {
				if err != nil {
					panic(err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		cl.Close()
		armedBy := time.Since(t0)
		testwait.UntilSeen(b, "every deadline fired", 2*time.Minute, func() (bool, string) {
			return obs.count() >= n, fmt.Sprintf("%d of %d fired", obs.count(), n)
		})
		cancel()
		<-done
		lags := slices.Clone(obs.lags)
		slices.Sort(lags)
		q := func(f float64) float64 { return lags[int(f*float64(len(lags)-1))].Seconds() }
		b.ReportMetric(float64(n), "deadlines")
		b.ReportMetric(armedBy.Seconds(), "produced-s")
		b.ReportMetric(q(0.5), "p50-s")
		b.ReportMetric(q(0.99), "p99-s")
		b.ReportMetric(lags[len(lags)-1].Seconds(), "max-s")
	}
}
