package changelog

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafkatest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLatestHoldsOnlyWhatItKeeps reads, over the Kafka protocol, a
// changelog partition of 400 sessions that each wrote 1 to 50 snapshots
// of about 1.6 KB, in rounds, so that each session's latest snapshot sits
// in a different part of the log, as in a changelog written under load
// (sessions end at different times), and keeps them in a Latest: the heap
// it holds once the client is closed must be about the kept snapshots,
// not the log's. A kept record's value is a slice of its fetched batch:
// before Add copied it, 0.93 MB of kept snapshots held 22.6 MB of heap
// (the batches of the 10,200 records, over which the 400 latest snapshots
// are spread); with the copy, 1.1 MB.
func TestLatestHoldsOnlyWhatItKeeps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, sessions, rounds = "events.snapshots", 400, 50
	c := kafkatest.Start(t)
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	goal := strings.Repeat("g", 1500)
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var red fsm.Reducer
	states := make([]snapshot.Snapshot, sessions)
	records := 0
	for round := range rounds {
		var batch []*kgo.Record
		for i := range sessions {
			if round > i%rounds { // session i writes 1 + i%rounds snapshots
				continue
			}
			id := fmt.Sprintf("s-%03d", i)
			ev := fsm.NewEvent(fsm.EventID{byte(i), byte(i >> 8), byte(round)}, id, fsm.SessionCreated, at, fsm.Fields{Goal: goal})
			if round > 0 {
				ev = fsm.NewEvent(fsm.EventID{byte(i), byte(i >> 8), byte(round)}, id, fsm.SessionPaused, at, fsm.Fields{})
			}
			states[i].Fold(&red, &ev, snapshot.Position{Partition: 0, Offset: int64(records)})
			records++
			batch = append(batch, SnapshotRecord(topic, 0, id, states[i].AppendBinary(nil)))
		}
		if err := prod.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	var l Latest
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for read < records {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", read, records, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			rec, err := DecodeRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			l.Add(rec)
		})
	}
	cl.Close()
	held := int64(heap()) - int64(before)
	kept := 0
	for _, r := range l.Snapshots {
		kept += len(r.Snapshot)
	}
	if len(l.Snapshots) != sessions {
		t.Fatalf("kept %d sessions, want %d", len(l.Snapshots), sessions)
	}
	t.Logf("%d records read; %d snapshots kept, %d bytes; the heap grew by %d bytes", records, len(l.Snapshots), kept, held)
	// The kept bytes, the map and the records' other fields, with room
	// for what the broker and the runtime allocate meanwhile.
	if limit := int64(3*kept + 2<<20); held > limit {
		t.Fatalf("keeping %d bytes of %d snapshots holds %d bytes of heap, over %d: the kept records hold their fetched batches",
			kept, len(l.Snapshots), held, limit)
	}
	runtime.KeepAlive(&l)
}
