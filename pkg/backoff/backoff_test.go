package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/backoff"
)

func TestWaitDoublesToMax(t *testing.T) {
	e := backoff.Exponential{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for n, want := range map[int]time.Duration{
		-1: 100 * time.Millisecond, 0: 100 * time.Millisecond, 1: 200 * time.Millisecond,
		4: 1600 * time.Millisecond, 5: 2 * time.Second, 6: 2 * time.Second, 1 << 20: 2 * time.Second,
	} {
		if got := e.Wait(n); got != want {
			t.Errorf("Wait(%d) = %v, want %v", n, got, want)
		}
	}
	// A Max below Min waits Min; a huge Max does not overflow.
	if got := (backoff.Exponential{Min: time.Second, Max: time.Millisecond}).Wait(3); got != time.Second {
		t.Errorf("Max below Min: Wait = %v, want 1s", got)
	}
	if got := (backoff.Exponential{Min: time.Second, Max: 1<<63 - 1}).Wait(100); got != 1<<63-1 {
		t.Errorf("a huge Max overflowed: Wait = %v", got)
	}
}

func TestJitterStaysWithinHalfToWhole(t *testing.T) {
	e := backoff.Exponential{Min: 100 * time.Millisecond, Max: time.Second, Jitter: true}
	lo, hi := time.Duration(1<<62), time.Duration(0)
	for range 2000 {
		d := e.Wait(2) // 400 ms before the jitter
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 200*time.Millisecond || hi > 400*time.Millisecond {
		t.Fatalf("waits in [%v, %v], want within [200ms, 400ms]", lo, hi)
	}
	if hi-lo < 100*time.Millisecond {
		t.Fatalf("waits in [%v, %v]: 2000 draws spread less than a quarter of the range", lo, hi)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended context = %v, want context.Canceled", err)
	}
}
