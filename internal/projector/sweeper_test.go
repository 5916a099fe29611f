package projector

import (
	"bytes"
	"context"
	"errors"
	"github.com/correx/sessions/internal/changelog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/archive"
	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/s3test"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/internal/testwait"
	correxotel "github.com/correx/sessions/otel"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
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

	// The changelog's last record of each says it is archived.
	cl := e.client(kgo.ConsumeTopics(changelog.Topic(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	seen := map[string]*kgo.Record{}
	testwait.Until(t, "the changelog's archived records", 20*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) { seen[string(rec.Key)] = rec })
		return len(seen) == len(ended)
	})
	for _, s := range before {
		rec := seen[s.ID]
		want := `{"archived":true,"position":"` + s.Position.String() + `"}`
		if rec == nil || rec.Partition != s.Position.Partition || string(rec.Value) != want ||
			len(rec.Headers) != 1 || rec.Headers[0].Key != "correx-changelog" || string(rec.Headers[0].Value) != "archived" {
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
	dlq := e.client(kgo.ConsumeTopics(kafka.DLQTopic(topic)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer dlq.Close()
	var reason string
	testwait.Until(t, "the later event's dead letter", 20*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		dlq.PollFetches(pctx).EachRecord(func(rec *kgo.Record) {
			for _, h := range rec.Headers {
				if string(rec.Key) == "ar-1" && h.Key == kafka.HeaderDLQReason {
					reason = string(h.Value)
				}
			}
		})
		return reason != ""
	})
	if reason != ReasonUnknownSession {
		t.Fatalf("the dead letter of an event for an archived session: %q, want %q", reason, ReasonUnknownSession)
	}
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
// says why and the metrics count the failures and the sessions due; once
// it works again they are archived and removed, and /readyz is ready
// again.
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
	sweepUntil(t, clock, "/readyz to report the archive", func() bool {
		err := r.p.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "archiving closed sessions")
	})
	clock.Advance(time.Hour)
	time.Sleep(200 * time.Millisecond)
	for i, s := range e.storedSessions("down", ended) {
		if s == nil {
			t.Fatalf("%s left Redis while the archive could not be written", ended[i])
		}
	}
	if err := r.p.Ready(ctx); err == nil {
		t.Fatal("ready while the archive fails")
	}
	sweepUntil(t, clock, "the metrics to show the failures and the 3 sessions due", func() bool {
		m := archiveMetricsOf(t, reader)
		return m["correx.projector.archive.failures"] > 0 && m["correx.projector.archive.due"] == 3 && m["correx.projector.archive.archived"] == 0
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
		return allGone(e.storedSessions("down", ended)) && r.p.Ready(ctx) == nil
	})
	e.checkArchived("file://"+dir, before)
	testwait.Until(t, "the metrics to show the sessions archived", 10*time.Second, func() bool {
		m := archiveMetricsOf(t, reader)
		return m["correx.projector.archive.archived"] == 3 && m["correx.projector.archive.due"] == 0
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

// TestArchiveURLCheckedAtStart: an archive of an unknown scheme, or one
// that cannot be reached, stops the projector at start with an error
// naming CORREX_ARCHIVE_URL.
func TestArchiveURLCheckedAtStart(t *testing.T) {
	for _, c := range []struct{ url, wants string }{
		{"ftp://bucket", "unknown scheme"},
		{"file://" + filepath.Join(t.TempDir(), "missing"), "missing"},
	} {
		cfg := DefaultConfig()
		cfg.RetainClosed, cfg.ArchiveURL = time.Hour, c.url
		err := New(cfg, nil, WithLogger(testLog())).Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "CORREX_ARCHIVE_URL") || !strings.Contains(err.Error(), c.wants) {
			t.Errorf("%s: %v, want CORREX_ARCHIVE_URL and %q named", c.url, err, c.wants)
		}
	}
}
