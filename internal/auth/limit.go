package auth

import (
	"math"
	"sync"
	"time"
)

// Limiter is a token bucket per key (a bearer token, or a client address
// when authentication is disabled): each key may make Burst requests at
// once and Rate per second on average. Safe for concurrent use.
//
// Memory is bounded: at MaxKeys buckets, buckets that have refilled
// completely are dropped (a full bucket is what a new key gets, so nothing
// is lost), and if every bucket is still in use, new keys share one
// overflow bucket.
type Limiter struct {
	Rate    float64 // requests per second
	Burst   int
	MaxKeys int              // default 10000
	Now     func() time.Time // default time.Now
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

const overflowKey = "\x00overflow"

// Allow takes one request from key's bucket. When the bucket is empty it
// returns false and how long until a request would be allowed.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = make(map[string]*bucket)
	}
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.maxKeys() {
			l.sweep(now)
		}
		if len(l.buckets) >= l.maxKeys() {
			key = overflowKey
			b = l.buckets[key]
		}
		if b == nil {
			b = &bucket{tokens: float64(l.Burst), last: now}
			l.buckets[key] = b
		}
	}
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(float64(l.Burst), b.tokens+elapsed*l.Rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.Rate * float64(time.Second))
	return false, wait
}

func (l *Limiter) maxKeys() int {
	if l.MaxKeys > 0 {
		return l.MaxKeys
	}
	return 10000
}

// sweep drops the buckets that have refilled completely.
func (l *Limiter) sweep(now time.Time) {
	full := time.Duration(float64(l.Burst) / l.Rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}

// Len is the number of buckets held.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
