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

// resize counts e (in the list) again after its encoded length changed.
func (l *lru) resize(e *entry) {
	n := e.estimate()
	l.bytes += n - e.size
	e.size = n
}

// entryOverhead is what a cached entry costs beyond its encoding: the
// entry and fsm.Session structs, the cache map's slot, the ring headers.
const entryOverhead = 768

// estimate is the memory a cached entry holds: a fixed overhead and the
// length of its snapshot's binary encoding when it was last encoded (when
// it was read from the store, and at each flush). The encoding is the one
// description of what a snapshot holds, so nothing here lists its fields;
// and it costs no encoding of its own. An entry a fold grew counts at its
// earlier length until the next flush encodes it; it cannot be evicted
// before then anyway.
func (e *entry) estimate() int { return entryOverhead + e.encoded }
