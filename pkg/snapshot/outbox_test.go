package snapshot_test

import (
	"fmt"
	"testing"

	"github.com/correx/sessions/pkg/snapshot"
)

// TestOutbox stores outbox batches on every target, replaces one written
// again, and drops a partition's batches below the Below of a later write,
// leaving other partitions' alone.
func TestOutbox(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			rdb, _ := tg.open(t)
			st, err := snapshot.NewStore(rdb, "ob")
			if err != nil {
				t.Fatal(err)
			}
			put := func(bs ...snapshot.OutboxBatch) {
				t.Helper()
				if err := st.PutOutbox(ctx, "ev", bs); err != nil {
					t.Fatal(err)
				}
			}
			put(snapshot.OutboxBatch{Partition: 0, Last: 10, Data: []byte("a")}, snapshot.OutboxBatch{Partition: 1, Last: 5, Data: []byte("b")})
			put(snapshot.OutboxBatch{Partition: 0, Last: 10, Data: []byte("a")}) // again: idempotent
			put(snapshot.OutboxBatch{Partition: 0, Last: 20, Data: []byte("c")})
			put(snapshot.OutboxBatch{Partition: 0, Last: 30, Data: []byte("d"), Below: 11})
			got, err := st.Outbox(ctx, "ev")
			if err != nil {
				t.Fatal(err)
			}
			if g, w := fmt.Sprint(got), "[{0 20 [99] 0} {0 30 [100] 0} {1 5 [98] 0}]"; g != w {
				t.Fatalf("outbox:\n got %s\nwant %s", g, w)
			}
		})
	}
}
