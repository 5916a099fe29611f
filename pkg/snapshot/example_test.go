package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Fold records at their log positions; a replayed record is skipped.
func ExampleSnapshot_Fold() {
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	created := fsm.NewEvent(fsm.EventID{1}, "s-1", fsm.SessionCreated, at, fsm.Fields{Goal: "ship it"})
	started := fsm.NewEvent(fsm.EventID{2}, "s-1", fsm.SessionStarted, at.Add(time.Second), fsm.Fields{})

	var s snapshot.Snapshot
	var r fsm.Reducer
	s.Fold(&r, &created, snapshot.Position{Partition: 3, Offset: 10})
	s.Fold(&r, &started, snapshot.Position{Partition: 3, Offset: 11})
	_, folded := s.Fold(&r, &started, snapshot.Position{Partition: 3, Offset: 11}) // a replay
	fmt.Println(s.State, s.Version, s.Position, s.FirstOffset, folded)
	// Output: ACTIVE 2 3:11 10 false
}

// exampleSnapshot folds a short session at partition 3, offsets 10 and 11.
func exampleSnapshot() *snapshot.Snapshot {
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var s snapshot.Snapshot
	var r fsm.Reducer
	for i, e := range []fsm.Event{
		fsm.NewEvent(fsm.EventID{1}, "s-1", fsm.SessionCreated, at, fsm.Fields{Goal: "ship it"}),
		fsm.NewEvent(fsm.EventID{2}, "s-1", fsm.SessionStarted, at.Add(time.Second), fsm.Fields{}),
	} {
		s.Fold(&r, &e, snapshot.Position{Partition: 3, Offset: 10 + int64(i)})
	}
	return &s
}

// The stored form: AppendBinary encodes, Decode reads it back. The fixed
// header (format, partition, offset, state) is what the store's fencing
// script reads without parsing the rest.
func ExampleSnapshot_AppendBinary() {
	s := exampleSnapshot()
	b := s.AppendBinary(nil)
	fmt.Printf("format %d, header % x\n", b[0], b[1:14])

	var back snapshot.Snapshot
	if err := snapshot.Decode(b, &back); err != nil {
		log.Fatal(err)
	}
	fmt.Println(back.ID, back.State, back.Version, back.Position, back.Goal)
	fmt.Println("same bytes:", bytes.Equal(back.AppendBinary(nil), b))
	// Output:
	// format 4, header 00 00 00 03 00 00 00 00 00 00 00 0b 03
	// s-1 ACTIVE 2 3:11 ship it
	// same bytes: true
}

// EncodeJSON is the complete JSON form, fold state included: Decode reads
// it as well as the binary form, and the session continues exactly.
// Anything else is ErrCorrupt.
func ExampleDecode() {
	s := exampleSnapshot()
	j, err := snapshot.EncodeJSON(s)
	if err != nil {
		log.Fatal(err)
	}
	var back snapshot.Snapshot
	if err := snapshot.Decode(j, &back); err != nil {
		log.Fatal(err)
	}
	fmt.Println(back.State, back.Version, back.Seen(fsm.EventID{2}))
	fmt.Println("same bytes:", bytes.Equal(back.AppendBinary(nil), s.AppendBinary(nil)))

	err = snapshot.Decode([]byte("\x07 not a snapshot"), &back)
	fmt.Println(errors.Is(err, snapshot.ErrCorrupt))
	// Output:
	// ACTIVE 2 true
	// same bytes: true
	// true
}

// redisAddr is the Redis ExampleStore uses. TestExampleStore points it at
// a redis-server of its own and checks what the example prints, since an
// example cannot start a server without noise in its output.
var redisAddr = "localhost:6379"

// Store snapshots fenced by their log position, read and list them, and
// advance a partition's checkpoint.
func ExampleStore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	st, err := snapshot.NewStore(rdb, "example")
	if err != nil {
		log.Fatal(err)
	}

	s := exampleSnapshot() // at 3:11
	older := exampleSnapshot()
	older.Position.Offset = 10 // a replay, or a zombie writer
	res, err := st.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(s), snapshot.NewEntry(older)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("written %d, fenced %d\n", res.Written, res.Fenced)

	got, err := st.Get(ctx, "s-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.State, got.Version, got.Position)
	if _, err := st.Get(ctx, "s-2"); errors.Is(err, snapshot.ErrNotFound) {
		fmt.Println("s-2 not found")
	}

	page, err := st.List(ctx, fsm.StateActive, "", 100)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range page.Snapshots {
		fmt.Println("active:", p.ID)
	}

	// Every record of partition 3 before offset 12 is in the snapshots.
	prior, err := st.SaveCheckpoints(ctx, "correx.session-events",
		[]snapshot.Checkpoint{{Partition: 3, Offset: 12, HighWatermark: 20}}, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	cps, err := st.Checkpoints(ctx, "correx.session-events")
	if err != nil {
		log.Fatal(err)
	}
	lag, _ := cps[3].Lag()
	fmt.Printf("checkpoint before: %v; now %d, lag %d\n", prior[0].Stored, cps[3].Offset, lag)
}
