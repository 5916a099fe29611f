package query

import "sync"

// waitSlots bounds requests of one kind running at once (the reads
// waiting for a position; the archived reads): at most max in all, and at
// most perKey for one caller, so that one token (or address) holding its
// share leaves the rest to the others. It is safe for concurrent use;
// the lock is held only to count.
type waitSlots struct {
	max, perKey int
	mu          sync.Mutex
	total       int
	byKey       map[string]int
}

func newWaitSlots(max, perKey int) *waitSlots {
	return &waitSlots{max: max, perKey: min(perKey, max), byKey: map[string]int{}}
}

// take reserves a slot for key; false when the caller or the process is at
// its limit.
func (s *waitSlots) take(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.max || s.byKey[key] >= s.perKey {
		return false
	}
	s.total++
	s.byKey[key]++
	return true
}

// give returns a slot that take reserved. Keys without slots are dropped,
// so the map holds at most max keys.
func (s *waitSlots) give(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key)
	}
}

// inUse is the number of slots taken.
func (s *waitSlots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
