package sessionlog_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/sessionlog"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 1); err != nil {
		t.Fatal(err)
	}
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

	r := &sessionlog.Reader{Kafka: kafka.Config{Brokers: c.ListenAddrs(), ClientID: "sessionlog-test"}, Topic: topic}
	got, err := r.Histories(ctx, 0, []*snapshot.Snapshot{stored["a"], stored["b"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("histories of %d sessions, want 2", len(got))
	}
	for _, id := range []string{"a", "b"} {
		s := stored[id]
		var want []wire.HistoryEntry
		var f snapshot.Snapshot
		var red fsm.Reducer
		if err := r.Scan(ctx, id, 0, s.FirstOffset, s.Position.Offset, func(e *fsm.Event, pos snapshot.Position) bool {
			if o, ok := f.Fold(&red, e, pos); ok && o.Result != fsm.Orphan {
				want = append(want, sessionlog.Entry(&f, e, pos, o))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !got[id].Complete || !reflect.DeepEqual(got[id].Entries, want) {
			t.Fatalf("%s: history %+v, want complete %+v", id, got[id], want)
		}
		if len(want) != int(s.Counters.Events) || want[len(want)-1].Position != s.Position {
			t.Fatalf("%s: %d entries ending at %v; the stored session folded %d events, at %v", id, len(want), want[len(want)-1].Position, s.Counters.Events, s.Position)
		}
	}
	if a, b := got["a"].Entries, got["b"].Entries; len(a) != 4 || a[3].Type != "SessionCompleted" || len(b) != 3 {
		t.Fatalf("histories: a %+v, b %+v", got["a"], got["b"])
	}
}
