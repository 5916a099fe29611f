package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/correx/sessions/internal/changelog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/internal/testwait"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The sessions of eventsOf end a little after 2026-12-02 09:00; the
// archive tests' clocks start before their retention (an hour) passes.
var archiveClockStart = time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)

func (e *env) archiveConfig(instance, url string) Config {
	cfg := e.config(instance)
	cfg.RetainClosed, cfg.ArchiveURL, cfg.ArchiveSweep = time.Hour, url, 50*time.Millisecond
	cfg.ChangelogEnabled = true // as by default: the archived records are checked
	return cfg
}

// startArchiving starts a projector whose sweeps run by clock.
func (e *env) startArchiving(cfg Config, prefix string, clock *manualClock, setup func(*Projector)) *running {
	p := New(cfg, e.store(prefix), WithLogger(testLog()), WithClock(clock))
	if setup != nil {
		setup(p)
	}
	c, cancel := context.WithCancel(ctx)
	r := &running{p: p, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(c) }()
	return r
}

// sweepUntil moves clock a minute at a time (each move lets every
// partition sweep) until cond holds.
func sweepUntil(t *testing.T, clock *manualClock, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, what, 60*time.Second, func() bool {
		clock.Advance(time.Minute)
		time.Sleep(20 * time.Millisecond)
		return cond()
	})
}

// storedSessions returns the stored snapshots of ids (nil where none).
func (e *env) storedSessions(prefix string, ids []string) []*snapshot.Snapshot {
	e.t.Helper()
	snaps, err := e.store(prefix).GetMany(ctx, ids)
	if err != nil {
		e.t.Fatal(err)
	}
	return snaps
}

func allGone(snaps []*snapshot.Snapshot) bool {
	for _, s := range snaps {
		if s != nil {
			return false
		}
	}
	return true
}

// logHistory is a session's history as the log gives it, folded record
// by record (what GET /v1/sessions/{id}/history answers).
func (e *env) logHistory(s *snapshot.Snapshot) []wire.HistoryEntry {
	e.t.Helper()
	r := &sessionlog.Reader{Kafka: kafka.Config{Brokers: e.brokers, ClientID: "history"}, Topic: topic}
	var out []wire.HistoryEntry
	var f snapshot.Snapshot
	var red fsm.Reducer
	if err := r.Scan(ctx, s.ID, s.Position.Partition, s.FirstOffset, s.Position.Offset, func(ev *fsm.Event, pos snapshot.Position) bool {
		if o, ok := f.Fold(&red, ev, pos); ok && o.Result != fsm.Orphan {
			out = append(out, sessionlog.Entry(&f, ev, pos, o))
		}
		return true
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// checkArchived checks that the archive at url holds each session of want
// as stored before it left Redis, with its whole history from the log.
func (e *env) checkArchived(url string, want []*snapshot.Snapshot) {
	e.t.Helper()
	b, err := archive.Open(ctx, url)
	if err != nil {
		e.t.Fatal(err)
	}
	defer b.Close()
	for _, s := range want {
		o, err := b.Get(ctx, s.ID)
		if err != nil {
			e.t.Fatalf("%s in the archive: %v", s.ID, err)
		}
		if !bytes.Equal(o.Snapshot.AppendBinary(nil), s.AppendBinary(nil)) {
			e.t.Fatalf("%s: archived %s at %v, stored %s at %v", s.ID, o.Snapshot.State, o.Snapshot.Position, s.State, s.Position)
		}
		h := e.logHistory(s)
		if len(h) == 0 || !reflect.DeepEqual(o.History, h) {
			e.t.Fatalf("%s: archived history %+v, the log's %+v", s.ID, o.History, h)
		}
	}
}

// TestArchiveSweep: sessions that ended leave Redis once their retention
// has passed (snapshot, state index, closed index: gets, listings and
// counts no longer show them), after their objects, with the final
// snapshot and the whole history, are in the archive and the changelog
// says they are archived; a live session stays. An event for an archived
// session is then a dead letter unknown_session, and a successor naming
// one is refused unknown_predecessor.
func TestArchiveSweep(t *testing.T) {
	e := newEnv(t, 2)
	ev := eventsOf(0xa1)
	infra := fsm.Fields{Reason: "node lost", Category: "infrastructure"}
	ended := []string{"ar-1", "ar-2", "ar-3", "ar-4", "ar-5"}
	var events []fsm.Event
	for _, id := range ended {
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{}), ev(id, fsm.SessionStarted, fsm.Fields{}))
	}
	events = append(events, ev("live-1", fsm.SessionCreated, fsm.Fields{}), ev("live-1", fsm.SessionStarted, fsm.Fields{}))
	for _, id := range ended {
		if id == "ar-2" {
			events = append(events, ev(id, fsm.SessionFailed, infra))
		} else {
			events = append(events, ev(id, fsm.SessionCompleted, fsm.Fields{}))
		}
	}
	e.produce(events)
	url := "file://" + t.TempDir()
	clock := newManualClock(archiveClockStart)
	r := e.startArchiving(e.archiveConfig("a", url), "arch", clock, nil)
	defer r.halt()
	e.waitSettled("arch")
	before := e.storedSessions("arch", ended)
	for i, s := range before {
		if s == nil || !s.Terminal() {
			t.Fatalf("%s before its retention passed: %+v, want it ended, in Redis", ended[i], s)
		}
	}
	st := e.store("arch")
	sweepUntil(t, clock, "the ended sessions to leave Redis", func() bool { return allGone(e.storedSessions("arch", ended)) })

	if s, err := st.Get(ctx, "live-1"); err != nil || s.State != fsm.StateActive {
		t.Fatalf("the live session: %+v %v", s, err)
	}
	counts, err := st.Count(ctx)
	if err != nil || counts.Total != 1 || counts.ByState[fsm.StateCompleted] != 0 || counts.ByState[fsm.StateFailed] != 0 {
		t.Fatalf("counts after the sweep: %+v %v", counts, err)
	}
	if page, err := st.ListPrefix(ctx, fsm.StateNone, "ar-", "", 100); err != nil || len(page.Snapshots) != 0 {
		t.Fatalf("listing ar-* after the sweep: %d %v", len(page.Snapshots), err)
	}
	for p := range int32(2) {
		if due, n, err := st.DueClosed(ctx, topic, p, archiveClockStart.Add(100*time.Hour), 100); err != nil || len(due)+int(n) != 0 {
			t.Fatalf("partition %d's closed sessions after the sweep: %+v %d %v", p, due, n, err)
		}
	}
	e.checkArchived(url, before)

	// The changelog has an archived record of each.
	cl := e.client(kgo.ConsumeTopics(changelog.Topic(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	seen := map[string]*kgo.Record{}
	testwait.Until(t, "the changelog's archived records", 20*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			// The changelog holds every flushed snapshot and the
			// checkpoints too: the archived records are what is checked.
			if r, err := changelog.DecodeRecord(rec); err == nil && r.Kind == changelog.KindArchived {
				seen[string(rec.Key)] = rec
			}
		})
		return len(seen) == len(ended)
	})
	keys := e.systemKeys()
	for _, s := range before {
		rec := seen[s.ID]
		// The position, then the session's end for its tombstone.
		want := `{"archived":true,"position":"` + s.Position.String() + `","state":"` + s.State.String() + `","version":` +
			strconv.FormatUint(s.Version, 10) + `,"endedMs":`
		if rec == nil || rec.Partition != s.Position.Partition || !strings.HasPrefix(string(rec.Value), want) ||
			len(rec.Headers) != 2 || rec.Headers[0].Key != "correx-changelog" || string(rec.Headers[0].Value) != "archived" ||
			!keys.Verify(rec) {
			t.Fatalf("%s: changelog record %+v, want %s on partition %d", s.ID, rec, want, s.Position.Partition)
		}
	}

	// Later events: for an archived session, and a successor naming one.
	e.produce([]fsm.Event{ev("ar-1", fsm.SessionPaused, fsm.Fields{}), ev("succ-1", fsm.SessionCreated, fsm.Fields{PredecessorSessionID: "ar-2"})})
	e.waitSettled("arch")
	testwait.Until(t, "the successor to be refused", 20*time.Second, func() bool {
		s, err := st.Get(ctx, "succ-1")
		return err == nil && s.State == fsm.StateFailed
	})
	s, _ := st.Get(ctx, "succ-1")
	if s.Replacement.Status != fsm.ReplacementStatusRefused || s.Replacement.Reason != fsm.RefusalUnknownPredecessor {
		t.Fatalf("the successor of an archived session: replacement %+v, want refused %s", s.Replacement, fsm.RefusalUnknownPredecessor)
	}
	for _, id := range []string{"ar-1", "ar-2"} {
		if _, err := st.Get(ctx, id); !errors.Is(err, snapshot.ErrNotFound) {
			t.Fatalf("%s written back after a later event: %v", id, err)
		}
	}
	// The event for ar-1 is rejected after_terminal against its tombstone
	// (TestArchivedIDStaysArchived), not dead-lettered as for an unknown
	// session.
}

// archiveMetricsOf collects the archive sweep's metrics, summed over
// partitions.
func archiveMetricsOf(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !strings.HasPrefix(m.Name, "correx.projector.archive.") {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			}
		}
	}
	return got
}

// TestArchiveDownKeepsSessions: while the archive cannot be written (its
// directory replaced by a file), the sessions due stay in Redis, /readyz
// stays ready and says why under "degraded", and the metrics count the
// failures and the sessions due and show the archive unreachable; once it
// works again they are archived and removed, and nothing is degraded.
func TestArchiveDownKeepsSessions(t *testing.T) {
	e := newEnv(t, 2)
	ev := eventsOf(0xa2)
	ended := []string{"dn-1", "dn-2", "dn-3"}
	var events []fsm.Event
	for _, id := range ended {
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{}), ev(id, fsm.SessionStarted, fsm.Fields{}), ev(id, fsm.SessionCompleted, fsm.Fields{}))
	}
	e.produce(events)
	dir := filepath.Join(t.TempDir(), "bucket")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	clock := newManualClock(archiveClockStart)
	tel, _, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	r := e.startArchiving(e.archiveConfig("a", "file://"+dir), "down", clock, func(p *Projector) { p.obs = obs })
	defer r.halt()
	e.waitSettled("down")
	before := e.storedSessions("down", ended)
	// The archive goes: its directory becomes a file, which nothing can write under.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepUntil(t, clock, "/readyz to report the archive degraded", func() bool {
		return r.p.Ready(ctx) == nil && strings.Contains(strings.Join(r.p.Degraded(), "\n"), "archiving closed sessions")
	})
	clock.Advance(time.Hour)
	time.Sleep(200 * time.Millisecond)
	for i, s := range e.storedSessions("down", ended) {
		if s == nil {
			t.Fatalf("%s left Redis while the archive could not be written", ended[i])
		}
	}
	// Degraded, never unready: the archive is a secondary store.
	if err := r.p.Ready(ctx); err != nil {
		t.Fatalf("not ready while only the archive fails: %v", err)
	}
	if len(r.p.Degraded()) == 0 {
		t.Fatal("not degraded while the archive fails")
	}
	sweepUntil(t, clock, "the metrics to show the failures and the 3 sessions due", func() bool {
		m := archiveMetricsOf(t, reader)
		return m["correx.projector.archive.failures"] > 0 && m["correx.projector.archive.due"] == 3 && m["correx.projector.archive.archived"] == 0 &&
			m["correx.projector.archive.reachable"] == 0
	})
	for i, s := range e.storedSessions("down", ended) {
		if s == nil {
			t.Fatalf("%s left Redis while the archive could not be written", ended[i])
		}
	}
	// Back.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sweepUntil(t, clock, "the sessions to be archived once the archive is back", func() bool {
		return allGone(e.storedSessions("down", ended)) && r.p.Ready(ctx) == nil && len(r.p.Degraded()) == 0
	})
	e.checkArchived("file://"+dir, before)
	testwait.Until(t, "the metrics to show the sessions archived", 10*time.Second, func() bool {
		m := archiveMetricsOf(t, reader)
		return m["correx.projector.archive.archived"] == 3 && m["correx.projector.archive.due"] == 0 && m["correx.projector.archive.reachable"] == 1
	})
}

// TestArchiveFencedByPosition: a session that receives an event between
// the sweep's read and its removal is not removed; the next sweep
// archives it again, with that event.
func TestArchiveFencedByPosition(t *testing.T) {
	e := newEnv(t, 1)
	ev := eventsOf(0xa3)
	e.produce([]fsm.Event{ev("fe-1", fsm.SessionCreated, fsm.Fields{}), ev("fe-1", fsm.SessionStarted, fsm.Fields{}), ev("fe-1", fsm.SessionCompleted, fsm.Fields{})})
	url := "file://" + t.TempDir()
	clock := newManualClock(archiveClockStart)
	st := e.store("fence")
	var moved snapshot.Position
	hooked := false
	r := e.startArchiving(e.archiveConfig("a", url), "fence", clock, func(p *Projector) {
		p.beforeForget = func(ids []string) {
			if hooked {
				return
			}
			hooked = true
			old, err := st.Get(ctx, "fe-1")
			if err != nil {
				t.Error(err)
				return
			}
			// An event folded now, between the read and the removal: a rejection.
			e.produce([]fsm.Event{ev("fe-1", fsm.SessionStarted, fsm.Fields{})})
			if !testwait.Eventually(20*time.Second, func() bool {
				s, err := st.Get(ctx, "fe-1")
				if err == nil && old.Position.Less(s.Position) {
					moved = s.Position
					return true
				}
				return false
			}) {
				t.Error("the later event was not folded")
			}
		}
	})
	defer r.halt()
	e.waitSettled("fence")
	sweepUntil(t, clock, "fe-1 to leave Redis", func() bool { return allGone(e.storedSessions("fence", []string{"fe-1"})) })
	if !hooked || moved == (snapshot.Position{}) {
		t.Fatalf("the event between read and removal: hooked %v, moved to %v", hooked, moved)
	}
	b, err := archive.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	o, err := b.Get(ctx, "fe-1")
	if err != nil {
		t.Fatal(err)
	}
	if o.Snapshot.Position != moved || o.Snapshot.NumRejections() != 1 || len(o.History) != 4 {
		t.Fatalf("archived at %v with %d rejections and %d history entries; want %v (the later event folded), 1, 4",
			o.Snapshot.Position, o.Snapshot.NumRejections(), len(o.History), moved)
	}
}

// TestArchiveSweepMovesWithThePartition: the closed sessions are stored
// state: a projector that never folded them (its partitions' previous
// owner did, then stopped) sweeps them.
func TestArchiveSweepMovesWithThePartition(t *testing.T) {
	e := newEnv(t, 2)
	ev := eventsOf(0xa4)
	ended := []string{"mv-1", "mv-2", "mv-3", "mv-4"}
	var events []fsm.Event
	for _, id := range ended {
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{}), ev(id, fsm.SessionStarted, fsm.Fields{}), ev(id, fsm.SessionCompleted, fsm.Fields{}))
	}
	e.produce(events)
	url := "file://" + t.TempDir()
	a := e.startArchiving(e.archiveConfig("a", url), "move", newManualClock(archiveClockStart), nil)
	e.waitSettled("move")
	if err := a.halt(); err != nil {
		t.Fatal(err)
	}
	before := e.storedSessions("move", ended)
	for i, s := range before {
		if s == nil || !s.Terminal() {
			t.Fatalf("%s before the move: %+v, want it ended, in Redis", ended[i], s)
		}
	}
	clock := newManualClock(archiveClockStart)
	b := e.startArchiving(e.archiveConfig("b", url), "move", clock, nil)
	defer b.halt()
	sweepUntil(t, clock, "the next owner to sweep", func() bool { return allGone(e.storedSessions("move", ended)) })
	e.checkArchived(url, before)
}

// TestArchiveSweepToS3: the sweep archives into a real S3-compatible
// server (versitygw, internal/s3test).
func TestArchiveSweepToS3(t *testing.T) {
	url := s3test.StartBucket(t)
	e := newEnv(t, 2)
	ev := eventsOf(0xa5)
	ended := []string{"s3-1", "s3-2", "s3-3"}
	var events []fsm.Event
	for _, id := range ended {
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{}), ev(id, fsm.SessionStarted, fsm.Fields{}), ev(id, fsm.SessionCompleted, fsm.Fields{}))
	}
	e.produce(events)
	clock := newManualClock(archiveClockStart)
	r := e.startArchiving(e.archiveConfig("a", url), "s3", clock, nil)
	defer r.halt()
	e.waitSettled("s3")
	before := e.storedSessions("s3", ended)
	sweepUntil(t, clock, "the sessions to be archived into S3", func() bool { return allGone(e.storedSessions("s3", ended)) })
	e.checkArchived(url, before)
}

// TestArchiveURLCheckedAtStart: an archive of an unknown scheme stops the
// projector at start with an error naming CORREX_ARCHIVE_URL. A bucket that
// cannot be reached does not (TestArchiveDownKeepsSessions): it is opened
// in the background and reported degraded.
func TestArchiveURLCheckedAtStart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RetainClosed, cfg.ArchiveURL = time.Hour, "ftp://bucket"
	// Bounded, so that a projector that went on to the broker fails here
	// instead of waiting for one.
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := New(cfg, nil, WithLogger(testLog())).Run(runCtx)
	if err == nil || !strings.Contains(err.Error(), "CORREX_ARCHIVE_URL") || !strings.Contains(err.Error(), "unknown scheme") {
		t.Errorf("ftp://bucket: %v, want CORREX_ARCHIVE_URL and %q named", err, "unknown scheme")
	}
}

// TestArchiveHungEndsRounds: with the S3 server hung (SIGSTOP) and calls
// to it allowed a minute, each sweep round ends by its own deadline, is
// counted as a failure, and the due gauge shows the sessions waiting from
// the round's start; the sessions stay in Redis, the projector stays
// ready (degraded), and once the server continues they are archived.
func TestArchiveHungEndsRounds(t *testing.T) {
	e := newEnv(t, 1)
	srv := s3test.Start(t)
	url := srv.Bucket(t, "hung")
	ev := eventsOf(0xa4)
	ended := []string{"hg-1", "hg-2", "hg-3"}
	var events []fsm.Event
	for _, id := range ended {
		events = append(events, ev(id, fsm.SessionCreated, fsm.Fields{}), ev(id, fsm.SessionStarted, fsm.Fields{}), ev(id, fsm.SessionCompleted, fsm.Fields{}))
	}
	e.produce(events)
	clock := newManualClock(archiveClockStart)
	tel, _, reader := correxotel.NewForTest()
	obs, err := NewTelemetry(tel, topic, "g")
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	cfg := e.archiveConfig("a", url)
	cfg.ArchiveTimeout, cfg.ArchiveRound = time.Minute, 2*time.Second
	r := e.startArchiving(cfg, "hung", clock, func(p *Projector) { p.obs = obs })
	defer r.halt()
	e.waitSettled("hung")
	testwait.Until(t, "the archive to be opened", 30*time.Second, func() bool { return r.p.bucket != nil && r.p.bucket.Reachable() })
	srv.Pause()
	defer srv.Resume()
	clock.Advance(2 * time.Hour) // the sessions are due
	testwait.UntilSeen(t, "a failed round counted, with the 3 sessions due", 30*time.Second, func() (bool, string) {
		clock.Advance(time.Minute)
		time.Sleep(50 * time.Millisecond)
		m := archiveMetricsOf(t, reader)
		return m["correx.projector.archive.failures"] > 0 && m["correx.projector.archive.due"] == 3, fmt.Sprint(m)
	})
	if err := r.p.Ready(ctx); err != nil {
		t.Fatalf("not ready while only the archive hangs: %v", err)
	}
	if d := strings.Join(r.p.Degraded(), "\n"); !strings.Contains(d, "archiv") {
		t.Fatalf("degraded: %q, want the archive", d)
	}
	for i, s := range e.storedSessions("hung", ended) {
		if s == nil {
			t.Fatalf("%s left Redis while the archive hung", ended[i])
		}
	}
	srv.Resume()
	sweepUntil(t, clock, "the sessions to be archived once the server continues", func() bool {
		return allGone(e.storedSessions("hung", ended))
	})
}

// TestArchiveSaysAnIncompleteHistory (docs/retention.md, "The object"): a session whose first
// events have left the log (retention) when the sweep archives it is
// archived with its history marked incomplete, the log's start and the
// first version the archive holds (its final snapshot's), never with an
// empty history that looks whole; a session of the same round that the
// log still holds in full is archived complete.
func TestArchiveSaysAnIncompleteHistory(t *testing.T) {
	cluster := kafkatest.Start(t)
	srv := redistest.Start(t)
	e := &env{t: t, brokers: cluster.ListenAddrs(), rdb: srv.Client(t), srv: srv, kc: cluster}
	cl := e.client()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	retention := strconv.FormatInt(time.Hour.Milliseconds(), 10)
	for _, tp := range []string{topic, kafka.DLQTopic(topic)} {
		if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": &retention}, tp); err != nil {
			t.Fatal(err)
		}
	}
	ev := eventsOf(0xa7)
	// tr-1's records are dated two hours back, past the log's retention;
	// ok-1's are dated now.
	old := time.Now().Add(-2 * time.Hour)
	var recs []*kgo.Record
	for _, x := range []fsm.Event{ev("tr-1", fsm.SessionCreated, fsm.Fields{}), ev("tr-1", fsm.SessionStarted, fsm.Fields{}),
		ev("tr-1", fsm.SessionCompleted, fsm.Fields{})} {
		recs = append(recs, &kgo.Record{Key: []byte(x.SessionID), Value: fsm.AppendRecord(nil, &x), Timestamp: old})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.produce([]fsm.Event{ev("ok-1", fsm.SessionCreated, fsm.Fields{}), ev("ok-1", fsm.SessionStarted, fsm.Fields{}),
		ev("ok-1", fsm.SessionCompleted, fsm.Fields{})})

	url := "file://" + t.TempDir()
	clock := newManualClock(archiveClockStart)
	r := e.startArchiving(e.archiveConfig("a", url), "trim", clock, nil)
	defer r.halt()
	e.waitSettled("trim")
	ids := []string{"tr-1", "ok-1"}
	before := e.storedSessions("trim", ids)
	for i, s := range before {
		if s == nil || !s.Terminal() {
			t.Fatalf("%s before its retention passed: %+v, want it ended, in Redis", ids[i], s)
		}
	}
	cluster.ApplyRetention()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := starts.Lookup(topic, 0)
	if start.Offset <= before[0].FirstOffset || start.Offset > before[1].FirstOffset {
		t.Fatalf("the log starts at %d after retention, want past tr-1's first offset %d, not past ok-1's %d",
			start.Offset, before[0].FirstOffset, before[1].FirstOffset)
	}
	sweepUntil(t, clock, "the ended sessions to leave Redis", func() bool { return allGone(e.storedSessions("trim", ids)) })

	b, err := archive.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tr, err := b.Get(ctx, "tr-1")
	if err != nil {
		t.Fatal(err)
	}
	if tr.HistoryComplete() || tr.Truncated.EarliestOffset != start.Offset || tr.FirstVersion() != before[0].Version ||
		len(tr.History) != 0 || tr.Snapshot.Version != before[0].Version {
		t.Fatalf("tr-1 archived: complete %v, truncation %+v, first version %d, %d entries, version %d; want incomplete, "+
			"the log starting at %d, first version %d (the final), no entry",
			tr.HistoryComplete(), tr.Truncated, tr.FirstVersion(), len(tr.History), tr.Snapshot.Version, start.Offset, before[0].Version)
	}
	ok, err := b.Get(ctx, "ok-1")
	if err != nil {
		t.Fatal(err)
	}
	if !ok.HistoryComplete() || ok.FirstVersion() != 1 || len(ok.History) != 3 {
		t.Fatalf("ok-1 archived: complete %v, first version %d, %d entries; want complete from version 1, 3 entries",
			ok.HistoryComplete(), ok.FirstVersion(), len(ok.History))
	}
	// The object's bytes say it, for any reader of the archive.
	var raw struct {
		HistoryComplete *bool  `json:"historyComplete"`
		FirstVersion    uint64 `json:"firstVersion"`
		EarliestOffset  *int64 `json:"earliestOffset"`
	}
	enc, err := archive.Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(enc, &raw); err != nil || raw.HistoryComplete == nil || *raw.HistoryComplete ||
		raw.FirstVersion != before[0].Version || raw.EarliestOffset == nil || *raw.EarliestOffset != start.Offset {
		t.Fatalf("tr-1's object: %s (%v)", enc, err)
	}
}

// TestRoundDeadlineCountsFromProgress: a sweep round's context lasts as
// long as it makes progress, well past its deadline, and ends, naming the
// stall, once the deadline passes without any.
func TestRoundDeadlineCountsFromProgress(t *testing.T) {
	const d = 500 * time.Millisecond
	rctx, progress, cancel := withStall(ctx, d)
	defer cancel()
	for end := time.Now().Add(3 * d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		progress()
		if rctx.Err() != nil {
			t.Fatalf("the round ended while it made progress: %v", context.Cause(rctx))
		}
	}
	select {
	case <-rctx.Done():
	case <-time.After(20 * d):
		t.Fatalf("the round did not end %v after its last progress", 20*d)
	}
	if !errors.Is(context.Cause(rctx), errStalled) {
		t.Fatalf("cause %v, want errStalled", context.Cause(rctx))
	}
	s := &sweeper{deadline: d}
	if err := s.late(rctx, context.Canceled); err == nil || !strings.Contains(err.Error(), "no progress for 500ms") {
		t.Fatalf("late: %v", err)
	}
}
