// Package backoff is the one retry schedule of correx-sessions: how long
// a part waits after a failed attempt before the next, and a wait that
// ends with its context. The projector's Redis and Kafka retries, the
// change feed consumer's checkpoints, the Kafka clients' request retries,
// the Go client's HTTP retries and the tests' polling all wait by it;
// they differ only in their bounds (and the client in its jitter).
//
// It imports the standard library only, so pkg/client and pkg/feed, which
// import nothing internal, can use it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential waits Min after the first failed attempt and twice as long
// after each further one, at most Max.
type Exponential struct {
	Min, Max time.Duration
	// Jitter draws each wait at random from [d/2, d] instead of d (the
	// "equal jitter" of AWS's architecture blog), so that clients that
	// failed together do not retry together.
	Jitter bool
}

// Wait returns the wait after failed attempt n, counted from 0: Min for
// n <= 0, doubling per attempt, at most Max (Min when Max is below it).
func (e Exponential) Wait(n int) time.Duration {
	d := e.Min
	for i := 0; i < n && d < e.Max; i++ {
		if d > e.Max/2 {
			d = e.Max // doubling would pass Max, or overflow
			break
		}
		d *= 2
	}
	d = max(min(d, e.Max), e.Min)
	if e.Jitter && d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// Sleep waits d, or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
