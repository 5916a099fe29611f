package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/correx/sessions/internal/config"
	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/service"
	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/fsm"
)

// Config is the configuration of cmd/devstack (`make run`): the stack's
// Options that flags set, and the demo shown around the stack. DefaultConfig
// holds the defaults; Bind registers them as the flags' and environment
// variables' defaults.
type Config struct {
	// Options: Brokers (CORREX_KAFKA_BROKERS; default the embedded broker),
	// Redis.URL (CORREX_REDIS_URL; default the embedded Redis) and
	// Redis.Prefix (CORREX_REDIS_PREFIX), Topic, Partitions (as the services), DataDir (-data-dir; default
	// .devstack/kafka), KafkaPort (9092) and the services' addresses
	// (127.0.0.1:8081-8083).
	Options
	Demo         bool          // -demo: run a demo workload; default true
	DemoRate     float64       // -demo-rate: its events per second; default 200
	DemoSessions int           // -demo-sessions: its sessions per round; default 50
	LogLevel     string        // -log-level: debug, info, warn or error; default warn
	Progress     time.Duration // -progress: how often to print a progress line; default 2s
	// ArchiveDir is where sessions that ended go when they leave Redis
	// (-archive-dir, a file:// archive; default .devstack/archive; empty
	// keeps them in Redis), RetainClosed how long after they ended
	// (-retain-closed; default 2m, short so that a newcomer sees it).
	ArchiveDir   string
	RetainClosed time.Duration
}

// DefaultConfig returns cmd/devstack's defaults.
func DefaultConfig() Config {
	return Config{
		Options: Options{
			Topic: config.DefaultTopic, Partitions: config.DefaultPartitions, Redis: redisconn.Config{Prefix: config.DefaultRedisPrefix},
			DataDir: ".devstack/kafka", KafkaPort: 9092,
			IngestAddr: "127.0.0.1:8081", QueryAddr: "127.0.0.1:8082", ProjectorAddr: "127.0.0.1:8083",
		},
		Demo: true, DemoRate: 200, DemoSessions: 50, LogLevel: "warn", Progress: 2 * time.Second,
		ArchiveDir: ".devstack/archive", RetainClosed: 2 * time.Minute,
	}
}

// Bind registers the flags and environment variables.
func (c *Config) Bind(b *config.Binder) {
	d := DefaultConfig()
	b.Strings(&c.Brokers, "kafka-brokers", "CORREX_KAFKA_BROKERS", d.Brokers, "an external Kafka instead of the embedded broker")
	b.Secret(&c.Redis.URL, "redis-url", "CORREX_REDIS_URL", d.Redis.URL, "an external Redis instead of the embedded one")
	b.String(&c.Topic, "topic", "CORREX_TOPIC", d.Topic, "topic of session events")
	b.Int(&c.Partitions, "partitions", "CORREX_PARTITIONS", d.Partitions, "partitions of the topic")
	b.String(&c.Redis.Prefix, "redis-prefix", "CORREX_REDIS_PREFIX", d.Redis.Prefix, "prefix of every Redis key")
	b.String(&c.DataDir, "data-dir", "", d.DataDir, "where the embedded broker keeps its log (empty: memory)")
	b.Int(&c.KafkaPort, "kafka-port", "", d.KafkaPort, "port of the embedded broker on 127.0.0.1")
	b.String(&c.IngestAddr, "ingest-addr", "", d.IngestAddr, "ingest listen address")
	b.String(&c.QueryAddr, "query-addr", "", d.QueryAddr, "query listen address")
	b.String(&c.ProjectorAddr, "projector-addr", "", d.ProjectorAddr, "projector health and metrics address")
	b.Bool(&c.Demo, "demo", "", d.Demo, "run a demo workload")
	b.Float(&c.DemoRate, "demo-rate", "", d.DemoRate, "demo events per second")
	b.Int(&c.DemoSessions, "demo-sessions", "", d.DemoSessions, "sessions per demo round")
	b.String(&c.LogLevel, "log-level", "", d.LogLevel, "debug, info, warn or error")
	b.Duration(&c.Progress, "progress", "", d.Progress, "how often to print a progress line")
	b.String(&c.ArchiveDir, "archive-dir", "", d.ArchiveDir, "where sessions that ended are archived when they leave Redis (empty: they stay)")
	b.Duration(&c.RetainClosed, "retain-closed", "", d.RetainClosed, "how long after it ended a session leaves Redis for the archive")
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var p config.Problems
	if c.Partitions < 1 {
		p.Addf("CORREX_PARTITIONS: %d, must be at least 1", c.Partitions)
	}
	if c.DemoRate <= 0 || c.DemoSessions < 1 {
		p.Addf("-demo-rate and -demo-sessions must be positive")
	}
	if _, err := c.level(); err != nil {
		p.Addf("-log-level %q: %v", c.LogLevel, err)
	}
	if c.Progress <= 0 {
		p.Addf("-progress: %v, must be positive", c.Progress)
	}
	if c.ArchiveDir != "" && c.RetainClosed <= 0 {
		p.Addf("-retain-closed: %v, must be positive with -archive-dir", c.RetainClosed)
	}
	return p.Err()
}

func (c *Config) level() (slog.Level, error) {
	var lvl slog.Level
	err := lvl.UnmarshalText([]byte(c.LogLevel))
	return lvl, err
}

// Run starts the stack with the telemetry getenv configures, prints the
// URLs, some curl lines to try and settings (the effective configuration,
// secrets masked) to stdout, runs the demo and a progress line until ctx
// ends, and stops the stack cleanly. Logs go to stderr.
func Run(ctx context.Context, c Config, settings []string, getenv func(string) string, stdout, stderr io.Writer) error {
	lvl, err := c.level()
	if err != nil {
		return fmt.Errorf("-log-level %q: %w", c.LogLevel, err)
	}
	o := c.Options
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
	archiveURL, err := c.archive(&o)
	if err != nil {
		return err
	}
	st, err := Start(ctx, o)
	var le *ListenError
	if errors.As(err, &le) {
		return c.listenError(le)
	}
	if err == nil && terr != nil {
		_ = st.Stop()
		err = terr
	}
	if err != nil {
		return err
	}
	printBanner(stdout, st, settings, c.DataDir)
	if archiveURL != "" {
		fmt.Fprintf(stdout, "Archive: sessions that ended leave Redis %v later, into %s (%s); see docs/retention.md\n"+
			"  curl -s '%s/v1/archive?prefix=demo&limit=5'    archived sessions (the progress line counts them)\n"+
			"  curl -s %s/v1/sessions/<an id listed there>      its snapshot, read back with \"archived\":true\n\n",
			c.RetainClosed, c.ArchiveDir, archiveURL, st.QueryURL, st.QueryURL)
	}

	var sent atomic.Int64
	lines := &lockedWriter{w: stdout} // progress and the demo's timeout print lines concurrently
	if c.Demo {
		go demoTimeout(ctx, st, lines, o.Log)
		go demoRules(ctx, st, lines, o.Log)
		go demo(ctx, st, c, o.Log, &sent)
	}
	archived := func() int { return -1 }
	if archiveURL != "" {
		archived = func() int { return countArchived(c.ArchiveDir) }
	}
	progress(ctx, lines, st, &sent, c.Progress, archived)
	fmt.Fprintln(stdout, "\nstopping: flushing snapshots and writing checkpoints...")
	if err := st.Stop(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}

// listenError names the flag that moves the service that could not listen.
func (c *Config) listenError(e *ListenError) error {
	flag := map[string]string{"ingest": "-ingest-addr", "query": "-query-addr", "projector": "-projector-addr", "kafka": "-kafka-port"}[e.Service]
	if errors.Is(e.Err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s is already in use (another devstack?): stop what listens there, or choose another with %s", e.Service, e.Addr, flag)
	}
	var op *net.OpError
	reason := e.Err
	if errors.As(e.Err, &op) {
		reason = op.Err
	}
	return fmt.Errorf("%s %s: %v", flag, e.Addr, reason)
}

// archive makes the projector archive the sessions that ended into
// ArchiveDir (created), RetainClosed after they ended, and returns the
// archive's URL ("" when ArchiveDir is empty).
func (c *Config) archive(o *Options) (string, error) {
	if c.ArchiveDir == "" {
		return "", nil
	}
	if err := os.MkdirAll(c.ArchiveDir, 0o755); err != nil {
		return "", fmt.Errorf("-archive-dir: %w", err)
	}
	abs, err := filepath.Abs(c.ArchiveDir)
	if err != nil {
		return "", fmt.Errorf("-archive-dir: %w", err)
	}
	u := (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	adjust, retain := o.Projector, c.RetainClosed
	o.Projector = func(pc *projector.Config) {
		pc.RetainClosed, pc.ArchiveURL = retain, u
		if adjust != nil {
			adjust(pc)
		}
	}
	return u, nil
}

func printBanner(w io.Writer, st *Stack, settings []string, dataDir string) {
	kafka := "embedded broker at " + strings.Join(st.Brokers, ",")
	if st.Broker == nil {
		kafka = "external Kafka at " + strings.Join(st.Brokers, ",")
	} else if dataDir != "" {
		kafka += " (log in " + dataDir + ")"
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
  pos=$(curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '{"sessionId":"demo:1","type":"SessionCreated","payload":{"goal":"try it"}}' |
    sed -E 's/.*"position":"([0-9]+:[0-9]+)".*/\1/')   # the event's position, e.g. 3:0
  curl -s "%s/v1/sessions/demo:1?minPosition=$pos&wait=10s"  # read your write
  # a session that times out after 5s without events (TimeoutExpired, then CANCELLING)
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '%s'
  curl -s %s/v1/sessions/demo:quiet | grep -o '"state":"[A-Z_]*"'
  # sessions by label; every change as it happens (Server-Sent Events; Ctrl-C ends it)
  curl -s '%s/v1/sessions?label=team=demo&prefix=demo:quiet'
  curl -N %s/v1/watch
  # an approval decided on its request id, by whom and why; then every event and its outcome, in pages
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' -d '{"events":[
    {"sessionId":"demo:2","type":"SessionCreated"},{"sessionId":"demo:2","type":"SessionStarted"},
    {"sessionId":"demo:2","type":"ApprovalRequested","payload":{"requestId":"deploy-1","reason":"deploy to production"}},
    {"sessionId":"demo:2","type":"ApprovalGranted","payload":{"requestId":"deploy-1","by":"alice","reason":"change reviewed"}}]}'
  curl -s '%s/v1/sessions/demo:2/history?limit=3'
  # the session as it was at version 3, waiting for the approval (or asOf= an RFC 3339 time)
  curl -s '%s/v1/sessions/demo:2?asOf=3'
  # a structured failure (category, code, retryable); a forced cancellation, which ends at once
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '{"sessionId":"demo:2","type":"SessionFailed","payload":{"reason":"provider answered 429","category":"provider","code":"rate_limited","retryable":true}}'
  curl -s -XPOST %s/v1/events -H 'Content-Type: application/json' \
    -d '{"sessionId":"demo:1","type":"CancellationRequested","payload":{"mode":"forced","reason":"runaway"}}'
  # what the background verifier found (snapshots compared with the log, mismatches by kind, repairs)
  curl -s %s/v1/verify
  # or the command line: go install ./cmd/correx
  %s

Ctrl-C stops it. Settings: %s
`, kafka, redis, st.IngestURL, st.QueryURL, st.QueryURL, st.QueryURL, st.ProjectorURL, st.IngestURL, st.QueryURL,
		st.IngestURL, quietSessionEvents("demo:quiet"), st.QueryURL, st.QueryURL, st.QueryURL,
		st.IngestURL, st.QueryURL, st.QueryURL, st.IngestURL, st.IngestURL, st.QueryURL, correxHint(st), strings.Join(settings, ", "))
}

// correxHint is the banner's line of correx commands: they default to the
// devstack's default ports, so other ports go in front as the environment
// variables the command line reads.
func correxHint(st *Stack) string {
	cmds := "correx ls --prefix demo: --limit 10; correx watch; correx top\n  correx verify --prefix demo: --repair"
	def := DefaultConfig()
	if st.IngestURL == "http://"+def.IngestAddr && st.QueryURL == "http://"+def.QueryAddr {
		return cmds
	}
	return fmt.Sprintf("export CORREX_INGEST_URL=%s CORREX_QUERY_URL=%s\n  %s", st.IngestURL, st.QueryURL, cmds)
}

// demoLoad is one round of the demo: realistic sessions that all end
// (Settled), with short timeouts of their own (demoTimeouts) so that the
// projector ends within minutes what an invalid event left open. Hours of
// rounds then reach a steady state instead of piling up sessions in
// CREATED, running or waiting for a 24-hour timeout.
func demoLoad(st *Stack, c Config, seed uint64) loadgen.Config {
	return loadgen.Config{IngestURL: st.IngestURL, QueryURL: st.QueryURL, Sessions: c.DemoSessions,
		Concurrency: 4, Rate: c.DemoRate, Batch: 10, InvalidShare: 0.03, DuplicateShare: 0.03,
		Seed: seed, Prefix: "demo", Settled: true, Timeouts: demoTimeouts()}
}

// demoTimeouts are the demo sessions' own timeouts: long beside a round's
// few seconds, short beside a run of `make run`.
func demoTimeouts() fsm.Timeouts {
	var t fsm.Timeouts
	t[fsm.TimeoutInactivity] = 2 * time.Minute
	t[fsm.TimeoutApproval] = 2 * time.Minute
	t[fsm.TimeoutRecovery] = 2 * time.Minute
	t[fsm.TimeoutCancellation] = time.Minute
	return t
}

// demo runs rounds of realistic sessions against the stack until ctx ends.
func demo(ctx context.Context, st *Stack, c Config, log *slog.Logger, sent *atomic.Int64) {
	for round := uint64(1); ctx.Err() == nil; round++ {
		load := demoLoad(st, c, uint64(time.Now().UnixNano())+round)
		load.Progress = func(n int) { sent.Add(int64(n)) }
		_, err := loadgen.Run(ctx, load)
		if err != nil && ctx.Err() == nil {
			log.Warn("demo workload", "err", err)
			select { // a pause before the next round, not a busy loop
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// progress prints events/s, lag and sessions per state until ctx ends.
func progress(ctx context.Context, w io.Writer, st *Stack, sent *atomic.Int64, every time.Duration, archived func() int) {
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
			if n := archived(); n >= 0 {
				line += fmt.Sprintf("  archived %d", n)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// countArchived counts the objects in a file:// archive's directory (one
// per archived session, internal/archive's keys).
func countArchived(dir string) int {
	n := 0
	_ = filepath.WalkDir(filepath.Join(dir, "sessions"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".json") {
			n++
		}
		return nil
	})
	return n
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

// quietTimeout is the inactivity timeout of the demo's quiet session.
const quietTimeout = "5s"

// quietSessionEvents are the events of a session that starts and goes
// quiet: its inactivity deadline fires quietTimeout after it started.
func quietSessionEvents(id string) string {
	return fmt.Sprintf(`{"events":[{"sessionId":%q,"type":"SessionCreated","payload":{"goal":"go quiet","labels":{"team":"demo"},"timeouts":{"inactivity":%q}}},`+
		`{"sessionId":%q,"type":"SessionStarted"}]}`, id, quietTimeout, id)
}

// demoTimeout shows a timeout firing: it creates a session with an
// inactivity timeout, lets it go quiet, and prints a line to w when the
// projector has timed it out (CANCELLING, by a TimeoutExpired it produced
// itself).
func demoTimeout(ctx context.Context, st *Stack, w io.Writer, log *slog.Logger) {
	id := fmt.Sprintf("demo:quiet-%d", time.Now().Unix())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.IngestURL+"/v1/events", bytes.NewBufferString(quietSessionEvents(id)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Warn("demo timeout session", "err", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Warn("demo timeout session", "status", resp.StatusCode)
		return
	}
	fmt.Fprintf(w, "demo: session %s went quiet; its inactivity timeout (%s) will fire\n", id, quietTimeout)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.QueryURL+"/v1/sessions/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		var s struct {
			State        string
			Cancellation *struct{ Reason, RequestedAt string }
			Deadline     *struct{ Kind, At string }
		}
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err == nil && s.Cancellation != nil {
			next := "none"
			if s.Deadline != nil {
				next = s.Deadline.Kind + " at " + s.Deadline.At
			}
			fmt.Fprintf(w, "demo: session %s timed out: %s, %s at %s (the deadline); next deadline: %s\n",
				id, s.State, s.Cancellation.Reason, s.Cancellation.RequestedAt, next)
			return
		}
	}
}

// lockedWriter serialises the lines of concurrent writers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// demoRules shows the rules an operator acts on: an approval decided on its
// request id, by whom and why; a forced cancellation, which the projector
// ends itself once the forced grace (CORREX_FORCED_GRACE) has passed; and a
// structured failure. It prints a line to w for each once the query service
// shows it.
func demoRules(ctx context.Context, st *Stack, w io.Writer, log *slog.Logger) {
	c, err := client.New(client.IngestURL(st.IngestURL), client.QueryURL(st.QueryURL))
	if err != nil {
		log.Warn("demo rules", "err", err)
		return
	}
	n := time.Now().Unix()
	approval, forced, failed := fmt.Sprintf("demo:approval-%d", n), fmt.Sprintf("demo:forced-%d", n), fmt.Sprintf("demo:failed-%d", n)
	var evs []client.Event
	for _, id := range []string{approval, forced, failed} {
		evs = append(evs, client.SessionCreated(id, client.Goal("show "+strings.TrimPrefix(id, "demo:")), client.Labels(map[string]string{"team": "demo"})),
			client.SessionStarted(id))
	}
	evs = append(evs,
		client.ApprovalRequested(approval, client.RequestID("deploy-1"), client.ApprovalReason("deploy to production")),
		client.ApprovalGranted(approval, client.RequestID("deploy-1"), client.DecidedBy("alice"), client.ApprovalReason("change reviewed")),
		client.CancellationRequested(forced, "runaway tool loop", client.Forced),
		client.SessionFailed(failed, "provider answered 429", client.FailureCategory("provider"), client.FailureCode("rate_limited"), client.Retryable()))
	if _, err := c.Send(ctx, evs...); err != nil {
		log.Warn("demo rules", "err", err)
		return
	}
	type snap struct {
		State    string
		Approval struct {
			Decisions []struct{ RequestID, Decision, By, Reason string }
		}
		Cancellation *struct {
			Mode   string
			Forced bool
		}
		Failure *struct {
			Category, Code string
			Retryable      bool
		}
	}
	show := map[string]func(s snap) string{
		approval: func(s snap) string {
			if len(s.Approval.Decisions) == 0 {
				return ""
			}
			d := s.Approval.Decisions[len(s.Approval.Decisions)-1]
			return fmt.Sprintf("approval %s %s by %s (%s); now %s", d.RequestID, d.Decision, d.By, d.Reason, s.State)
		},
		forced: func(s snap) string {
			if s.State != "CANCELLED" || s.Cancellation == nil {
				return ""
			}
			return fmt.Sprintf("cancelled in %s mode: %s", s.Cancellation.Mode, s.State)
		},
		failed: func(s snap) string {
			if s.Failure == nil {
				return ""
			}
			return fmt.Sprintf("failed: category %s, code %s, retryable %t", s.Failure.Category, s.Failure.Code, s.Failure.Retryable)
		},
	}
	for len(show) > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for id, f := range show {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, st.QueryURL+"/v1/sessions/"+id, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			var s snap
			err = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
			if line := f(s); err == nil && line != "" {
				fmt.Fprintf(w, "demo: session %s %s\n", id, line)
				delete(show, id)
			}
		}
	}
}
