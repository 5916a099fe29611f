package projector

import (
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWrongPartition writes a record of a session by hand to a partition
// that is not its key's: it goes to the DLQ as wrong_partition without
// touching the snapshot, and the session's events on its own partition are
// all folded.
func TestWrongPartition(t *testing.T) {
	e := newEnv(t, 4)
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	mk := func(n byte, typ fsm.EventType) fsm.Event {
		return fsm.NewEvent(fsm.EventID{0x42, n}, "acme:wp1", typ, at.Add(time.Duration(n)*time.Second), fsm.Fields{})
	}
	r := e.start(e.config("a"), "wrong", nil)
	e.produce([]fsm.Event{mk(1, fsm.SessionCreated)})
	e.waitRunning(r, "wrong", 30*time.Second)
	right := kafka.Partitioner().ForTopic(topic).Partition(&kgo.Record{Key: []byte("acme:wp1")}, 4)
	wrongPart := int32(3)
	if right == 3 {
		wrongPart = 2
	}
	stray := mk(2, fsm.SessionStarted)
	cl := e.client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("acme:wp1"), Partition: wrongPart, Value: fsm.AppendRecord(nil, &stray)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(r, "wrong", 30*time.Second)
	e.produce([]fsm.Event{mk(3, fsm.SessionStarted), mk(4, fsm.ModelRequested), mk(5, fsm.SessionCompleted)})
	e.waitRunning(r, "wrong", 30*time.Second)
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	var s snapshot.Snapshot
	if err := snapshot.Decode(e.dump("wrong")["acme:wp1"], &s); err != nil {
		t.Fatal(err)
	}
	if s.State != fsm.StateCompleted || s.Version != 4 || s.Position.Partition != int32(right) || s.Counters.Events != 4 {
		t.Fatalf("snapshot: state %s, version %d, events %d, position %v; want COMPLETED, 4, 4, on partition %d",
			s.State, s.Version, s.Counters.Events, s.Position, right)
	}
	dlq := e.dlqRecords(1)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	if reason, _ := header(dlq[0], kafka.HeaderDLQReason); reason != ReasonWrongPartition {
		t.Fatalf("DLQ reason %q, want %q", reason, ReasonWrongPartition)
	}
}
