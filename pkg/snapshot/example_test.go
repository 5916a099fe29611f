package snapshot_test

import (
	"fmt"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
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
