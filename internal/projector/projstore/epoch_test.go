package projstore_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestStaleOwnerWritesNothing: a projector's store that claimed partition
// 0 and then stalled while another claimed it writes nothing there any
// more (snapshots, deadlines and closed entries, checkpoints, fired
// marks, the archive's removal, a rebuild's deletes, tombstones), each
// refused with ErrNotOwner; the new owner's writes land, and the old
// owner's writes of a partition it still owns land too.
func TestStaleOwnerWritesNothing(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	old, _ := projstore.New(rdb, "own")
	cur, _ := projstore.New(rdb, "own")
	if _, err := old.Claim(ctx, "ev", 0, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Claim(ctx, "ev", 1, 3); err != nil {
		t.Fatal(err)
	}
	put(t, old, snap(t, "o-1", 0, 5))
	e, err := cur.Claim(ctx, "ev", 0, 3) // the same generation: the stored epoch still grows
	if err != nil || e <= old.Epoch(0) {
		t.Fatalf("the new owner's claim: %d %v, want above %d", e, err, old.Epoch(0))
	}

	// The old owner's writes of partition 0.
	res, err := old.PutBatch(ctx, []snapshot.Entry{snapshot.NewEntry(snap(t, "o-1", 0, 9)), snapshot.NewEntry(snap(t, "o-2", 0, 9)),
		snapshot.NewEntry(snap(t, "o-3", 1, 9))})
	if err != nil || res.Written != 1 || len(res.NotOwned) != 1 || res.NotOwned[0] != 0 {
		t.Fatalf("the old owner's batch over partitions 0 and 1: %+v %v, want partition 0 refused and 1 written", res, err)
	}
	if s, err := old.Get(ctx, "o-1"); err != nil || s.Position.Offset != 5 {
		t.Fatalf("o-1 after the stale write: %+v %v, want it at offset 5", s, err)
	}
	if _, err := old.Get(ctx, "o-2"); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("o-2, written only by the stale owner: %v", err)
	}
	armed := map[int32][]projstore.ArmedDeadline{0: {{SessionID: "o-1", Kind: fsm.TimeoutInactivity, At: t0.UnixNano(), Version: 9, Ended: t0.UnixNano()}}}
	var no *projstore.NotOwnerError
	if _, err := old.ArmDeadlines(ctx, "ev", armed); !errors.As(err, &no) || no.Partitions[0] != 0 {
		t.Fatalf("the old owner's deadlines: %v, want NotOwnerError", err)
	}
	if due, n, err := cur.DueClosed(ctx, "ev", 0, t0.Add(time.Hour), 10); err != nil || len(due)+int(n) != 0 {
		t.Fatalf("closed entries after the stale write: %v %d %v", due, n, err)
	}
	// The outbox: the new owner's batch of partition 0 stays; the old
	// owner's batch of the same Last neither replaces it nor drops it (its
	// Below), and partition 1's, still the old owner's, is written.
	if err := cur.PutOutbox(ctx, "ev", []projstore.OutboxBatch{{Partition: 0, Last: 8, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	err = old.PutOutbox(ctx, "ev", []projstore.OutboxBatch{{Partition: 0, Last: 8, Data: []byte("old")},
		{Partition: 0, Last: 9, Data: []byte("old"), Below: 9}, {Partition: 1, Last: 4, Data: []byte("one")}})
	if !errors.As(err, &no) || fmt.Sprint(no.Partitions) != "[0]" {
		t.Fatalf("the old owner's outbox over partitions 0 and 1: %v, want NotOwnerError naming partition 0", err)
	}
	if got, err := cur.Outbox(ctx, "ev"); err != nil || fmt.Sprint(got) != "[{0 8 [110 101 119] 0} {1 4 [111 110 101] 0}]" {
		t.Fatalf("the outbox after the old owner's write: %v %v, want the new owner's batch of 0 and the old owner's of 1", got, err)
	}
	prev, err := old.SaveCheckpoints(ctx, "ev", []snapshot.Checkpoint{{Partition: 0, Offset: 10}}, t0)
	if err != nil || !prev[0].NotOwner {
		t.Fatalf("the old owner's checkpoint: %+v %v, want NotOwner", prev, err)
	}
	if cps, _ := cur.Checkpoints(ctx, "ev"); cps[0].Offset != 0 {
		t.Fatalf("checkpoint after the stale write: %+v", cps[0])
	}
	for name, err := range map[string]error{
		"forget":           second(old.Forget(ctx, "ev", 0, []projstore.Archived{{SessionID: "o-1", Position: snapshot.Position{Partition: 0, Offset: 5}}})),
		"delete partition": second(old.DeletePartition(ctx, 0)),
		// Partition 1 is still the old owner's, 0 no longer: nothing of either is deleted.
		"delete partitions": second(old.DeletePartition(ctx, 1, 0)),
		"delete deadlines":  old.DeleteDeadlines(ctx, "ev", 0),
		"reset checkpoint":  old.ResetCheckpoint(ctx, "ev", 0, 10, t0),
		"remove fired":      second(old.RemoveFired(ctx, "ev", 0, armed[0])),
		"tombstones":        old.PutTombstones(ctx, 0, []projstore.Tombstone{{SessionID: "o-9", State: fsm.StateCompleted}}),
	} {
		if !errors.Is(err, projstore.ErrNotOwner) {
			t.Errorf("the old owner's %s: %v, want ErrNotOwner", name, err)
		}
	}
	if s, err := cur.Get(ctx, "o-1"); err != nil || s.Position.Offset != 5 {
		t.Fatalf("o-1 after the stale owner's removal: %+v %v", s, err)
	}
	if s, err := cur.Get(ctx, "o-3"); err != nil || s.Position.Partition != 1 {
		t.Fatalf("o-3 (partition 1) after the stale owner's delete of partitions 1 and 0: %+v %v, want it kept", s, err)
	}
	if _, err := old.DeletePartition(ctx, 1, 0); err == nil || !strings.Contains(err.Error(), "partition 0,") {
		t.Fatalf("the old owner's delete of partitions 1 and 0: %v, want ErrNotOwner naming partition 0", err)
	}
	// The new owner writes.
	if res := put(t, cur, snap(t, "o-1", 0, 12)); res.Written != 1 {
		t.Fatalf("the new owner's write: %+v", res)
	}
	if out, err := cur.Forget(ctx, "ev", 0, []projstore.Archived{{SessionID: "o-1", Position: snapshot.Position{Partition: 0, Offset: 12},
		Tombstone: projstore.Tombstone{State: fsm.StateActive, Version: 2}}}); err != nil || out[0] != projstore.ForgetRemoved {
		t.Fatalf("the new owner's removal: %v %v", out, err)
	}
	// A tombstoned session is never written again, by anyone.
	if res := put(t, cur, snap(t, "o-1", 0, 20)); res.Written != 0 || res.Tombstoned != 1 {
		t.Fatalf("a write after the tombstone: %+v, want it refused", res)
	}
}

func second[T any](_ T, err error) error { return err }
