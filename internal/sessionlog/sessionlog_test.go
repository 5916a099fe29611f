package sessionlog_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const topic = "sessionlog-test"

// TestHistoriesReadsThePartitionOnceAndMatchesEachSessionsScan: the
// histories of sessions interleaved on one partition, read in one pass,
// are what folding each session's own records (Scan) gives, entry for
// entry; a record set aside (a reserved id without the system header) and
// another session's records are not in them, and each history stops at
// its session's stored position.
func TestHistoriesReadsThePartitionOnceAndMatchesEachSessionsScan(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cl, r := startLog(ctx, t)
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	n := byte(0)
	ev := func(id string, typ fsm.EventType) fsm.Event {
		n++
		at = at.Add(time.Second)
		return fsm.NewEvent(fsm.EventID{9, n}, id, typ, at, fsm.Fields{Goal: "g"})
	}
	stored := map[string]*snapshot.Snapshot{"a": {}, "b": {}, "c": {}}
	reds := map[string]*fsm.Reducer{"a": {}, "b": {}, "c": {}}
	produce := func(e fsm.Event, fold bool) {
		rec := &kgo.Record{Key: []byte(e.SessionID), Value: fsm.AppendRecord(nil, &e)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if fold {
			stored[e.SessionID].Fold(reds[e.SessionID], &e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
		}
	}
	produce(ev("c", fsm.SessionCreated), true)
	produce(ev("a", fsm.SessionCreated), true)
	produce(ev("b", fsm.SessionCreated), true)
	produce(ev("a", fsm.SessionInitializing), true)
	reserved := fsm.NewEvent(fsm.DeriveEventID("test", "a"), "a", fsm.SessionStarted, at, fsm.Fields{})
	produce(reserved, false) // set aside: no system header
	produce(ev("b", fsm.SessionInitializing), true)
	produce(ev("a", fsm.SessionStarted), true)
	produce(ev("a", fsm.SessionCompleted), true)
	produce(ev("b", fsm.SessionCancelled), true)
	produce(ev("b", fsm.ModelRequested), false) // after b's stored position: not in its history

	want := map[string][]wire.HistoryEntry{}
	for _, id := range []string{"a", "b"} {
		s := stored[id]
		var f snapshot.Snapshot
		var red fsm.Reducer
		if err := r.Scan(ctx, id, 0, s.FirstOffset, s.Position.Offset, func(e *fsm.Event, pos snapshot.Position) bool {
			if o, ok := f.Fold(&red, e, pos); ok && o.Result != fsm.Orphan {
				want[id] = append(want[id], sessionlog.Entry(&f, e, pos, o))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if w := want[id]; len(w) != int(s.Counters.Events) || w[len(w)-1].Position != s.Position {
			t.Fatalf("%s: %d entries ending at %v; the stored session folded %d events, at %v", id, len(w), w[len(w)-1].Position, s.Counters.Events, s.Position)
		}
	}
	if a, b := want["a"], want["b"]; len(a) != 4 || a[3].Type != "SessionCompleted" || len(b) != 3 {
		t.Fatalf("histories: a %+v, b %+v", a, b)
	}
	// The budget decides which histories are held and which are read
	// again alone; what fn is handed is the same either way.
	for _, tt := range []struct {
		name     string
		budget   int64
		streamed int
	}{
		{"both held", 0, 0},
		{"a streamed, b held", 1000, 1}, // a: 4 entries expected, b: 3, each about 256 bytes
		{"both streamed", 100, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string][]wire.HistoryEntry{}
			streamed := 0
			err := r.Histories(ctx, 0, []*snapshot.Snapshot{stored["a"], stored["b"]}, tt.budget, func(s *snapshot.Snapshot, h sessionlog.History) error {
				if !h.Complete {
					t.Errorf("%s: incomplete", s.ID)
				}
				if h.Streamed() {
					streamed++
				}
				return h.Each(func(e wire.HistoryEntry) error { got[s.ID] = append(got[s.ID], e); return nil })
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || streamed != tt.streamed {
				t.Fatalf("%d streamed, histories %+v; want %d streamed, %+v", streamed, got, tt.streamed, want)
			}
		})
	}
}

// TestHistoriesNeverCallsAShortenedHistoryComplete (docs/retention.md, "The object"): a
// session whose first offset the log's start passed is handed over
// incomplete, without a read; and one whose first record leaves the log
// between the plan and the read of its history (retention ran meanwhile)
// is ErrFirstRecordGone, not the records left folded into a shorter
// history.
func TestHistoriesNeverCallsAShortenedHistoryComplete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cl, r := startLog(ctx, t)
	adm := kadm.NewClient(cl)
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	stored := map[string]*snapshot.Snapshot{"old": {}, "new": {}}
	reds := map[string]*fsm.Reducer{"old": {}, "new": {}}
	for i, x := range []struct {
		id  string
		typ fsm.EventType
	}{{"old", fsm.SessionCreated}, {"new", fsm.SessionCreated}, {"old", fsm.SessionCancelled}, {"new", fsm.SessionCancelled}} {
		e := fsm.NewEvent(fsm.EventID{7, byte(i)}, x.id, x.typ, at.Add(time.Duration(i)*time.Second), fsm.Fields{Goal: "g"})
		rec := &kgo.Record{Key: []byte(e.SessionID), Value: fsm.AppendRecord(nil, &e)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		stored[x.id].Fold(reds[x.id], &e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
	}
	deleteBelow := func(off int64) {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: topic, Partition: 0, At: off})
		res, err := adm.DeleteRecords(ctx, os)
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	deleteBelow(1) // old's creation leaves the log
	// budget 1: new's history is read alone, when fn consumes it, and
	// new's creation leaves the log first.
	var got []string
	err := r.Histories(ctx, 0, []*snapshot.Snapshot{stored["old"], stored["new"]}, 1, func(s *snapshot.Snapshot, h sessionlog.History) error {
		got = append(got, fmt.Sprintf("%s complete=%v earliest=%d streamed=%v", s.ID, h.Complete, h.EarliestOffset, h.Streamed()))
		if s.ID == "new" {
			deleteBelow(2)
		}
		return h.Each(func(wire.HistoryEntry) error { return nil })
	})
	if !errors.Is(err, sessionlog.ErrFirstRecordGone) {
		t.Fatalf("err %v, want ErrFirstRecordGone", err)
	}
	want := []string{"old complete=false earliest=1 streamed=false", "new complete=true earliest=0 streamed=true"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("handed\n%q\nwant\n%q", got, want)
	}
}

// TestCursorReadsForwardOnOneConnection: a cursor that follows a growing
// log, a few records at a time (as the verifier follows a checkpoint
// under writes), hands out each record once, in order, the same records
// a single Read of the whole range gives, including those a fetch
// brought past what a call asked for; ErrBeyondLog for a range past the
// log's end leaves it at the end; and it connects to the broker no more
// often than one Read does, however many reads it serves.
func TestCursorReadsForwardOnOneConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, cl, r := startLog(ctx, t)
	var conns atomic.Int64 // ApiVersions: the first request of every connection
	c.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		conns.Add(1)
		return nil, nil, false
	})
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	sent := 0
	produce := func(n int) {
		t.Helper()
		for range n {
			sent++
			at = at.Add(time.Second)
			e := fsm.NewEvent(fsm.EventID{5, byte(sent)}, fmt.Sprintf("s%d", sent%3), fsm.SessionCreated, at, fsm.Fields{Goal: "g"})
			if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(e.SessionID), Value: fsm.AppendRecord(nil, &e)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(40)
	type rec struct {
		off int64
		id  string
	}
	read := func(from, end int64) ([]rec, error) {
		var out []rec
		err := r.Read(ctx, 0, from, end, func(e *fsm.Event, pos snapshot.Position) bool {
			out = append(out, rec{pos.Offset, e.SessionID})
			return true
		})
		return out, err
	}
	before := conns.Load()
	if _, err := read(0, 0); err != nil {
		t.Fatal(err)
	}
	perRead := conns.Load() - before

	cur, err := r.Cursor(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	before = conns.Load()
	var got []rec
	take := func(e *fsm.Event, pos snapshot.Position) bool {
		got = append(got, rec{pos.Offset, e.SessionID})
		return true
	}
	// Three records a call over what is there (a fetch brings all 40),
	// then the log grows between calls.
	for end := int64(2); end < 40; end += 3 {
		if err := cur.ReadTo(ctx, end, take); err != nil {
			t.Fatalf("to %d: %v", end, err)
		}
		if n := int64(len(got)); n != end+1 || got[n-1].off != end || cur.Next() != end+1 {
			t.Fatalf("to %d: %d records, the last %+v, next %d", end, n, got[n-1], cur.Next())
		}
	}
	for range 10 {
		produce(2)
		if err := cur.ReadTo(ctx, cur.Next()+1, take); err != nil {
			t.Fatal(err)
		}
	}
	err = cur.ReadTo(ctx, 100, take)
	if !errors.Is(err, sessionlog.ErrBeyondLog) || cur.Next() != 60 {
		t.Fatalf("past the end: %v, next %d; want ErrBeyondLog at 60", err, cur.Next())
	}
	if err := cur.ReadTo(ctx, 59, take); err != nil {
		t.Fatal(err) // already read: nothing to do
	}
	cursorConns := conns.Load() - before

	want, err := read(0, 59)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || len(want) != 60 {
		t.Fatalf("the cursor handed out %d records\n%+v\none read gives %d\n%+v", len(got), got, len(want), want)
	}
	t.Logf("one Read connected %d times; the cursor's 25 reads, %d times", perRead, cursorConns)
	if perRead == 0 || cursorConns > perRead {
		t.Fatalf("the cursor's 25 reads connected %d times; one Read connects %d times", cursorConns, perRead)
	}
}

// startLog starts a broker with the topic (one partition), and returns
// it, a client producing to the topic and a Reader of it.
func startLog(ctx context.Context, t *testing.T) (*kfake.Cluster, *kgo.Client, *sessionlog.Reader) {
	t.Helper()
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 1); err != nil {
		t.Fatal(err)
	}
	return c, cl, &sessionlog.Reader{Kafka: kafka.Config{Brokers: c.ListenAddrs(), ClientID: "sessionlog-test"}, Topic: topic}
}

// TestCursorBrokenStaysBroken: a read stopped other than by the log's end
// (here its context, ended) breaks the cursor for good: every later call,
// with a live context too, returns that error and hands out nothing, not
// the records a fetch had already brought past the last call, since what
// the stopped read took may be missing between them.
func TestCursorBrokenStaysBroken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cl, r := startLog(ctx, t)
	at := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	for i := range 10 {
		e := fsm.NewEvent(fsm.EventID{6, byte(i)}, "s", fsm.SessionCreated, at.Add(time.Duration(i)*time.Second), fsm.Fields{Goal: "g"})
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(e.SessionID), Value: fsm.AppendRecord(nil, &e)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := r.Cursor(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	var got []int64
	take := func(_ *fsm.Event, pos snapshot.Position) bool {
		got = append(got, pos.Offset)
		return true
	}
	if err := cur.ReadTo(ctx, 2, take); err != nil {
		t.Fatal(err)
	}
	ended, end := context.WithCancel(ctx)
	end()
	// Past the high watermark last read: the call reads it again, with
	// the ended context.
	if err := cur.ReadTo(ended, 20, take); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read with an ended context returned %v, want context.Canceled", err)
	}
	for _, to := range []int64{5, 9, 20} {
		err := cur.ReadTo(ctx, to, take)
		if !errors.Is(err, context.Canceled) || errors.Is(err, sessionlog.ErrBeyondLog) {
			t.Fatalf("to %d after the break: %v, want the break's error", to, err)
		}
	}
	if want := []int64{0, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("handed out offsets %v, want %v and nothing after the break", got, want)
	}
}
