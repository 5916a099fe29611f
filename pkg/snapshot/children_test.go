package snapshot_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/correx/sessions/pkg/snapshot"
)

// TestChildren: links are recorded once per child, per parent, and read
// back up to a limit that says whether some were left out.
func TestChildren(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "ch")
			if err != nil {
				t.Fatal(err)
			}
			var links []snapshot.ChildLink
			for i := range 30 {
				links = append(links, snapshot.ChildLink{Parent: fmt.Sprintf("p%d", i%2), Child: fmt.Sprintf("c%02d", i)})
			}
			for range 2 { // idempotent
				if err := st.AddChildren(ctx, links); err != nil {
					t.Fatal(err)
				}
			}
			kids, cut, err := st.Children(ctx, "p0", 100)
			sort.Strings(kids)
			if err != nil || cut || len(kids) != 15 || kids[0] != "c00" || kids[14] != "c28" {
				t.Fatalf("children of p0: %v, cut %v, %v", kids, cut, err)
			}
			if kids, cut, err := st.Children(ctx, "p1", 10); err != nil || !cut || len(kids) != 10 {
				t.Fatalf("10 children of p1: %v, cut %v, %v", kids, cut, err)
			}
			if kids, cut, err := st.Children(ctx, "none", 10); err != nil || cut || len(kids) != 0 {
				t.Fatalf("children of none: %v, cut %v, %v", kids, cut, err)
			}
		})
	}
}
