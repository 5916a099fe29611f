package projector

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// state is what the fold goroutine, the group's callbacks, the recovery
// and the verifier share under mu: the owned partitions (parts, and
// their sessions in cache), the stalls, the topic's partition count, the
// change feed and derived events of what is folded, and the partitions
// rebuilt since the current poll was fetched. It owns the partitions'
// lifecycle in memory: addPartition and drop. Readiness reads only
// stalls' atomic snapshot and assigned, never mu.
type state struct {
	mu     sync.Mutex // guards everything below but assigned; held while folding and in rebalance callbacks
	parts  map[int32]*partState
	cache  cache
	stalls stalls
	pt     partitioning
	// derived is the change feed and the derived events (reactions.go).
	derived *derived
	// rebuiltNow holds the partitions rebuilt since the current poll's
	// records were fetched: those records are not folded.
	rebuiltNow map[int32]bool
	lastCheck  time.Time // when the stored checkpoints were last checked
	// obs is told when a partition leaves (its lag gauge).
	obs Observer

	assigned atomic.Int32 // partitions owned, for tests and logs
}

func newState(cfg Config, obs Observer, d *derived) *state {
	return &state{parts: map[int32]*partState{}, cache: newCache(cfg), stalls: stalls{byPartition: map[int32]string{}},
		rebuiltNow: map[int32]bool{}, derived: d, obs: obs}
}

// addPartition creates the state of a newly owned partition.
func (s *state) addPartition(id int32) *partState {
	if s.parts[id] == nil {
		s.parts[id] = newPartState(id)
		s.cache.addPartition(id)
	}
	return s.parts[id]
}

// drop forgets partitions: their cached sessions, progress, stalls and
// lag (telemetry).
func (s *state) drop(ids []int32) {
	left, _ := s.obs.(interface{ partitionLeft(int32) })
	for _, id := range ids {
		if s.parts[id] != nil {
			if left != nil {
				left.partitionLeft(id)
			}
			s.cache.dropPartition(id)
			s.derived.drop(id)
			delete(s.parts, id)
			s.stalls.clear(id)
			s.stalls.done(id)
			s.stalls.restored(id)
			s.stalls.clearGap(id)
		}
	}
	s.assigned.Store(int32(len(s.parts)))
}

// partitionCount returns the topic's partition count known so far.
func (s *state) partitionCount() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pt.n
}

// paused tells whether partition id is stalled, being rebuilt or being
// restored (stalls.paused).
func (s *state) paused(id int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalls.paused(id)
}

// restoring marks the partitions of why as being restored from the
// changelog, each for its reason, until restored is called for them.
func (s *state) restoring(why map[int32]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, w := range why {
		s.stalls.restore(id, w)
	}
}

func (s *state) restored(ids []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.stalls.restored(id)
	}
}

// setPartitions records the topic's partition count read at start.
func (s *state) setPartitions(n int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pt.set(n)
}

// stalls holds the partitions paused until an operator acts, with the
// reason of each, and the partitions being rebuilt after Redis lost or
// rolled back their read model. The maps belong to whoever holds
// state.mu; readiness reads err, an atomic snapshot replaced whenever
// either changes, so that /readyz never waits for the fold or a flush.
type stalls struct {
	byPartition map[int32]string
	rebuilding  map[int32]string
	// restoring holds the partitions being restored from the changelog,
	// and gaps those restored from a changelog checkpoint older than the
	// events log's start (an alert, until the partition leaves).
	restoring map[int32]string
	gaps      map[int32]string
	msg       atomic.Pointer[string] // nil when none is stalled, rebuilt, restored or gapped
	// held is len(byPartition), for the correx.projector.stalled gauge,
	// which reads it without state.mu.
	held atomic.Int64
}

// mark sets a partition's reason in one of the maps (made on first use)
// and republishes the message; unmark removes it, if it is there.
func (s *stalls) mark(m *map[int32]string, id int32, why string) {
	if *m == nil {
		*m = map[int32]string{}
	}
	(*m)[id] = why
	s.publish()
}

func (s *stalls) unmark(m map[int32]string, id int32) {
	if _, ok := m[id]; ok {
		delete(m, id)
		s.publish()
	}
}

// restore marks a partition as being restored from the changelog
// (reported by /readyz) until restored is called for it.
func (s *stalls) restore(id int32, why string) { s.mark(&s.restoring, id, why) }
func (s *stalls) restored(id int32)            { s.unmark(s.restoring, id) }

// gap raises the alert of a partition restored over a gap in the events
// log; it stays until the partition leaves (clearGap).
func (s *stalls) gap(id int32, msg string) { s.mark(&s.gaps, id, msg) }
func (s *stalls) clearGap(id int32)        { s.unmark(s.gaps, id) }

// rebuild marks a partition as being rebuilt (reported by /readyz) until
// done is called for it.
func (s *stalls) rebuild(id int32, why string) { s.mark(&s.rebuilding, id, why) }
func (s *stalls) done(id int32)                { s.unmark(s.rebuilding, id) }

// stall marks a partition stalled until clear is called for it.
func (s *stalls) stall(id int32, reason string) { s.mark(&s.byPartition, id, reason) }
func (s *stalls) clear(id int32)                { s.unmark(s.byPartition, id) }

func (s *stalls) stalled(id int32) bool { return s.byPartition[id] != "" }

// paused tells whether partition id is stalled, being rebuilt or being
// restored: its read model is not the fold of the log it has, so nothing
// may judge it against that log (the verifier).
func (s *stalls) paused(id int32) bool {
	_, rebuilding := s.rebuilding[id]
	_, restoring := s.restoring[id]
	return s.stalled(id) || rebuilding || restoring
}

// publish replaces the snapshot err reads, and the count held reads.
func (s *stalls) publish() {
	s.held.Store(int64(len(s.byPartition)))
	n := len(s.byPartition) + len(s.rebuilding) + len(s.restoring) + len(s.gaps)
	if n == 0 {
		s.msg.Store(nil)
		return
	}
	msgs := make([]string, 0, n)
	for id, msg := range s.byPartition {
		msgs = append(msgs, fmt.Sprintf("partition %d: %s", id, msg))
	}
	for id, why := range s.rebuilding {
		if _, ok := s.restoring[id]; !ok {
			msgs = append(msgs, fmt.Sprintf("partition %d: rebuilding from the log: %s", id, why))
		}
	}
	for id, why := range s.restoring {
		msgs = append(msgs, fmt.Sprintf("partition %d: restoring from the changelog: %s", id, why))
	}
	for id, msg := range s.gaps {
		msgs = append(msgs, fmt.Sprintf("partition %d: %s", id, msg))
	}
	sort.Strings(msgs)
	m := strings.Join(msgs, "; ")
	s.msg.Store(&m)
}

// err describes every stalled partition, or is nil. Safe for concurrent use.
func (s *stalls) err() error {
	if m := s.msg.Load(); m != nil {
		return errors.New(*m)
	}
	return nil
}
