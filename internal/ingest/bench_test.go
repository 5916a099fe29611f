package ingest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
)

// BenchmarkIngest measures events accepted per second through the HTTP API
// into the in-process broker, for batches of 100 (NDJSON) and for single
// events, with 16 concurrent clients.
func BenchmarkIngest(b *testing.B) {
	for _, batch := range []int{100, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			f := newFixture(&testing.T{}, 10*time.Second)
			defer f.srv.Close()
			defer f.cl.Close()
			g := workload.New(5, workload.Options{})
			stream := g.Interleave(g.Sessions("b", 2000, time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)))
			var bodies [][]byte
			for i := 0; i+batch <= len(stream); i += batch {
				var body []byte
				for j := i; j < i+batch; j++ {
					body = fsm.AppendRecord(body, &stream[j])
					body = append(body, '\n')
				}
				bodies = append(bodies, body)
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var next, events atomic.Int64
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			total := int64(b.N)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= total {
							return
						}
						resp, err := client.Post(f.srv.URL+"/v1/events", "application/x-ndjson", bytes.NewReader(bodies[i%int64(len(bodies))]))
						if err != nil {
							b.Error(err)
							return
						}
						resp.Body.Close()
						if resp.StatusCode != http.StatusAccepted {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
						events.Add(int64(batch))
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(events.Load())/time.Since(start).Seconds(), "events/s")
		})
	}
}
