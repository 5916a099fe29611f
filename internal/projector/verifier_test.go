package projector

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// verifyConfig is a projector whose verifier checks 500 sessions a second.
func (e *env) verifyConfig(instance string) Config {
	cfg := e.config(instance)
	cfg.VerifyRate, cfg.VerifyRepair = 500, true
	return cfg
}

// tamperBound is how long the verifier may take to find and repair what a
// test damaged: a few cycles of a hundred sessions at 500 a second (each
// under a second) on a loaded machine.
const tamperBound = 60 * time.Second

// TestVerifierFindsAndRepairsTampering damages Redis three ways behind the
// projector's back (a snapshot rolled back to older bytes with DUMP and
// RESTORE, a byte of a snapshot changed in place, a snapshot key deleted)
// and requires the background verifier to find each, counted by its kind,
// and to repair each, so that the read model equals the fold of the log
// again.
func TestVerifierFindsAndRepairsTampering(t *testing.T) {
	e := newEnv(t, 4)
	const prefix = "vt"
	events := workloadEvents(7, 80)
	// The rolled-back session's last event comes after everything else, so
	// that its older snapshot can be dumped first.
	counts := map[string]int{}
	for _, ev := range events {
		counts[ev.SessionID]++
	}
	var rolled string
	for i := len(events) - 1; i >= 0; i-- {
		if counts[events[i].SessionID] >= 4 {
			rolled = events[i].SessionID
			break
		}
	}
	last := -1
	for i, ev := range events {
		if ev.SessionID == rolled {
			last = i
		}
	}
	lastEvent := events[last]
	events = append(events[:last:last], events[last+1:]...)

	r := e.start(e.verifyConfig("v1"), prefix, nil)
	defer r.halt()
	e.produce(events)
	e.waitCaughtUp(prefix, 60*time.Second)
	key := "vt:" + snapshotKeyTag(rolled) + ":s:" + rolled
	older, err := e.rdb.Dump(ctx, key).Result()
	if err != nil {
		t.Fatalf("dumping %s: %v", key, err)
	}
	e.produce([]fsm.Event{lastEvent})
	e.waitCaughtUp(prefix, 60*time.Second)
	testwait.Until(t, "a verification cycle", tamperBound, func() bool { return r.p.VerifyStats().Cycles >= 1 })
	if s := r.p.VerifyStats(); s.Checked == 0 || total(s.Mismatches) != 0 {
		t.Fatalf("before any damage: %+v, want sessions checked and no mismatch", s)
	}
	want := e.dump(prefix)

	// Two more sessions to damage, other than the rolled-back one.
	var flipped, deleted string
	for id := range want {
		switch {
		case id == rolled:
		case flipped == "":
			flipped = id
		case deleted == "":
			deleted = id
		}
	}
	if err := e.rdb.RestoreReplace(ctx, key, 0, older).Err(); err != nil {
		t.Fatal(err)
	}
	e.flipDigest("vt:" + snapshotKeyTag(flipped) + ":s:" + flipped)
	if err := e.rdb.Del(ctx, "vt:"+snapshotKeyTag(deleted)+":s:"+deleted).Err(); err != nil {
		t.Fatal(err)
	}

	testwait.UntilSeen(t, "each damage found and repaired", tamperBound, func() (bool, string) {
		s := r.p.VerifyStats()
		return s.Mismatches[MismatchStale] >= 1 && s.Mismatches[MismatchCorrupt] >= 1 && s.Mismatches[MismatchMissing] >= 1 &&
			s.Repaired >= 3, fmt.Sprintf("%+v", s)
	})
	s := r.p.VerifyStats()
	if s.Mismatches[MismatchStale] != 1 || s.Mismatches[MismatchCorrupt] != 1 || s.Mismatches[MismatchMissing] != 1 ||
		s.Mismatches[MismatchExtra] != 0 || s.Repaired != 3 {
		t.Errorf("counts %+v, want one stale, one corrupt, one missing, three repaired", s)
	}
	e.assertSame(want, e.dump(prefix))
}

// TestVerifierRepairSticks: the fold folds an event on a damaged
// snapshot it read from Redis (a byte of its digest changed), and writes
// the damage on; the verifier finds that one and repairs it, and the fold
// lets its copy go, so the session's next event is folded on the repair:
// one mismatch, one repair, and the read model the fold of the log.
// Before, the fold kept its wrong copy, folded the next event on it and
// wrote it over the repair, which the verifier found again.
func TestVerifierRepairSticks(t *testing.T) {
	e := newEnv(t, 1)
	const prefix = "vs"
	ev := eventsOf(0xd1)
	e.produce([]fsm.Event{ev("vs-1", fsm.SessionCreated, fsm.Fields{}), ev("vs-1", fsm.SessionStarted, fsm.Fields{})})
	r := e.start(e.verifyConfig("v1"), prefix, nil)
	e.waitCaughtUp(prefix, 60*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	e.flipDigest(prefix + ":" + snapshotKeyTag("vs-1") + ":s:vs-1")
	// Waiting for the next start: the fold reads the damaged snapshot
	// before the verifier's first cycle judges it.
	e.produce([]fsm.Event{ev("vs-1", fsm.ModelRequested, fsm.Fields{})})
	r = e.start(e.verifyConfig("v1"), prefix, nil)
	defer r.halt()
	e.waitCaughtUp(prefix, 60*time.Second)
	testwait.UntilSeen(t, "the damage found and repaired", tamperBound, func() (bool, string) {
		s := r.p.VerifyStats()
		return s.Repaired >= 1, fmt.Sprintf("%+v", s)
	})
	e.produce([]fsm.Event{ev("vs-1", fsm.ModelRequested, fsm.Fields{})})
	e.waitCaughtUp(prefix, 60*time.Second)
	cycles := r.p.VerifyStats().Cycles
	testwait.Until(t, "two more verification cycles", tamperBound, func() bool { return r.p.VerifyStats().Cycles >= cycles+2 })
	if s := r.p.VerifyStats(); total(s.Mismatches) != 1 || s.Repaired != 1 {
		t.Fatalf("%+v, want one mismatch, repaired: the event after the repair folded on the repaired snapshot", s)
	}
	e.assertSame(e.reference("ref"), e.dump(prefix))
}

// flipDigest changes a byte of the digest of the snapshot stored at key,
// in place: bytes that still decode, and differ from the fold's.
func (e *env) flipDigest(key string) {
	e.t.Helper()
	raw, err := e.rdb.Get(ctx, key).Bytes()
	if err != nil {
		e.t.Fatal(err)
	}
	var s snapshot.Snapshot
	if err := snapshot.Decode(raw, &s); err != nil {
		e.t.Fatal(err)
	}
	at := bytes.Index(raw, s.Digest[:])
	if at < 0 {
		e.t.Fatal("the digest is not in the stored bytes")
	}
	if err := e.rdb.SetRange(ctx, key, int64(at), string([]byte{raw[at] ^ 0xff})).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// snapshotKeyTag is the hash tag of a session's snapshot key.
func snapshotKeyTag(id string) string {
	return fmt.Sprintf("{b%03d}", snapshot.Bucket(id))
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestVerifierNoFalsePositiveUnderLoad runs the verifier at a high rate
// while events arrive without pause and a second projector joins and
// leaves (two rebalances), and requires no mismatch at all: a snapshot
// that moves while it is checked is compared again, never reported.
func TestVerifierNoFalsePositiveUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make check): a load with two rebalances at a high verify rate (about 25 s alone); make test runs it")
	}
	e := newEnv(t, 4)
	var conns atomic.Int64 // ApiVersions: the first request of every connection
	e.kc.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kc.KeepControl()
		conns.Add(1)
		return nil, nil, false
	})
	const prefix = "vl"
	r := e.start(e.verifyConfig("v1"), prefix, nil)
	defer r.halt()
	events := workloadEvents(11, 600)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // steady writes: the whole workload, in small chunks
		defer wg.Done()
		for i := 0; i < len(events); i += 20 {
			select {
			case <-stop:
				return
			default:
			}
			e.produce(events[i:min(i+20, len(events))])
		}
	}()
	verifying(t, "two verification cycles under load", r.p, func(s VerifyStats) bool { return s.Cycles >= 2 })
	r2 := e.start(e.verifyConfig("v2"), prefix, nil)
	verifying(t, "the second projector verifying", r2.p, func(s VerifyStats) bool { return s.Cycles >= 1 })
	if err := r2.halt(); err != nil {
		t.Fatal(err)
	}
	c := r.p.VerifyStats().Cycles
	verifying(t, "another cycle after the rebalance", r.p, func(s VerifyStats) bool { return s.Cycles >= c+2 })
	close(stop)
	wg.Wait()
	e.waitCaughtUp(prefix, 60*time.Second)
	c = r.p.VerifyStats().Cycles
	verifying(t, "a cycle once caught up", r.p, func(s VerifyStats) bool { return s.Cycles >= c+2 })
	for _, s := range []VerifyStats{r.p.VerifyStats(), r2.p.VerifyStats()} {
		if s.Checked == 0 || total(s.Mismatches) != 0 || s.Repaired != 0 {
			t.Errorf("verifier %+v: want sessions checked, no mismatch and nothing repaired", s)
		}
	}
	// The verifier reads the log forward with one client a partition's
	// cycle (sessionlog.Cursor): with a client for each read, 3,507 checks
	// made 4,827 connections and the test took 190 s; with the cursor,
	// 2,868 checks made 425 (the projectors' own included) in 25 s.
	checked := r.p.VerifyStats().Checked + r2.p.VerifyStats().Checked
	t.Logf("%d sessions checked, %d connections to the broker", checked, conns.Load())
	if n := conns.Load(); 2*n > checked {
		t.Errorf("%d connections to the broker for %d sessions checked: the verifier connects for each read", n, checked)
	}

}

// verifying waits until done holds for p's verifier, for as long as it
// checks sessions: under a steady load each check may read the log
// further, and a cycle is as slow as the machine is busy.
func verifying(t *testing.T, what string, p *Projector, done func(VerifyStats) bool) {
	t.Helper()
	testwait.WhileProgressing(t, what, tamperBound, func() (bool, string) {
		s := p.VerifyStats()
		return done(s), fmt.Sprintf("%d cycles, %d checked", s.Cycles, s.Checked)
	})
}

// TestVerifierLeavesAStalledPartitionAlone: a partition whose checkpoint is
// beyond the end of the log (the topic was recreated) stalls, and its read
// model belongs to another log. The verifier must neither report nor repair
// anything there (a repair would serve the new log's sessions while the
// partition is stalled), and still verify the other partitions.
func TestVerifierLeavesAStalledPartitionAlone(t *testing.T) {
	e := newEnv(t, 4)
	const prefix = "vs"
	st := e.store(prefix)
	if _, err := st.Claim(ctx, topic, 0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SaveCheckpoints(ctx, topic, []snapshot.Checkpoint{{Partition: 0, Offset: 1_000_000, HighWatermark: 1_000_000}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	r := e.start(e.verifyConfig("v1"), prefix, nil)
	defer r.halt()
	e.produce(workloadEvents(3, 60))
	testwait.Until(t, "partition 0 stalled", tamperBound, func() bool {
		err := r.p.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "partition 0")
	})
	testwait.Until(t, "two verification cycles", 2*tamperBound, func() bool { return r.p.VerifyStats().Cycles >= 2 })
	if s := r.p.VerifyStats(); s.Checked == 0 || total(s.Mismatches) != 0 || s.Repaired != 0 {
		t.Errorf("verifier: %+v, want sessions checked on the other partitions and nothing reported or repaired", s)
	}
	part := kafka.Partitioner().ForTopic(topic)
	for id := range e.dump(prefix) {
		if part.Partition(&kgo.Record{Key: []byte(id)}, 4) == 0 {
			t.Errorf("session %s of the stalled partition 0 is in Redis", id)
		}
	}
}

// TestVerifierJudgesNoReadModelOfAnotherLog: the group hands a partition
// to the verifier when it is assigned, and the start reads the
// checkpoints, finds one beyond the end of the log (the topic was
// recreated) and stalls the partition only after that. A cycle in
// between must judge nothing either: the read model belongs to another
// log, and a "missing" session of the new log repaired into it is served
// while the partition is stalled. The cycle here runs with no stall
// marked at all, every checkpoint past the log's end.
func TestVerifierJudgesNoReadModelOfAnotherLog(t *testing.T) {
	e := newEnv(t, 4)
	const prefix = "vo"
	st := e.store(prefix)
	var cps []snapshot.Checkpoint
	for p := range int32(4) {
		if _, err := st.Claim(ctx, topic, p, 1); err != nil {
			t.Fatal(err)
		}
		cps = append(cps, snapshot.Checkpoint{Partition: p, Offset: 1_000_000, HighWatermark: 1_000_000})
	}
	if _, err := st.SaveCheckpoints(ctx, topic, cps, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.produce(workloadEvents(3, 60))
	cfg := e.verifyConfig("v1")
	s := newState(cfg, nopObserver{}, nil)
	s.pt.n = 4
	v := newVerifier(cfg, st, s, newSystemAuth(), nopObserver{}, testLog())
	v.own(0, 1, 2, 3)
	if _, _, err := v.cycle(ctx, &pacer{every: time.Millisecond}, []int32{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if s := v.stats(); total(s.Mismatches) != 0 || s.Repaired != 0 {
		t.Errorf("verifier: %+v, want nothing reported or repaired against a log that ends before the checkpoints", s)
	}
	if got := e.dump(prefix); len(got) != 0 {
		t.Errorf("%d sessions of the new log were written into the read model of another log", len(got))
	}
}

// TestVerifierIndexesClosedSessions damages the closed sessions'
// index two ways: a closed session's snapshot key and its entry in its
// partition's closed sessions deleted (what an archive sweep that finds
// no snapshot removes), and another's entry alone deleted. The verifier
// must put both entries back: the repair of the first, the check of the
// second. A closed session in Redis with no entry there stays in Redis for
// ever, never archived.
func TestVerifierIndexesClosedSessions(t *testing.T) {
	e := newEnv(t, 4)
	const prefix = "vc"
	r := e.start(e.verifyConfig("v1"), prefix, nil)
	defer r.halt()
	e.produce(workloadEvents(11, 60))
	e.waitCaughtUp(prefix, 60*time.Second)
	var closed []*snapshot.Snapshot
	for _, raw := range e.dump(prefix) {
		var s snapshot.Snapshot
		if err := snapshot.Decode(raw, &s); err != nil {
			t.Fatal(err)
		}
		if s.Terminal() && len(closed) < 2 {
			closed = append(closed, &s)
		}
	}
	if len(closed) < 2 {
		t.Fatalf("the workload closed %d sessions, want 2", len(closed))
	}
	keys := redislayout.NewKeys(prefix)
	deleted, unindexed := closed[0], closed[1]
	for _, s := range closed {
		if err := e.rdb.ZScore(ctx, keys.Closed(topic, s.Position.Partition), s.ID).Err(); err != nil {
			t.Fatalf("%s is not in its partition's closed sessions before any damage: %v", s.ID, err)
		}
		if err := e.rdb.ZRem(ctx, keys.Closed(topic, s.Position.Partition), s.ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.Del(ctx, keys.Snapshot(deleted.ID)).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.UntilSeen(t, "the deleted snapshot repaired and the other indexed", tamperBound, func() (bool, string) {
		s := r.p.VerifyStats()
		return s.Mismatches[MismatchMissing] >= 1 && s.Repaired >= 1 && s.Reindexed >= 1, fmt.Sprintf("%+v", s)
	})
	for _, s := range closed {
		if err := e.rdb.ZScore(ctx, keys.Closed(topic, s.Position.Partition), s.ID).Err(); err != nil {
			t.Errorf("%s is not in its partition's closed sessions after the verifier's cycle: %v (never archived)", s.ID, err)
		}
	}
	if s := r.p.VerifyStats(); s.Reindexed != 1 || s.Repaired != 1 {
		t.Errorf("counts %+v, want one repaired (%s) and one indexed again (%s)", s, deleted.ID, unindexed.ID)
	}
}
