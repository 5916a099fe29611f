package testkit_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/testwait"
	"github.com/correx/sessions/pkg/testkit"
)

// goroutines returns the goroutines' stacks by their header line's id.
func goroutines() map[string]string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		out[id] = g
	}
	return out
}

// TestCloseLeavesOnlyGoRedisLoops pins what the package doc tells goleak
// users: after Close, the only goroutines the stack left are go-redis's
// circuit-breaker cleanup loops.
func TestCloseLeavesOnlyGoRedisLoops(t *testing.T) {
	before := goroutines()
	st, err := testkit.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	const loop = "github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"
	testwait.UntilSeen(t, "the stack's goroutines to end", 30*time.Second, func() (bool, string) {
		var left []string
		for id, g := range goroutines() {
			if _, old := before[id]; !old && !strings.Contains(g, loop) && !strings.Contains(g, "goroutines()") {
				left = append(left, g)
			}
		}
		return len(left) == 0, strings.Join(left, "\n\n")
	})
}
