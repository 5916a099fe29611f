package query

import (
	"sync"
	"time"
)

// progressPoll is how often a waiting read checks the projector's
// progress on its own when the checkpoint writes wake it
// (Options.Progress): only for an announcement Redis lost.
const progressPoll = 250 * time.Millisecond

// progressHub wakes the reads waiting for a position on a partition when
// a checkpoint of it is written (Options.Progress, from
// snapshot.Store.Progress). A waiter takes the partition's channel before
// it reads (next), so that a write after its read closes the channel it
// then waits on; each write of a partition closes its channel and the
// next waiter makes a new one.
type progressHub struct {
	mu     sync.Mutex
	next   map[int32]chan struct{}
	closed bool // the announcements stopped: waiters poll
}

func newProgressHub(src <-chan int32) *progressHub {
	p := &progressHub{next: map[int32]chan struct{}{}}
	go func() {
		for part := range src {
			p.wake(part)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.closed = true
		for part, ch := range p.next {
			close(ch)
			delete(p.next, part)
		}
	}()
	return p
}

// wait returns a channel closed at the next checkpoint write of part, or
// nil once the announcements stopped.
func (p *progressHub) wait(part int32) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	ch, ok := p.next[part]
	if !ok {
		ch = make(chan struct{})
		p.next[part] = ch
	}
	return ch
}

func (p *progressHub) wake(part int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch, ok := p.next[part]; ok {
		close(ch)
		delete(p.next, part)
	}
}
