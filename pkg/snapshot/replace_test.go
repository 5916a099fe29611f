package snapshot_test

import (
	"testing"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// TestReplace: Replace stores over an equal position (PutBatch does not)
// and loses to a later one, on every target.
func TestReplace(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "rp")
			if err != nil {
				t.Fatal(err)
			}
			at := func(offset int64, goal string) snapshot.Entry {
				var s snapshot.Snapshot
				s.ID, s.State, s.Goal = "s-1", fsm.StateActive, goal
				s.Position = snapshot.Position{Partition: 1, Offset: offset}
				return snapshot.NewEntry(&s)
			}
			goal := func() string {
				s, err := st.Get(ctx, "s-1")
				if err != nil {
					t.Fatal(err)
				}
				return s.Goal
			}
			if _, err := st.PutBatch(ctx, []snapshot.Entry{at(5, "first")}); err != nil {
				t.Fatal(err)
			}
			if res, _ := st.PutBatch(ctx, []snapshot.Entry{at(5, "put")}); res.Written != 0 || goal() != "first" {
				t.Fatalf("PutBatch at an equal position: %+v, goal %q", res, goal())
			}
			for _, tt := range []struct {
				offset int64
				goal   string
				stored bool
				want   string
			}{{5, "equal", true, "equal"}, {4, "older", false, "equal"}, {9, "later", true, "later"}, {9, "again", true, "again"}} {
				ok, err := st.Replace(ctx, at(tt.offset, tt.goal))
				if err != nil || ok != tt.stored || goal() != tt.want {
					t.Fatalf("Replace at %d: stored %v (%v), goal %q; want %v, %q", tt.offset, ok, err, goal(), tt.stored, tt.want)
				}
			}
		})
	}
}
