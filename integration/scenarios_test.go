//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/loadgen"
	"github.com/correx/sessions/pkg/fsm"
)

// pipeline starts a whole stack: the broker and Redis on fresh volumes, the
// ingest and query services, and one projector per id.
func pipeline(t *testing.T, projectors ...string) *stack {
	t.Helper()
	s := newStack(t)
	s.startKafka(s.volume("kafka"))
	s.startRedis(s.volume("redis"))
	s.startIngest()
	s.startQuery()
	for _, id := range projectors {
		s.startProjector(id)
	}
	return s
}

// workload is the suites' load: realistic sessions with some invalid and
// resent events, at rate events per second (0: as fast as possible).
func workload(prefix string, seed uint64, sessions int, rate float64) loadgen.Config {
	return loadgen.Config{Sessions: sessions, Concurrency: 8, Batch: 40, Rate: rate,
		InvalidShare: 0.05, DuplicateShare: 0.05, Seed: seed, Prefix: prefix}
}

// seed returns the scenario's random seed (CORREX_IT_SEED reproduces a run).
func seed(t *testing.T) uint64 {
	t.Helper()
	if v := envOr("CORREX_IT_SEED", ""); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CORREX_IT_SEED: %v", err)
		}
		return n
	}
	n := uint64(time.Now().UnixNano() % 1_000_000)
	t.Logf("seed %d (CORREX_IT_SEED=%d reproduces the random choices)", n, n)
	return n
}

// TestHappyPath runs 2000 sessions through a healthy pipeline: every final
// snapshot equals the reference fold, and the listing, the stats and replays
// from the log agree.
//
// It starts the stack with the public testcontainers-go module
// (pkg/testkit/correx), as the suites of services that use correx do.
func TestHappyPath(t *testing.T) {
	t.Parallel()
	in, q := modulePipeline(t)
	rep := startLoad(context.Background(), in, workload("happy", seed(t), 2000, 0)).wait(t)
	if rep.Retries != 0 || len(rep.Resent) != 0 {
		t.Errorf("a healthy pipeline made the load resend %d requests", rep.Retries)
	}
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)
	verifyListing(t, q, exp)
	verifyReplays(t, q, exp, 20, 1)
}

// TestProjectorKilled SIGKILLs the projector at random moments while load
// runs (and, where the load ends before the fifth, while it catches up), at
// least five times, and restarts it under the same instance id: nothing is
// lost and nothing is applied twice.
func TestProjectorKilled(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	q := s.url(s.query)
	rng := rand.New(rand.NewPCG(seed(t), 1))
	mon := startMonitor(q)
	l := startLoad(context.Background(), s.url(s.ingest), workload("kill", rng.Uint64()%1000, 2000, 1200))
	p := s.projectors["projector-0"]
	// At least 5 kills: as many as fall while the load runs, then more
	// while the projector catches up, on a machine slow enough that the
	// load ends first.
	kills, duringLoad := 0, 0
	var slowest time.Duration
	for l.running() || kills < 5 {
		time.Sleep(time.Duration(1500+rng.IntN(2500)) * time.Millisecond)
		if !l.running() && kills >= 5 {
			break
		}
		before, err := getStats(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if l.running() {
			duringLoad++
		}
		s.kill(p)
		kills++
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		s.start(p)
		// Static membership: the restarted member takes its partitions
		// back at once, so every partition moves again within seconds.
		restarted := time.Now()
		s.waitFor("every partition folded again after the restart", 30*time.Second, 100*time.Millisecond, func() error {
			if !l.running() {
				return nil // no more events to show progress with
			}
			st, err := getStats(context.Background(), q)
			if err != nil {
				return err
			}
			for part := int32(0); part < partitions; part++ {
				if st.checkpoint(part) <= before.checkpoint(part) {
					return fmt.Errorf("partition %d still at checkpoint %d", part, st.checkpoint(part))
				}
			}
			return nil
		})
		slowest = max(slowest, time.Since(restarted))
	}
	rep := l.wait(t)
	t.Logf("killed the projector %d times, %d of them while the load ran; every partition progressed again within %v of each restart",
		kills, duringLoad, slowest.Round(10*time.Millisecond))
	if duringLoad == 0 {
		t.Fatalf("no kill happened while the load ran: the load was too short")
	}
	if rep.Retries != 0 {
		t.Errorf("ingest made the load resend %d requests, though only the projector was killed", rep.Retries)
	}
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	mon.finish(t)
	verifyStats(t, q, exp)
	verifyReplays(t, q, exp, 10, 2)
}

// TestProjectorScaling scales the projectors from one to three and back to
// one under load: every event's effect is shown once, and the query service
// answers every poll during the scaling with 200, 304 or 404.
func TestProjectorScaling(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	q := s.url(s.query)
	mon := startMonitor(q)
	l := startLoad(context.Background(), s.url(s.ingest), workload("scale", seed(t), 2000, 1000))
	time.Sleep(6 * time.Second)
	p1, p2 := s.startProjector("projector-1"), s.startProjector("projector-2")
	time.Sleep(12 * time.Second)
	if !l.running() {
		t.Fatal("the load ended before the scale-down: make it longer")
	}
	for _, p := range []*node{p1, p2} {
		if !assignedAny(s.logs(p)) {
			t.Fatalf("%s joined but was never assigned a partition", p.alias)
		}
	}
	before, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	s.remove(p1, 20*time.Second)
	s.remove(p2, 20*time.Second)
	// Static members do not leave the group when they stop: their
	// partitions move to projector-0 only after the session timeout (6s).
	removed := time.Now()
	s.waitFor("every partition folded again after the scale-down", 30*time.Second, 100*time.Millisecond, func() error {
		if !l.running() {
			return errStop
		}
		st, err := getStats(context.Background(), q)
		if err != nil {
			return err
		}
		for part := int32(0); part < partitions; part++ {
			if st.checkpoint(part) <= before.checkpoint(part) {
				return fmt.Errorf("partition %d still at checkpoint %d", part, st.checkpoint(part))
			}
		}
		return nil
	})
	t.Logf("every partition progressed again %v after projector-1 and projector-2 stopped", time.Since(removed).Round(10*time.Millisecond))
	rep := l.wait(t)
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	mon.finish(t)
	verifyStats(t, q, exp)
}

var assignedRE = regexp.MustCompile(`msg="partitions assigned" [^\n]*partitions="?\[[0-9]`)

// assignedAny reports whether a projector's log shows a non-empty assignment.
func assignedAny(log string) bool { return assignedRE.MatchString(log) }

// TestProjectorFrozen freezes one of two projectors with SIGSTOP past the
// group's session timeout while load runs, so the other takes its partitions
// over, then resumes it: whatever the resumed zombie still writes, no snapshot
// or checkpoint may go backwards.
func TestProjectorFrozen(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0", "projector-1")
	q := s.url(s.query)
	mon := startMonitor(q)
	l := startLoad(context.Background(), s.url(s.ingest), workload("frozen", seed(t), 2000, 1000))
	time.Sleep(6 * time.Second)
	frozen := s.projectors["projector-0"]
	before, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	s.signal(frozen, "SIGSTOP")
	t.Logf("froze %s", frozen.alias)
	// Past the session timeout (6s) and the rebalance, every partition must
	// progress again: projector-1 took the frozen one's partitions over.
	time.Sleep(8 * time.Second)
	mid, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	after, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	s.signal(frozen, "SIGCONT")
	t.Logf("resumed %s after %v", frozen.alias, 14*time.Second)
	if !l.running() {
		t.Fatal("the load ended while the projector was frozen: make it longer")
	}
	for p := int32(0); p < partitions; p++ {
		if after.checkpoint(p) <= mid.checkpoint(p) {
			t.Errorf("partition %d made no progress while projector-0 was frozen (checkpoint %d at freeze, %d then %d)",
				p, before.checkpoint(p), mid.checkpoint(p), after.checkpoint(p))
		}
	}
	rep := l.wait(t)
	exp := expectOf(rep)
	verifySnapshots(t, q, exp, verifyOpts{})
	mon.finish(t)
	verifyStats(t, q, exp)
}

// TestRedisRestartAndFlush SIGKILLs Redis under load and starts it again (AOF
// with fsync always: nothing acknowledged is lost), then empties it with
// FLUSHALL under load, and once more when everything is folded: each time the
// projector notices the missing checkpoints and rebuilds the read model from
// the log.
func TestRedisRestartAndFlush(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	q := s.url(s.query)
	sd := seed(t)

	l := startLoad(context.Background(), s.url(s.ingest), workload("redis-a", sd, 1500, 1500))
	time.Sleep(7 * time.Second)
	s.kill(s.redis)
	time.Sleep(2 * time.Second)
	s.start(s.redis)
	repA := l.wait(t)
	verifySnapshots(t, q, expectOf(repA), verifyOpts{})

	l = startLoad(context.Background(), s.url(s.ingest), workload("redis-b", sd+1, 1000, 1500))
	time.Sleep(5 * time.Second)
	rdb := s.redisClient()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	t.Log("emptied Redis (FLUSHALL)")
	repB := l.wait(t)
	exp := expectOf(repA, repB)
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)

	// Emptied again with nothing more to fold: the projector must notice by
	// itself, not at the next event.
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	t.Log("emptied Redis (FLUSHALL) with no load")
	verifySnapshots(t, q, exp, verifyOpts{})
	verifyStats(t, q, exp)
	verifyReplays(t, q, exp, 10, 3)
}

// TestBrokerRestart stops the broker under load and starts it again on its
// data volume: while it is down ingest answers 503 with Retry-After; the load
// resends, and no accepted event is lost.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	q, in := s.url(s.query), s.url(s.ingest)
	l := startLoad(context.Background(), in, workload("broker", seed(t), 2000, 1200))
	time.Sleep(7 * time.Second)
	s.stop(s.kafka, 20*time.Second)
	t.Log("stopped the broker")
	downSince := time.Now()
	var unavailable int
	for time.Since(downSince) < 10*time.Second {
		code, hdr, body := postProbe(t, in)
		switch code {
		case http.StatusServiceUnavailable:
			unavailable++
			ra, err := strconv.Atoi(hdr.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Errorf("503 with Retry-After %q, want a number of seconds", hdr.Get("Retry-After"))
			}
			if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Errorf("503 with Content-Type %q, want application/problem+json", ct)
			}
		case http.StatusAccepted:
			t.Errorf("ingest accepted an event while the broker was down: %s", body)
		default:
			t.Errorf("ingest answered %d while the broker was down, want 503: %s", code, body)
		}
	}
	if unavailable == 0 {
		t.Fatal("ingest never answered 503 while the broker was down")
	}
	s.start(s.kafka)
	t.Logf("started the broker again after %v; ingest answered 503 %d times meanwhile", time.Since(downSince).Round(time.Second), unavailable)
	s.waitFor("ingest accepts again", 60*time.Second, 500*time.Millisecond, func() error {
		if code, _, body := postProbe(t, in); code != http.StatusAccepted {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	if !l.running() {
		t.Fatal("the load ended while the broker was down: make it longer")
	}
	rep := l.wait(t)
	if rep.Retries == 0 {
		t.Error("the load never had to resend, so the broker restart did not hit it")
	}
	verifySnapshots(t, q, expectOf(rep), verifyOpts{})
}

// postProbe posts one SessionCreated for a session of its own (never checked
// against a reference: a 503 may still have written it).
func postProbe(t *testing.T, ingestURL string) (int, http.Header, []byte) {
	t.Helper()
	id, err := fsm.NewEventID(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := fsm.NewEvent(id, "probe-"+id.String(), fsm.SessionCreated, time.Now(), fsm.Fields{})
	req, err := http.NewRequest(http.MethodPost, ingestURL+"/v1/events", bytes.NewReader(fsm.AppendRecord(nil, &e)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/events: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// TestCheckpointBeyondLog recreates the broker with an empty data volume
// under a read model that remembers the old log: the projector must not skip
// silently. It reports every partition on /readyz with the remedy and folds
// nothing; `projector reset -yes` clears the read model, and the restarted
// projector rebuilds it from the new log.
func TestCheckpointBeyondLog(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	sd := seed(t)
	rep1 := startLoad(context.Background(), s.url(s.ingest), workload("old", sd, 2000, 0)).wait(t)
	old := expectOf(rep1)
	verifySnapshots(t, s.url(s.query), old, verifyOpts{})
	verifyStats(t, s.url(s.query), old) // waits for the last accepted events' checkpoints

	// Stop everything; recreate the broker on an empty volume (the topic is
	// created anew); keep Redis. The read model the stalled projector must
	// leave alone is the one the stopped projector left: its last
	// checkpoints can pass the last accepted event's (a resent duplicate, a
	// fired deadline folded later), so they are read once it has stopped.
	proj := s.projectors["projector-0"]
	s.stop(proj, 20*time.Second)
	oldStats, err := getStats(context.Background(), s.url(s.query))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{s.ingest, s.query} {
		s.stop(n, 20*time.Second)
	}
	s.remove(s.kafka, 20*time.Second)
	s.startKafka(s.volume("kafka-new"))
	s.start(s.ingest)
	s.start(s.query)
	s.start(proj)
	q, pu := s.url(s.query), s.url(proj)

	l := startLoad(context.Background(), s.url(s.ingest), workload("new", sd+1, 300, 0))
	// Every partition's checkpoint is past the end of the new log.
	s.waitFor("projector /readyz reports every stalled partition", 60*time.Second, 500*time.Millisecond, func() error {
		code, _, body, err := get(context.Background(), pu+"/readyz", nil)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("/readyz answered %d %s, want 503", code, body)
		}
		for p := 0; p < partitions; p++ {
			if !strings.Contains(string(body), fmt.Sprintf("partition %d:", p)) {
				return fmt.Errorf("/readyz does not name partition %d: %s", p, body)
			}
		}
		if !strings.Contains(string(body), "projector reset") {
			return fmt.Errorf("/readyz does not name the remedy (projector reset): %s", body)
		}
		return nil
	})
	repNew := l.wait(t)
	time.Sleep(3 * time.Second) // what a projector that skipped would fold in that time
	stalled, err := getStats(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stalled.checkpoints(), oldStats.checkpoints(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the stalled partitions moved: checkpoints %v, before the broker was recreated %v", got, want)
	}
	if stalled.Sessions.Total != oldStats.Sessions.Total {
		t.Errorf("%d sessions in the read model while stalled, want the old %d", stalled.Sessions.Total, oldStats.Sessions.Total)
	}
	newExp := expectOf(repNew)
	for _, id := range newExp.ids()[:20] {
		if code, _, body, err := get(context.Background(), q+"/v1/sessions/"+id, nil); err != nil || code != http.StatusNotFound {
			t.Errorf("session %s of the new log is served (%d %v) while every partition is stalled: %s", id, code, err, body)
		}
	}
	_, _, body, _ := get(context.Background(), pu+"/readyz", nil)
	t.Logf("stalled as expected; /readyz: %s", body)

	s.stop(proj, 20*time.Second)
	out := s.resetReadModel()
	if !strings.Contains(out, "reset: deleted") {
		t.Fatalf("projector reset printed no summary:\n%s", out)
	}
	s.start(proj)
	pu = s.url(proj) // a restarted container gets a new host port
	verifySnapshots(t, q, newExp, verifyOpts{})
	verifyStats(t, q, newExp)
	s.waitFor("projector /readyz", 30*time.Second, 500*time.Millisecond, func() error {
		if code, _, body, err := get(context.Background(), pu+"/readyz", nil); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v %s", code, err, body)
		}
		return nil
	})
	for _, id := range old.ids()[:50] {
		if code, _, _, err := get(context.Background(), q+"/v1/sessions/"+id, nil); err != nil || code != http.StatusNotFound {
			t.Errorf("session %s of the old log still served after the reset (%d %v)", id, code, err)
		}
	}
}

// TestDeadlinesSurviveProjectorKill arms an inactivity deadline on 200
// sessions, SIGKILLs the projector before they fall due and keeps it down
// while they do, then starts it again: every deadline fires, once in effect
// (each session is CANCELLING by timeout:inactivity at version 3, with one
// transition into CANCELLING), and sessions that kept moving are not timed
// out.
func TestDeadlinesSurviveProjectorKill(t *testing.T) {
	t.Parallel()
	s := pipeline(t, "projector-0")
	in, q := s.url(s.ingest), s.url(s.query)
	post := func(events ...string) string {
		t.Helper()
		body := `{"events":[` + strings.Join(events, ",") + `]}`
		resp, err := http.Post(in+"/v1/events", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 202 {
			t.Fatalf("ingest: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	ev := func(id, typ, payload string) string {
		if payload == "" {
			return fmt.Sprintf(`{"sessionId":%q,"type":%q}`, id, typ)
		}
		return fmt.Sprintf(`{"sessionId":%q,"type":%q,"payload":%s}`, id, typ, payload)
	}
	const quiet, busy = 200, 20
	for i := 0; i < quiet; i += 50 {
		var batch []string
		for j := i; j < i+50; j++ {
			id := fmt.Sprintf("dl:quiet-%03d", j)
			batch = append(batch, ev(id, "SessionCreated", `{"timeouts":{"inactivity":"6s"}}`), ev(id, "SessionStarted", ""))
		}
		post(batch...)
	}
	var batch []string
	for j := range busy {
		id := fmt.Sprintf("dl:busy-%02d", j)
		batch = append(batch, ev(id, "SessionCreated", `{"timeouts":{"inactivity":"6s"}}`), ev(id, "SessionStarted", ""))
	}
	post(batch...)
	armedAt := time.Now()
	// The deadlines are armed (flushed) before the kill.
	s.waitFor("the sessions folded", 20*time.Second, 100*time.Millisecond, func() error {
		return sessionState(q, fmt.Sprintf("dl:quiet-%03d", quiet-1), "ACTIVE")
	})
	p := s.projectors["projector-0"]
	s.kill(p)
	// Keep the busy sessions moving while the projector is down and after.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var b []string
			for j := range busy {
				b = append(b, ev(fmt.Sprintf("dl:busy-%02d", j), "ToolRequested", ""))
			}
			post(b...)
		}
	}()
	time.Sleep(time.Until(armedAt.Add(8 * time.Second))) // due while nothing runs
	s.start(p)
	s.waitFor("every quiet session timed out", 60*time.Second, 250*time.Millisecond, func() error {
		for i := range quiet {
			if err := sessionState(q, fmt.Sprintf("dl:quiet-%03d", i), "CANCELLING"); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("%d deadlines fired %v after they were armed, across a SIGKILL of the projector", quiet, time.Since(armedAt).Round(100*time.Millisecond))
	close(stop)
	<-done
	for i := range quiet {
		id := fmt.Sprintf("dl:quiet-%03d", i)
		snap := getSnapshot(t, q, id)
		c, _ := snap["cancellation"].(map[string]any)
		if snap["version"] != float64(3) || c == nil || c["reason"] != "timeout:inactivity" {
			t.Errorf("%s: version %v, cancellation %v; want version 3 cancelled by timeout:inactivity", id, snap["version"], c)
		}
		into := 0
		for _, tr := range snap["transitions"].([]any) {
			if tr.(map[string]any)["to"] == "CANCELLING" {
				into++
			}
		}
		if into != 1 {
			t.Errorf("%s: %d transitions into CANCELLING", id, into)
		}
	}
	for j := range busy {
		if err := sessionState(q, fmt.Sprintf("dl:busy-%02d", j), "ACTIVE"); err != nil {
			t.Errorf("a session that kept moving: %v", err)
		}
	}
}

func getSnapshot(t *testing.T, queryURL, id string) map[string]any {
	t.Helper()
	resp, err := http.Get(queryURL + "/v1/sessions/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %d %v", id, resp.StatusCode, err)
	}
	return m
}

// sessionState returns nil when the session is in state.
func sessionState(queryURL, id, state string) error {
	resp, err := http.Get(queryURL + "/v1/sessions/" + id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var m struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return fmt.Errorf("%s: %d %v", id, resp.StatusCode, err)
	}
	if m.State != state {
		return fmt.Errorf("%s is %s, not %s", id, m.State, state)
	}
	return nil
}
