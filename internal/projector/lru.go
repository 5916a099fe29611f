package projector

// lru is an intrusive doubly linked list of cached entries, most recently
// used at the head, with their count and estimated bytes. Part of the
// cache, and owned like it (see cache).
type lru struct {
	head, tail *entry
	n          int
	bytes      int // the sum of the entries' size
}

func (l *lru) pushFront(e *entry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
	l.n++
	e.size = e.estimate()
	l.bytes += e.size
}

func (l *lru) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else if l.head == e {
		l.head = e.next
	} else {
		return // not in the list
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
	l.n--
	l.bytes -= e.size
}

func (l *lru) touch(e *entry) {
	if l.head == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}

// resize counts e (in the list) again after a fold: folds grow a
// snapshot's history up to its bounds.
func (l *lru) resize(e *entry) {
	n := e.estimate()
	l.bytes += n - e.size
	e.size = n
}

// entryOverhead is what a cached entry costs beyond its variable parts: the
// entry and fsm.Session structs, the cache map's slot, the ring headers.
const entryOverhead = 768

// estimate is the memory a cached entry holds: a fixed overhead, its text
// (ids, goal, reasons, labels, metadata), and its history: transitions and
// rejections at 32 bytes, ids at 16, custom counters and annotations at 32
// plus their type names and payloads, rejected custom events' type names.
// Type names are counted per use, as the encoding writes them, although
// the fold shares one string between a counter and its annotations. It is
// at least the snapshot's encoded size (TestEstimateCoversEncodedSize
// checks it with every field at its bound), and cheap: nothing is encoded.
func (e *entry) estimate() int {
	s := &e.snap
	n := entryOverhead + len(e.id) + len(s.CorrelationID) + len(s.Goal) + len(s.PredecessorSessionID) +
		len(s.ParentSessionID) + len(s.SuccessorSessionID) + len(s.Metadata) +
		len(s.Failure.Reason) + len(s.Cancellation.Reason) + len(s.Replacement.Reason) +
		32*(s.NumTransitions()+s.NumRejections()) + 16*s.NumSeenIDs()
	for _, l := range s.Labels {
		n += 16 + len(l.Key) + len(l.Value)
	}
	for i := range s.NumCustomTypes() {
		n += 32 + len(s.CustomCountAt(i).Type)
	}
	for i := range s.NumAnnotations() {
		a := s.AnnotationAt(i)
		n += 32 + len(a.Type) + len(a.Payload)
	}
	for i := range s.NumRejections() {
		n += len(s.RejectionAt(i).Custom)
	}
	return n
}
