package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
)

// Bounds of TestHugeSessionAcrossProcesses. Memory: the peak resident set
// (VmHWM) of each process over the whole run, its start included. The live
// reads' p99 beside the archived ones was 337-482 ms on a quiet 2-core
// machine and 1.56 s with a load average of 12 (another test run beside
// it); the release before archived reads had slots of their own took
// 3.3 s on a quiet machine. 2.5 s keeps headroom for a busy machine and
// still fails that release.
const (
	hugeEvents           = 150_000
	hugeProjectorRSS     = 256 << 20
	hugeQueryRSS         = 160 << 20
	hugeConcurrentReads  = 48
	hugeLiveReadP99Bound = 2500 * time.Millisecond
)

// TestHugeSessionAcrossProcesses: one session of 150,000 events (a 40 MB
// archive object) is folded, closed and archived by a projector process,
// then read back by 48 concurrent clients through a query process (its
// snapshot, and its history page by page), while another tenant reads live
// sessions from Redis. The projector and the query service must stay under
// stated bounds of resident memory, and the live reads fast. A red team
// measured, before archived objects were read by range with slots of
// their own: 1.44 GB for the projector archiving a 400,000-event session,
// 1.7 GB for the query service under 48 archived reads, and the other
// tenant's live reads slowed to 8.7 s. This test against that release:
// projector 333 MiB, query service 6,506 MiB, live reads p99 3.3 s; since,
// 81-90 MiB, 67-73 MiB and 337-482 ms (docs/retention.md).
func TestHugeSessionAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services and runs them as processes, with a 150,000-event session")
	}
	s := startFaultStack(t, "huge", 2, "CORREX_ARCHIVE_URL", "file://"+t.TempDir(), "OTEL_METRICS_EXPORTER", "none")
	proj, _ := s.projector(t, "CORREX_RETAIN_CLOSED", "1s", "CORREX_INSTANCE_ID", "huge-1")
	query := s.query

	const id = "big:one"
	lines := []string{fmt.Sprintf(`{"sessionId":%q,"type":"SessionCreated"}`, id), fmt.Sprintf(`{"sessionId":%q,"type":"SessionStarted"}`, id)}
	for i := 2; i < hugeEvents-1; i++ {
		typ := "ToolRequested"
		if i%2 == 1 {
			typ = "ModelRequested"
		}
		lines = append(lines, fmt.Sprintf(`{"sessionId":%q,"type":%q,"payload":{"n":%d}}`, id, typ, i))
	}
	lines = append(lines, fmt.Sprintf(`{"sessionId":%q,"type":"SessionCompleted"}`, id))
	sent := time.Now()
	pos := s.send(t, lines)
	var live []string
	for i := range 20 {
		live = append(live, fmt.Sprintf(`{"sessionId":"other:%02d","type":"SessionCreated"}`, i))
	}
	livePos := s.send(t, live)
	s.await(t, "other:19", livePos, 60*time.Second, func(v faultSnap) bool { return v.Version == 1 })
	s.await(t, id, pos, 120*time.Second, func(v faultSnap) bool { return v.Version == hugeEvents })
	testwait.UntilSeen(t, id+" archived", 180*time.Second, func() (bool, string) {
		status, v := s.read("/v1/sessions/" + id)
		return status == 200 && v.Archived && v.Version == hugeEvents, fmt.Sprintf("%d %+v", status, v)
	})
	t.Logf("%d events sent, folded and archived in %v", hugeEvents, time.Since(sent).Round(time.Millisecond))

	// The other tenant's live reads alone, then beside the archived reads.
	liveReads := func(stop <-chan struct{}) []time.Duration {
		var ds []time.Duration
		for i := 0; ; i++ {
			select {
			case <-stop:
				return ds
			default:
			}
			status, _, took := s.get(fmt.Sprintf("/v1/sessions/other:%02d", i%20))
			if status != 200 {
				t.Errorf("a live read: %d", status)
				return ds
			}
			ds = append(ds, took)
			time.Sleep(5 * time.Millisecond) // a reader's pace, not a wait for state
		}
	}
	p99 := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)*99/100]
	}
	stop := make(chan struct{})
	go func() { time.Sleep(2 * time.Second); close(stop) }() // the baseline's length
	alone := liveReads(stop)

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	pages := 0
	for c := range hugeConcurrentReads {
		wg.Go(func() {
			status, _, _ := s.get("/v1/sessions/" + id)
			mu.Lock()
			statuses[status]++
			mu.Unlock()
			// A few pages of the history, from the start or from a cursor
			// deep in it, as a reader paging through would.
			after := ""
			for p := range 3 + c%3 {
				path := "/v1/sessions/" + id + "/history?limit=500" + after
				status, body, _ := s.get(path)
				mu.Lock()
				statuses[status]++
				mu.Unlock()
				if status != 200 {
					return
				}
				var page struct {
					History []json.RawMessage `json:"history"`
					Next    *string           `json:"next"`
				}
				if err := json.Unmarshal(body, &page); err != nil || len(page.History) == 0 {
					t.Errorf("history page %d: %v, %d entries", p, err, len(page.History))
					return
				}
				mu.Lock()
				pages++
				mu.Unlock()
				if page.Next == nil {
					return
				}
				after = "&after=" + *page.Next
			}
		})
	}
	stop = make(chan struct{})
	done := make(chan []time.Duration)
	go func() { done <- liveReads(stop) }()
	wg.Wait()
	close(stop)
	beside := <-done

	projRSS, queryRSS := proj.peakRSS(t), query.peakRSS(t)
	t.Logf("peak resident memory: projector %d MiB (bound %d), query %d MiB (bound %d); %d archived reads answered %v, %d history pages; the other tenant's live reads p99 %v alone, %v beside them (%d and %d reads)",
		projRSS>>20, hugeProjectorRSS>>20, queryRSS>>20, hugeQueryRSS>>20, hugeConcurrentReads, statuses, pages,
		p99(alone), p99(beside), len(alone), len(beside))
	if projRSS > hugeProjectorRSS || queryRSS > hugeQueryRSS {
		t.Errorf("peak resident memory over its bound: projector %d MiB (bound %d), query %d MiB (bound %d)",
			projRSS>>20, hugeProjectorRSS>>20, queryRSS>>20, hugeQueryRSS>>20)
	}
	if got := p99(beside); got > hugeLiveReadP99Bound {
		t.Errorf("the other tenant's live reads beside the archived reads: p99 %v, bound %v", got, hugeLiveReadP99Bound)
	}
	if statuses[http.StatusOK] == 0 || pages == 0 {
		t.Errorf("no archived read answered: %v", statuses)
	}
	for status := range statuses {
		if status != http.StatusOK && status != http.StatusServiceUnavailable && status != http.StatusTooManyRequests {
			t.Errorf("an archived read answered %d: %v", status, statuses)
		}
	}
}
