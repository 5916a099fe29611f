package projstore_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/projector/projstore"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTombstoneMemory measures the Redis memory a tombstone takes in
// the store's layout, the figure the README quotes (target: at most 64
// bytes): each run starts from an emptied server, writes 100,000
// tombstones, and reports INFO memory's used_memory after, less before,
// per tombstone (bytes/tombstone), for session ids of 12 and of 36 bytes.
// Run with -benchtime=1x.
func BenchmarkTombstoneMemory(b *testing.B) {
	const n = 100_000
	rdb := redistest.Start(b).Client(b)
	for _, idLen := range []int{12, 36} {
		b.Run(fmt.Sprintf("id=%dB", idLen), func(b *testing.B) {
			var per float64
			for range b.N {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				st, err := projstore.New(rdb, "mem")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.Claim(ctx, "ev", 0, 1); err != nil {
					b.Fatal(err)
				}
				before := usedMemory(b, rdb)
				ended := time.UnixMilli(1_796_000_000_000)
				ts := make([]projstore.Tombstone, 0, 1000)
				for i := range n {
					id := "t:" + strconv.Itoa(i)
					id += strings.Repeat("x", idLen-len(id))
					ts = append(ts, projstore.Tombstone{SessionID: id, State: fsm.StateCompleted, Version: 12, Ended: ended})
					if len(ts) == cap(ts) || i == n-1 {
						if err := st.PutTombstones(ctx, 0, ts); err != nil {
							b.Fatal(err)
						}
						ts = ts[:0]
					}
				}
				per = float64(usedMemory(b, rdb)-before) / n
			}
			b.ReportMetric(per, "bytes/tombstone")
		})
	}
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}
