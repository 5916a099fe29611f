// Command devstack runs the whole pipeline in one process on embedded
// defaults: a Kafka-protocol broker (franz-go's kfake) persisting its log
// under ./.devstack, an in-memory Redis (miniredis) unless CORREX_REDIS_URL
// is set, the ingest, projector and query services, and a demo workload. It
// prints the URLs and a line of progress, and stops cleanly on Ctrl-C.
//
// With CORREX_KAFKA_BROKERS set it uses that Kafka instead of the embedded
// broker. The services run without authentication: devstack is for a laptop.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/service"
)

func main() {
	restore := takeTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

type options struct {
	devstack.Options
	brokers    []string
	demo       bool
	demoRate   float64
	demoCount  int
	logLevel   string
	progressIn time.Duration
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (options, *config.Binder, error) {
	var o options
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := config.NewBinder(fs, getenv)
	b.Strings(&o.brokers, "kafka-brokers", "CORREX_KAFKA_BROKERS", nil, "an external Kafka instead of the embedded broker")
	b.Secret(&o.RedisURL, "redis-url", "CORREX_REDIS_URL", "", "an external Redis instead of the embedded one")
	b.String(&o.Topic, "topic", "CORREX_TOPIC", "correx.session-events", "topic of session events")
	b.Int(&o.Partitions, "partitions", "CORREX_PARTITIONS", 12, "partitions of the topic")
	b.String(&o.Prefix, "redis-prefix", "CORREX_REDIS_PREFIX", "correx", "prefix of every Redis key")
	b.String(&o.DataDir, "data-dir", "", ".devstack/kafka", "where the embedded broker keeps its log (empty: memory)")
	b.Int(&o.KafkaPort, "kafka-port", "", 9092, "port of the embedded broker on 127.0.0.1")
	b.String(&o.IngestAddr, "ingest-addr", "", "127.0.0.1:8081", "ingest listen address")
	b.String(&o.QueryAddr, "query-addr", "", "127.0.0.1:8082", "query listen address")
	b.String(&o.ProjectorAddr, "projector-addr", "", "127.0.0.1:8083", "projector health and metrics address")
	b.Bool(&o.demo, "demo", "", true, "run a demo workload")
	b.Float(&o.demoRate, "demo-rate", "", 200, "demo events per second")
	b.Int(&o.demoCount, "demo-sessions", "", 50, "sessions per demo round")
	b.String(&o.logLevel, "log-level", "", "warn", "debug, info, warn or error")
	b.Duration(&o.progressIn, "progress", "", 2*time.Second, "how often to print a progress line")
	if err := b.Parse(args); err != nil {
		return o, b, err
	}
	o.Brokers = o.brokers
	var p config.Problems
	if o.Partitions < 1 {
		p.Addf("CORREX_PARTITIONS: %d, must be at least 1", o.Partitions)
	}
	if o.demoRate <= 0 || o.demoCount < 1 {
		p.Addf("-demo-rate and -demo-sessions must be positive")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		p.Addf("-log-level %q: %v", o.logLevel, err)
	}
	return o, b, p.Err()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, b, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(o.logLevel))
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	var shutdowns []func()
	defer func() {
		for _, f := range shutdowns {
			f()
		}
	}()
	var terr error
	o.Runtime = func(name string) service.Runtime {
		rt, shutdown, err := service.Telemetry(ctx, name, getenv, o.Log.With("service", name))
		if err != nil {
			terr = err
			return service.Runtime{Log: o.Log.With("service", name)}
		}
		shutdowns = append(shutdowns, shutdown)
		return rt
	}
	st, err := devstack.Start(ctx, o.Options)
	if err == nil && terr != nil {
		_ = st.Stop()
		err = terr
	}
	if err != nil {
		return err
	}
	printBanner(stdout, st, b.Effective(), o)

	var sent atomic.Int64
	lines := &lockedWriter{w: stdout} // progress and the demo's timeout print lines concurrently
	if o.demo {
		go demoTimeout(ctx, st, lines, o.Log)
		go demo(ctx, st, o, &sent)
	}
	progress(ctx, lines, st, &sent, o.progressIn)
	fmt.Fprintln(stdout, "\nstopping: flushing snapshots and writing checkpoints...")
	if err := st.Stop(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}

func printBanner(w io.Writer, st *devstack.Stack, settings []string, o options) {
	kafka := "embedded broker at " + strings.Join(st.Brokers, ",")
	if st.Broker == nil {
		kafka = "external Kafka at " + strings.Join(st.Brokers, ",")
	} else if o.DataDir != "" {
		kafka += " (log in " + o.DataDir + ")"
	}
	redis := "embedded Redis (in memory) at " + strings.TrimPrefix(st.RedisURL, "redis://")
	if st.Redis == nil {
		redis = "Redis at " + config.Mask(st.RedisURL)
	}
	fmt.Fprintf(w, `correx-sessions devstack: the whole pipeline in one process
  Kafka:     %s
  Redis:     %s
  ingest:    %s/v1/events
  query:     %s/v1/sessions   %s/v1/stats
  console:   %s/ui/
  projector: %s/metrics
  WARNING: authentication is OFF in devstack; do not expose these ports.

Try:
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '{"sessionId":"demo:1","type":"SessionCreated","payload":{"goal":"try it"}}'
  curl -s '%s/v1/sessions/demo:1?minPosition=<position from the answer>&wait=2s'
  # a session that times out after 5s without events (TimeoutExpired, then CANCELLING)
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '%s'
  curl -s %s/v1/sessions/demo:quiet | grep -o '"state":"[A-Z_]*"'
  # sessions by label; every change as it happens (Server-Sent Events; Ctrl-C ends it)
  curl -s '%s/v1/sessions?label=team=demo&prefix=demo:quiet'
  curl -N %s/v1/watch

Ctrl-C stops it. Settings: %s
`, kafka, redis, st.IngestURL, st.QueryURL, st.QueryURL, st.QueryURL, st.ProjectorURL, st.IngestURL, st.QueryURL,
		st.IngestURL, quietSessionEvents("demo:quiet"), st.QueryURL, st.QueryURL, st.QueryURL, strings.Join(settings, ", "))
}

// demo runs rounds of realistic sessions against the stack until ctx ends.
func demo(ctx context.Context, st *devstack.Stack, o options, sent *atomic.Int64) {
	for round := uint64(1); ctx.Err() == nil; round++ {
		_, err := loadgen.Run(ctx, loadgen.Config{IngestURL: st.IngestURL, QueryURL: st.QueryURL, Sessions: o.demoCount,
			Concurrency: 4, Rate: o.demoRate, Batch: 10, InvalidShare: 0.03, DuplicateShare: 0.03,
			Seed: uint64(time.Now().UnixNano()) + round, Prefix: "demo", Progress: func(n int) { sent.Add(int64(n)) }})
		if err != nil && ctx.Err() == nil {
			o.Log.Warn("demo workload", "err", err)
			time.Sleep(time.Second)
		}
	}
}

// progress prints events/s, lag and sessions per state until ctx ends.
func progress(ctx context.Context, w io.Writer, st *devstack.Stack, sent *atomic.Int64, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n := sent.Load()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			line := fmt.Sprintf("%s  ingested %d (%.0f events/s)", now.Format("15:04:05"), n, rate)
			if s, err := stats(ctx, st.QueryURL); err == nil {
				var lag int64
				for _, p := range s.Partitions {
					if p.Lag != nil {
						lag += *p.Lag
					}
				}
				var states []string
				for k, v := range s.Sessions.ByState {
					if v > 0 {
						states = append(states, fmt.Sprintf("%s=%d", k, v))
					}
				}
				sort.Strings(states)
				line += fmt.Sprintf("  lag %d  sessions %d [%s]", lag, s.Sessions.Total, strings.Join(states, " "))
			}
			fmt.Fprintln(w, line)
		}
	}
}

func stats(ctx context.Context, queryURL string) (query.Stats, error) {
	var s query.Stats
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, queryURL+"/v1/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return s, fmt.Errorf("stats: %d", resp.StatusCode)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
