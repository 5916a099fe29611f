package query_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/internal/query"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReplaySkipsAReservedIDWithoutTheSystemHeader: a record that carries
// an eventId reserved for the system's derived ids, written by another
// producer (no system header), is set aside by the projector; the replay
// skips it by the same rule, so it gives the snapshot the projector
// stored. The same id with the header (a record the system wrote) is
// folded.
func TestReplaySkipsAReservedIDWithoutTheSystemHeader(t *testing.T) {
	c := kafkatest.Start(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kafka.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kafka.EnsureTopic(ctx, kadm.NewClient(cl), topic, 1); err != nil {
		t.Fatal(err)
	}
	const id = "acme:r-1"
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	reserved := fsm.DeriveEventID("test", id)
	events := []struct {
		e      fsm.Event
		system bool
		folded bool
	}{
		{fsm.NewEvent(fsm.EventID{1, 1}, id, fsm.SessionCreated, at, fsm.Fields{Goal: "g"}), false, true},
		{fsm.NewEvent(reserved, id, fsm.SessionInitializing, at.Add(time.Second), fsm.Fields{}), false, false},
		{fsm.NewEvent(reserved, id, fsm.SessionStarted, at.Add(2*time.Second), fsm.Fields{}), true, true},
		{fsm.NewEvent(fsm.EventID{1, 2}, id, fsm.ModelRequested, at.Add(3*time.Second), fsm.Fields{}), false, true},
	}
	var want snapshot.Snapshot
	var r fsm.Reducer
	for _, ev := range events {
		rec := &kgo.Record{Key: []byte(id), Value: fsm.AppendRecord(nil, &ev.e)}
		if ev.system {
			rec.Headers = append(rec.Headers, kafka.SystemHeader())
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if ev.folded {
			want.Fold(&r, &ev.e, snapshot.Position{Partition: rec.Partition, Offset: rec.Offset})
		}
	}
	if want.State != fsm.StateActive || want.Version != 3 || want.Counters.Duplicates != 0 {
		t.Fatalf("the expected fold: %s, version %d, %d duplicates", want.State, want.Version, want.Counters.Duplicates)
	}
	rp := &query.KafkaReplayer{Kafka: kafka.Config{Brokers: c.ListenAddrs(), ClientID: "replay-test"}, Topic: topic}
	got, err := rp.Replay(ctx, &want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.AppendBinary(nil), want.AppendBinary(nil)) {
		t.Fatalf("replay: %s, version %d, %d duplicates; want %s, version %d, %d duplicates",
			got.State, got.Version, got.Counters.Duplicates, want.State, want.Version, want.Counters.Duplicates)
	}
}
