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
			all, cut, err := st.Children(ctx, []string{"p0", "none"}, 100)
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(all[0])
			if cut[0] || len(all[0]) != 15 || all[0][0] != "c00" || all[0][14] != "c28" {
				t.Fatalf("children of p0: %v, cut %v", all[0], cut[0])
			}
			if cut[1] || len(all[1]) != 0 {
				t.Fatalf("children of none: %v, cut %v", all[1], cut[1])
			}
			if some, cut, err := st.Children(ctx, []string{"p1"}, 10); err != nil || !cut[0] || len(some[0]) != 10 {
				t.Fatalf("10 children of p1: %v, cut %v, %v", some, cut, err)
			}
		})
	}
}
