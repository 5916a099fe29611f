package projector

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/fsm"
)

// TestCacheBytes folds many sessions with large goals under a small byte
// bound: once the projector is idle, the cached snapshots' encoded bytes stay
// within the bound, apart from entries that cannot be evicted yet.
func TestCacheBytes(t *testing.T) {
	e := newEnv(t, 2)
	at := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	var events []fsm.Event
	for i := range 200 {
		id := "big-" + strconv.Itoa(i)
		events = append(events,
			fsm.NewEvent(fsm.EventID{0x42, byte(i), byte(i >> 8), 1}, id, fsm.SessionCreated, at, fsm.Fields{Goal: strings.Repeat("g", fsm.MaxGoalBytes)}),
			fsm.NewEvent(fsm.EventID{0x42, byte(i), byte(i >> 8), 2}, id, fsm.SessionStarted, at.Add(time.Second), fsm.Fields{}))
	}
	e.produce(events)
	cfg := e.config("a")
	cfg.CacheBytes = 64 << 10
	r := e.start(cfg, "bytes", nil)
	e.waitRunning(r, "bytes", 30*time.Second)
	measure := func() (cached, pinned int) {
		r.p.st.mu.Lock()
		defer r.p.st.mu.Unlock()
		for en := r.p.st.cache.lru.head; en != nil; en = en.next {
			n := len(en.snap.AppendBinary(nil))
			cached += n
			if !en.evictable() {
				pinned += n
			}
		}
		return cached, pinned
	}
	var cached, pinned int
	if !testwait.Eventually(10*time.Second, func() bool {
		cached, pinned = measure()
		return cached-pinned <= cfg.CacheBytes && pinned == 0
	}) {
		t.Fatalf("cache holds %d encoded bytes (%d not evictable), bound %d", cached, pinned, cfg.CacheBytes)
	}
	if err := r.halt(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.dump("bytes")); n != 200 {
		t.Fatalf("%d snapshots stored, want 200", n)
	}
}
