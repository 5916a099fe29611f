package e2e_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/backoff"
	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kgo"
)

// chaosFaults is how many faults a chaos run lands: CORREX_CHAOS_FAULTS,
// 4 unless set (make chaos sets more, with more runs).
func chaosFaults(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CORREX_CHAOS_FAULTS")
	if v == "" {
		return 4
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CORREX_CHAOS_FAULTS=%q: want a positive number of faults", v)
	}
	return n
}

// chaosDuration is how long a chaos run keeps landing faults:
// CORREX_CHAOS_DURATION (a Go duration, such as 30m), or 0 unless set:
// then a run lands chaosFaults faults.
func chaosDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("CORREX_CHAOS_DURATION")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > chaosMaxDuration/2 {
		t.Fatalf("CORREX_CHAOS_DURATION=%q: want a positive duration up to %v, such as 30m", v, chaosMaxDuration/2)
	}
	return d
}

// chaosMaxDuration bounds CORREX_CHAOS_DURATION, twice over: no session
// of the load may reach a deadline of its own while it is sent (the
// cancellation timeout its sessions name, the service's 24 hours of
// inactivity or awaiting approval).
const chaosMaxDuration = 24 * time.Hour

const (
	// chaosProjectors is how many projector processes share the
	// consumer group in a chaos run.
	chaosProjectors = 2
	// chaosWatchers is how many watches of the change feed a chaos run
	// opens, each cut and resumed while the faults land.
	chaosWatchers = 16
	// chaosDurationRate is the load's rate (events a second) of a run
	// that lasts CORREX_CHAOS_DURATION: every accepted event is kept for
	// the check, about 1.8 million in 30 minutes.
	chaosDurationRate = 1000
	// lossEventsPerSession is about how many events a session of the load
	// has (20.5 measured): a duration's load is sized with it.
	lossEventsPerSession = 20
)

// memoryBounds bound the peak resident memory (VmHWM, read from /proc
// right before each process is killed, or at the end) of every service
// process of a chaos run whose load ingest accepted events events for
// sessions sessions, by binary. Each is about twice the highest measured
// on a busy 2-core machine (the services are built without the race
// detector) in three runs of 4 faults and one of CORREX_CHAOS_DURATION=60s
// (49 service processes, eight broker restarts): the broker 53 MiB (34 MiB
// in the runs of 4 faults), ingest 38 MiB, the query service 132 MiB (16
// watches resumed about a thousand times), a projector 163 MiB. Two grow
// with the load, as a run of 30 minutes (2,027,105 events for 99,400
// sessions) measured: the broker (kfake) holds every record of every topic
// in memory and never compacts, 700 MiB there, about 330 bytes an event
// over the short runs; and a projector, 902 MiB there, about 7.6 KiB a
// session over the short runs: besides its cache, a restore from the
// changelog holds the latest snapshot of each session of its partitions
// (changelog.Latest), and then held the whole fetched batch of each, since
// fixed. A run of 7 minutes (23,500 sessions, 480,000 events, before that
// fix) peaked at 274 MiB for the broker and 360 MiB for a projector. Their
// bounds add 512 bytes an event and 12 KiB a session to the short runs'.
func memoryBounds(events, sessions int) map[string]int64 {
	return map[string]int64{
		"kafkabroker": 112<<20 + 512*int64(events),
		"ingest":      80 << 20,
		"query":       256 << 20,
		"projector":   320<<20 + 12<<10*int64(sessions),
	}
}

// TestChaos runs the services as processes (the broker, ingest, the query
// service, two projectors in one consumer group, redis-server with a
// replica) under a steady verified load through ingest (750 sessions a
// fault, 3,000 at least, 6,000 events a second), with 16 watches of the
// change feed open, and lands a seeded schedule of faults drawn from
// every kind, back to back and overlapping while the load is sent:
//
//   - both projectors killed (SIGKILL) and restarted, one 0-0.8 s after
//     the other, in an order drawn;
//   - Redis emptied (FLUSHALL);
//   - a projector stopped (SIGSTOP), then continued;
//   - redis-server stopped (SIGSTOP), then continued: every write and
//     read of every service hangs meanwhile;
//   - the broker killed (SIGKILL) and, 0.2-1.5 s later, started again on
//     the address the first one reported and on its data directory
//     (KFAKE_DATA_DIR). kfake writes each produced batch to its segment
//     file before it answers the produce, so what it acknowledged is in
//     the operating system's page cache when the process dies and
//     survives a kill -9: the run does not set KFAKE_SYNC_WRITES (an
//     fsync a batch), which only adds survival of a machine crash, a
//     fault this run does not cause. A loss would show: ingest answers
//     202 only once the broker acked, and every session must end exact;
//   - Redis failed over to a lagging replica (laggingFailover: the
//     replica's stream held about a second, the primary killed, the
//     replica promoted on its port, a projector killed in the rebuild
//     that follows), once a run: the promoted replica has none;
//   - the archive's S3 server (versitygw) killed, refusing connections,
//     or stopped (SIGSTOP), accepting them and answering nothing, as a
//     hung server does; held like a stop, and 0.5-3 s longer, then
//     started again on its address and directory, or continued.
//
// The projectors archive every session 2 s after it closes
// (CORREX_RETAIN_CLOSED, lossRetainClosed) into that server's bucket,
// and the query service reads archived sessions from it, so closed
// sessions leave Redis all along the run, through every other fault.
//
// The faults come from a deck of every kind, shuffled by the seed and
// dealt again once used, so that a run of at least as many faults as
// kinds lands each. A stop (a projector's, redis-server's) is held through
// the next fault and its pause, then continued: the two overlap (FLUSHALL
// and the failover are not dealt while redis-server is stopped). Between
// two faults the run goes on for 0-0.5 s.
//
// The watches, each of the ids of one prefix, open before the load and
// are each cut (the connection closed) 0.3-2.5 s after each stream opens
// while it is sent, and resumed with the last id received (Last-Event-ID).
//
// Once the load ends, every checkpoint reached the log's end and the
// sweeps took every closed session out of Redis, every session must be
// exact, as in TestRedisLossAcrossProjectorKills: stored as the fold of
// what ingest acknowledged, byte for byte, nothing else stored, and the
// query service answering each as that fold; here "stored" is in Redis
// for a session the fold leaves open and in the archive for a closed one
// (none left in Redis): its object's snapshot the fold of its events up
// to one at or after its end, byte for byte (an event folded after it
// was archived is refused against its tombstone and not written to the
// object: lossStack.archivedExact), and the query service answering it
// archived at that version; the
// background verifier of every projector process must have reported no
// mismatch (verifierSilent); every watch must have been cut at least once
// and have delivered, for each session of its prefix, exactly the changes
// the fold of what ingest acknowledged implies (one for each event
// rejected, or applied that changed the state or is custom, with its
// version after it; fedChanges; each event after an archived session's
// object rejected at its version, a copy of an earlier event too, since
// a tombstone keeps no event ids: archivedChanges), in that order, and nothing of another
// session (a change delivered again, at or before the session's last
// position delivered, is the feed's at-least-once across a kill, and
// counted); and every service process must have peaked (VmHWM) within
// memoryBounds of the load.
//
// make test runs one seed with 4 faults (4 of the 7 kinds of the deck);
// make chaos runs CORREX_LOSS_RUNS seeds (default 5) with
// CORREX_CHAOS_FAULTS faults (default 12). CORREX_LOSS_SEED replays a
// run: each run logs its seed and its schedule. CORREX_CHAOS_DURATION
// (a Go duration) lands faults until that time is spent instead, under a
// load of 1,000 events a second long enough for it; for 30 minutes:
//
//	make chaos CHAOS_DURATION=30m CHAOS_RUNS=1
//
// that is, CORREX_CHAOS_DURATION=30m CORREX_LOSS_RUNS=1 go test -race
// -count=1 -run '^TestChaos$' -v -timeout 4h ./internal/e2e. The
// archive's outages alone (what the services say, the due gauge, a read
// of an archived session during one) and a stalled owner beside a
// second projector have their own process tests
// (TestArchiveOutageAcrossProcesses, TestStalledOwnerAcrossProcesses).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes")
	}
	t.Parallel() // its own processes and redis-server: beside the other process tests
	runs, seed, faults, duration := lossRuns(t), lossSeed(t), chaosFaults(t), chaosDuration(t)
	bin := buildServices(t, "kafkabroker", "ingest", "projector", "query")
	setup := lossSetup{replica: true, projectors: chaosProjectors, watchers: chaosWatchers, memory: true, archive: true, logCopy: true,
		// A load long enough for every fault to land while it is sent.
		sessions: max(lossSessions, 750*faults)}
	if duration > 0 {
		setup.rate = chaosDurationRate
		// The faults begin once lossFaultsFrom events are accepted, and
		// the load goes on 10% longer than the duration after that.
		setup.sessions = int((1.1*duration.Seconds()*chaosDurationRate + lossFaultsFrom) / lossEventsPerSession)
		// The load plans its sessions' occurredAt from its start, a
		// millisecond apart, but sends them at its rate, the last ones
		// as long after the start as the run lasts: a session sent more
		// than the default cancellation timeout (5 minutes) after its
		// planned time has that deadline passed as it enters CANCELLING,
		// and the projector ends it (a TimeoutExpired of its own) before
		// the load's next event, which the check's fold, of what ingest
		// accepted, does not hold. A run of 30 minutes stored 6,593
		// sessions so. The sessions name a cancellation timeout longer
		// than any run (chaosDuration), as the other armed ones are
		// already (24 hours).
		setup.timeouts[fsm.TimeoutCancellation] = chaosMaxDuration
	}
	exact := 0
	for i := range runs {
		s := seed + uint64(i)
		if t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			lossRun(t, bin, s, setup, func(t *testing.T, ls *lossStack, rng *rand.Rand) string {
				return chaos(t, ls, rng, faults, duration)
			})
		}) {
			exact++
		}
	}
	each := fmt.Sprintf("%d faults each", faults)
	if duration > 0 {
		each = fmt.Sprintf("faults for %v each", duration)
	}
	t.Logf("chaos: exact in %d of %d runs (seeds %d to %d, %s)", exact, runs, seed, seed+uint64(runs)-1, each)
}

// The kinds of fault a chaos run lands.
const (
	faultProjectorsKilled = iota
	faultFlushAll
	faultProjectorStopped
	faultRedisStopped
	faultBrokerRestarted
	faultFailover
	faultArchiveDown
	faultKinds
)

// chaos lands n faults drawn by rng, or, when d is not 0, faults until d
// is spent, and returns the schedule.
func chaos(t *testing.T, s *lossStack, rng *rand.Rand, n int, d time.Duration) string {
	ctx := context.Background()
	var steps []string
	var kinds []int
	for k := range faultKinds {
		if k != faultArchiveDown || s.s3 != nil {
			kinds = append(kinds, k)
		}
	}
	var deck []int
	// held continues what the previous fault stopped: it is held through
	// the next fault and its pause.
	var held func()
	redisStopped, projStopped, archiveDown := false, false, false
	// draw deals the next kind of the deck that can land now: FLUSHALL, a
	// failover and another stop wait for a stopped redis-server to be
	// continued, so they come after (a second stop of the same server,
	// continued by the first one's hold, left redis-server running with a
	// hold still to come: a failover in between killed the server the
	// hold then continued). A failover also waits for a stopped projector:
	// while the group waits for it, the other may own nothing and write
	// nothing for the replica to miss. The archive's outage waits for the
	// one held to end.
	draw := func() int {
		for {
			if j := slices.IndexFunc(deck, func(k int) bool {
				return (!redisStopped || k != faultFlushAll && k != faultFailover && k != faultRedisStopped) &&
					(!projStopped || k != faultFailover) && (!archiveDown || k != faultArchiveDown)
			}); j >= 0 {
				k := deck[j]
				deck = slices.Delete(deck, j, j+1)
				return k
			}
			for _, j := range rng.Perm(len(kinds)) {
				deck = append(deck, kinds[j])
			}
		}
	}
	until := time.Now().Add(d)
	for i := 0; (d > 0 && time.Now().Before(until)) || (d == 0 && i < n); i++ {
		kind := draw()
		var hold func()
		switch kind {
		case faultProjectorsKilled:
			first := rng.IntN(len(s.proj))
			s.restartProjector(t, first)
			steps = append(steps, fmt.Sprintf("projector %d killed and restarted", first+1))
			for j := range s.proj {
				if j != first {
					steps = append(steps, s.pause(rng, 0, 800))
					s.restartProjector(t, j)
					steps = append(steps, fmt.Sprintf("projector %d killed and restarted", j+1))
				}
			}
		case faultFlushAll:
			if err := s.rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, "FLUSHALL")
		case faultProjectorStopped:
			j := rng.IntN(len(s.proj))
			p := s.proj[j]
			if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			projStopped = true
			began := time.Now()
			hold = func() {
				projStopped = false
				if p.running() { // not killed meanwhile
					if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
				}
				steps = append(steps, fmt.Sprintf("projector %d continued after %v", j+1, time.Since(began).Round(time.Millisecond)))
			}
			steps = append(steps, fmt.Sprintf("projector %d stopped", j+1), s.pause(rng, 200, 1000))
		case faultRedisStopped:
			r := s.redis
			if err := r.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			redisStopped = true
			began := time.Now()
			hold = func() {
				if err := r.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				redisStopped = false
				steps = append(steps, fmt.Sprintf("redis-server continued after %v", time.Since(began).Round(time.Millisecond)))
			}
			steps = append(steps, "redis-server stopped", s.pause(rng, 200, 800))
		case faultBrokerRestarted:
			s.kill(t, "kafkabroker", s.broker)
			steps = append(steps, "broker killed", s.pause(rng, 200, 1500))
			s.startBrokerAgain(t)
			steps = append(steps, "broker started again")
		case faultArchiveDown:
			// Killed (connections refused) or stopped (it accepts them
			// and answers nothing, as a hung server does) for this fault's
			// pause, the next fault and its pause.
			hung := rng.IntN(2) == 0
			archiveDown = true
			what := "archive's S3 server killed"
			if hung {
				what = "archive's S3 server stopped"
				s.s3.Pause()
			} else {
				s.s3.Kill()
			}
			began := time.Now()
			hold = func() {
				archiveDown = false
				if hung {
					s.s3.Resume()
				} else {
					s.s3.Restart()
				}
				steps = append(steps, fmt.Sprintf("archive's S3 server back after %v", time.Since(began).Round(time.Millisecond)))
			}
			steps = append(steps, what, s.pause(rng, 500, 3000))
		case faultFailover:
			steps = append(steps, laggingFailover(t, s, rng))
			// Once: the promoted replica has none.
			kinds = slices.DeleteFunc(kinds, func(k int) bool { return k == faultFailover })
			deck = slices.DeleteFunc(deck, func(k int) bool { return k == faultFailover })
		}
		if held != nil {
			held()
		}
		held = hold
		steps = append(steps, s.pause(rng, 0, 500))
	}
	if held != nil {
		held()
	}
	return strings.Join(steps, ", ")
}

// withinMemory requires the peak resident memory of every service process
// of the run (those killed on the way, read before their kill, and the
// running ones) within memoryBounds, and logs each binary's highest.
func (s *lossStack) withinMemory(t *testing.T, rep loadgen.Report) {
	t.Helper()
	memoryBounds := memoryBounds(rep.Events, rep.Sessions)
	peaks := slices.Clone(s.peaks)
	peaks = append(peaks, procPeak{"kafkabroker", procStatusBytes(s.broker, "VmHWM:")},
		procPeak{"ingest", procStatusBytes(s.ingest, "VmHWM:")}, procPeak{"query", procStatusBytes(s.query, "VmHWM:")})
	for _, p := range s.proj {
		peaks = append(peaks, procPeak{"projector", procStatusBytes(p, "VmHWM:")})
	}
	highest := map[string]int64{}
	for _, p := range peaks {
		bound, ok := memoryBounds[p.name]
		switch {
		case !ok:
			t.Errorf("%s: no memory bound", p.name)
		case p.bytes <= 0:
			t.Errorf("%s: no peak resident memory read", p.name)
		case p.bytes > bound:
			t.Errorf("a %s process peaked at %d MiB resident, over its bound of %d MiB", p.name, p.bytes>>20, bound>>20)
		}
		highest[p.name] = max(highest[p.name], p.bytes)
	}
	var line []string
	for _, name := range slices.Sorted(maps.Keys(memoryBounds)) {
		line = append(line, fmt.Sprintf("%s %d MiB (bound %d MiB)", name, highest[name]>>20, memoryBounds[name]>>20))
	}
	t.Logf("peak resident memory over %d service processes, the highest of each binary: %s", len(peaks), strings.Join(line, ", "))
}

// feedWatchers are watches of the change feed (GET /v1/watch?prefix=),
// each of the sessions of one id prefix, cut and resumed while the run
// goes on.
type feedWatchers struct {
	ws      []*feedWatcher
	cutting atomic.Bool // cut each stream 0.3-2.5 s after it opens
	broker  string      // the feed's, to show what it holds
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// feedWatcher is one watch: what it was delivered, checked as it comes.
type feedWatcher struct {
	prefix string

	mu     sync.Mutex
	cursor string // the last id received: Last-Event-ID of the next stream
	// got holds, per session, the changes delivered the first time, in
	// the order delivered; last, the position of the last one.
	got     map[string][]fedChange
	last    map[string]wire.Position
	changes int // changes delivered
	repeats int // changes delivered again (the feed is at least once)
	opens   int // streams answered 200
	cuts    int // streams cut by the watcher
	ends    int // streams the service ended (or a restart broke)
	err     error
}

// watchFeed opens n watches of the change feed of the sessions cfg's load
// sends, each of the ids beginning with cfg's id prefix and a digit or
// two (1 to n), and returns once each received its first block (the
// cursor it starts from, the feed's end): every change of the load comes
// after. They are cut once cutting is set.
func watchFeed(t *testing.T, ctx context.Context, queryURL, broker string, cfg loadgen.Config, n int, seed uint64) *feedWatchers {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	fw := &feedWatchers{cancel: cancel, broker: broker}
	t.Cleanup(func() { cancel(); fw.wg.Wait() })
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * n}}
	t.Cleanup(hc.CloseIdleConnections)
	// The ids of the load are "<prefix>-<seed in base 36>-<i>": the watches
	// cover about an ninth of them each for 1 to 9, a ninetieth for 10
	// and up (complete checks that each covers some).
	base := cfg.Prefix + "-" + strconv.FormatUint(cfg.Seed, 36) + "-"
	for i := range n {
		w := &feedWatcher{prefix: base + strconv.Itoa(i+1), got: map[string][]fedChange{}, last: map[string]wire.Position{}}
		fw.ws = append(fw.ws, w)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		fw.wg.Go(func() { w.run(ctx, hc, queryURL, rng, &fw.cutting) })
	}
	testwait.UntilSeen(t, "every watch established", 60*time.Second, func() (bool, string) {
		for _, w := range fw.ws {
			w.mu.Lock()
			cursor, err := w.cursor, w.err
			w.mu.Unlock()
			if err != nil {
				t.Fatalf("watch of %s: %v", w.prefix, err)
			}
			if cursor == "" {
				return false, "no cursor yet for the watch of " + w.prefix
			}
		}
		return true, ""
	})
	fw.cutting.Store(true)
	return fw
}

// run opens streams, one after the other, until ctx ends: each resumes
// from the last id received, and is cut after a random time while
// cutting is set.
func (w *feedWatcher) run(ctx context.Context, hc *http.Client, queryURL string, rng *rand.Rand, cutting *atomic.Bool) {
	u := queryURL + "/v1/watch?prefix=" + url.QueryEscape(w.prefix)
	retry := backoff.Exponential{Min: 20 * time.Millisecond, Max: time.Second}
	failures := 0
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			w.fail(err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		w.mu.Lock()
		if w.cursor != "" {
			req.Header.Set("Last-Event-ID", w.cursor)
		}
		w.mu.Unlock()
		resp, err := hc.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			// 429: the cut stream's slot is not given back yet; 503:
			// the feed is not read yet (the broker restarting).
			if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
				w.fail(fmt.Errorf("answered %d: %s", resp.StatusCode, body))
				return
			}
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		if err != nil {
			failures++
			if failures > 200 {
				w.fail(fmt.Errorf("%d attempts in a row failed, the last: %v", failures, err))
				return
			}
			if backoff.Sleep(ctx, retry.Wait(failures)) != nil { // a retry's backoff
				return
			}
			continue
		}
		failures = 0
		w.mu.Lock()
		w.opens++
		w.mu.Unlock()
		// The stream is cut 0.3-2.5 s after it opens, or as much after
		// cutting is set.
		var cut atomic.Bool
		read := make(chan struct{})
		go func(after time.Duration) {
			timer := time.NewTimer(after)
			defer timer.Stop()
			for {
				select {
				case <-read:
					return
				case <-timer.C:
				}
				if cutting.Load() {
					cut.Store(true)
					resp.Body.Close()
					return
				}
				timer.Reset(after)
			}
		}(time.Duration(300+rng.IntN(2200)) * time.Millisecond)
		w.read(resp.Body)
		close(read)
		resp.Body.Close()
		w.mu.Lock()
		switch {
		case cut.Load():
			w.cuts++
		case ctx.Err() == nil:
			w.ends++
		}
		w.mu.Unlock()
	}
}

// read reads one stream's blocks until it ends: the id of each moves the
// cursor, as an SSE client's last event id, once its block is complete.
func (w *feedWatcher) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var event, id, data string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			w.mu.Lock()
			if id != "" {
				w.cursor = id
			}
			if event == "change" && data != "" {
				var c wire.Change
				if err := wire.Decode([]byte(data), &c); err != nil {
					w.err = firstErr(w.err, fmt.Errorf("a change that does not decode: %v: %s", err, data))
				} else {
					w.apply(&c)
				}
			}
			w.mu.Unlock()
			event, id, data = "", "", ""
			continue
		}
		if line[0] == ':' {
			continue // a heartbeat
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "id":
			id = value
		case "data":
			data += value
		}
	}
}

// fedChange is what a change of the feed says of its event.
type fedChange struct {
	eventID string
	version uint64
	outcome string
}

// apply notes a change as it is delivered; w.mu is held. A session's
// events are on one partition, so its changes' positions increase: one at
// or before the last delivered is delivered again.
func (w *feedWatcher) apply(c *wire.Change) {
	w.changes++
	if !strings.HasPrefix(c.SessionID, w.prefix) {
		w.err = firstErr(w.err, fmt.Errorf("a change of %s delivered", c.SessionID))
		return
	}
	if last, ok := w.last[c.SessionID]; ok && !last.Less(c.Position) {
		w.repeats++
		return
	}
	w.last[c.SessionID] = c.Position
	w.got[c.SessionID] = append(w.got[c.SessionID], fedChange{c.EventID, c.Version, c.Outcome})
}

// wrongWatch is what a watch delivered for a session and what it should
// have.
type wrongWatch struct{ got, want []fedChange }

// diagnose tells where the changes of sessions a watch delivered otherwise
// went wrong, from what the feed topic holds of each (its records in
// order, the first of each position kept, as a watch keeps them):
//
//   - "in order": the topic holds the fold's changes in order, and the
//     watch (the query service's or this test's) lost or reordered them;
//   - "out of order": the topic holds the fold's changes, but a later
//     one's first copy before an earlier one's (a producer's ordering);
//   - "other": the topic holds other changes than the fold's.
//
// It logs the count of each and, for the first sessions of each, the
// topic's records with the producer id and epoch of each batch.
func (fw *feedWatchers) diagnose(t *testing.T, wrongs map[string]wrongWatch) {
	t.Helper()
	type held struct {
		c   fedChange
		pos wire.Position
		rec *kgo.Record
	}
	topic := map[string][]held{}
	for _, r := range readTopicWithin(t, fw.broker, feed.Topic(lossTopic), 10*time.Minute) {
		if _, ok := wrongs[string(r.Key)]; !ok {
			continue
		}
		var c wire.Change
		if err := wire.Decode(r.Value, &c); err != nil {
			t.Errorf("the feed's record at %d:%d does not decode: %v", r.Partition, r.Offset, err)
			continue
		}
		topic[c.SessionID] = append(topic[c.SessionID], held{fedChange{c.EventID, c.Version, c.Outcome}, c.Position, r})
	}
	kinds := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(wrongs)) {
		var first []held // the first copy of each position, in topic order
		seen := map[wire.Position]bool{}
		for _, h := range topic[id] {
			if !seen[h.pos] {
				seen[h.pos] = true
				first = append(first, h)
			}
		}
		sorted := slices.Clone(first)
		slices.SortStableFunc(sorted, func(a, b held) int { return cmp.Compare(a.pos.Offset, b.pos.Offset) })
		changes := func(hs []held) []fedChange {
			out := make([]fedChange, len(hs))
			for i, h := range hs {
				out[i] = h.c
			}
			return out
		}
		kind := "other"
		switch w := wrongs[id].want; {
		case slices.Equal(changes(first), w):
			kind = "in order"
		case slices.Equal(changes(sorted), w):
			kind = "out of order"
		}
		kinds[kind] = append(kinds[kind], id)
	}
	for _, kind := range []string{"in order", "out of order", "other"} {
		ids := kinds[kind]
		t.Logf("sessions delivered otherwise whose changes the feed topic holds %s: %d", kind, len(ids))
		for _, id := range ids[:min(3, len(ids))] {
			t.Logf("  %s: the watch delivered %v", id, wrongs[id].got)
			for _, h := range topic[id] {
				t.Logf("    at %d:%d (producer %d epoch %d): version %d %s event %s at %v", h.rec.Partition, h.rec.Offset,
					h.rec.ProducerID, h.rec.ProducerEpoch, h.c.version, h.c.outcome, h.c.eventID, h.pos)
			}
		}
	}
}

// fedChanges are the changes the feed has for events, folded in order: one
// for each event rejected, or applied that changed the state or is custom
// (internal/projector's derived.add), with the version after it.
func fedChanges(events []fsm.Event) []fedChange {
	var out []fedChange
	var s fsm.Session
	var r fsm.Reducer
	for i := range events {
		e := &events[i]
		switch o := r.Apply(&s, e); {
		case o.Result == fsm.Rejected:
			out = append(out, fedChange{e.ID.String(), s.Version, wire.Rejected})
		case o.Result == fsm.Applied && (o.Transitioned() || e.Type == fsm.EventCustom):
			out = append(out, fedChange{e.ID.String(), s.Version, wire.Applied})
		}
	}
	return out
}

// archivedChanges are the changes the feed has for events of a session
// archived once the first k were folded: those of the first k
// (fedChanges), then one rejected for each event after, at the archived
// version.
func archivedChanges(events []fsm.Event, k int) []fedChange {
	out := fedChanges(events[:k])
	version := loadgen.Expected(events[:k]).Version
	for i := k; i < len(events); i++ {
		out = append(out, fedChange{events[i].ID.String(), version, wire.Rejected})
	}
	return out
}

func (w *feedWatcher) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = firstErr(w.err, err)
}

// firstErr keeps the first error of two.
func firstErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// complete waits until every watch delivered every change of its
// sessions (those the fold of what ingest acknowledged, rep, implies),
// stops them, and requires each watch's changes those, in order, once
// each (repeats aside), of its prefix alone, and each watch cut and
// resumed at least once. archivedAt holds, for each session archived
// during the run, how many of its events the archived object holds: each
// event after them was folded against the session's tombstone, which
// keeps no event ids, and is rejected, a copy of an earlier event too
// (docs/retention.md); -1 leaves the session unchecked.
func (fw *feedWatchers) complete(t *testing.T, rep loadgen.Report, archivedAt map[string]int) {
	t.Helper()
	fw.cutting.Store(false)
	want := make([]map[string][]fedChange, len(fw.ws))
	for i, w := range fw.ws {
		want[i] = map[string][]fedChange{}
		for id, events := range rep.Written {
			if strings.HasPrefix(id, w.prefix) {
				fed := fedChanges(events)
				if k, ok := archivedAt[id]; ok {
					if k < 0 {
						continue // archived, and resent: not known
					}
					fed = archivedChanges(events, k)
				}
				if len(fed) > 0 {
					want[i][id] = fed
				}
			}
		}
		if len(want[i]) == 0 {
			t.Fatalf("the watch of %s covers none of the load's sessions: the load's ids are spelled otherwise", w.prefix)
		}
	}
	// Waited for, then checked below: a watch that lacks changes is
	// reported with what it lacks and what the feed holds.
	testwait.Eventually(120*time.Second, func() bool {
		for i, w := range fw.ws {
			w.mu.Lock()
			failed, short := w.err != nil, false
			for id, fed := range want[i] {
				if len(w.got[id]) < len(fed) {
					short = true
					break
				}
			}
			w.mu.Unlock()
			if failed {
				return true // reported below
			}
			if short {
				return false
			}
		}
		return true
	})
	fw.cancel()
	fw.wg.Wait()
	var changes, repeats, opens, cuts, ends, wrong int
	wrongs := map[string]wrongWatch{} // by session: one watch that delivered it otherwise
	for i, w := range fw.ws {
		if w.err != nil {
			t.Errorf("the watch of %s: %v", w.prefix, w.err)
		}
		if w.cuts == 0 {
			t.Errorf("the watch of %s was never cut and resumed (%d streams)", w.prefix, w.opens)
		}
		ids := slices.Sorted(maps.Keys(want[i]))
		for id := range w.got {
			if _, ok := want[i][id]; !ok && archivedAt[id] >= 0 {
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			if got, fed := w.got[id], want[i][id]; !slices.Equal(got, fed) {
				if wrong++; wrong <= 5 {
					t.Errorf("the watch of %s delivered for %s:\n%v\nthe changes of the fold of what ingest acknowledged:\n%v", w.prefix, id, got, fed)
				}
				wrongs[id] = wrongWatch{got: got, want: fed}
			}
		}
		changes, repeats, opens, cuts, ends = changes+w.changes, repeats+w.repeats, opens+w.opens, cuts+w.cuts, ends+w.ends
	}
	if wrong > 5 {
		t.Errorf("and %d other sessions delivered otherwise", wrong-5)
	}
	if wrong > 0 {
		fw.diagnose(t, wrongs)
	}
	t.Logf("%d watches: %d changes delivered (%d again), over %d streams: %d cut and resumed, %d ended by the service",
		len(fw.ws), changes, repeats, opens, cuts, ends)
}
