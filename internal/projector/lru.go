package projector

// lru is an intrusive doubly linked list of cached entries, most recently
// used at the head. Owned by the fold goroutine (under Projector.mu).
type lru struct {
	head, tail *entry
	n          int
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
}

func (l *lru) touch(e *entry) {
	if l.head == e {
		return
	}
	l.remove(e)
	l.pushFront(e)
}
