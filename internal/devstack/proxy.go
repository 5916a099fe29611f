package devstack

import (
	"io"
	"net"
	"sync"
)

// cutProxy forwards TCP connections from a loopback port to target until Cut,
// which closes every open connection and turns new ones away until Restore.
// It lets KillProjector end the projector's writes at one instant, as a
// crash does.
type cutProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newCutProxy(target string) (*cutProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *cutProxy) Addr() string { return p.l.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, so the other copy returns.
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// track registers a connection pair, or closes it when the proxy was cut
// meanwhile.
func (p *cutProxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		up.Close()
		return false
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	return true
}

// Cut closes every forwarded connection and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *cutProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and waits for its goroutines.
func (p *cutProxy) Close() {
	p.l.Close()
	p.Cut()
	p.wg.Wait()
}

// connListener is a listener that can close the connections it accepted,
// as the death of a process does (KillProjector): a client's keep-alive
// connection must not reach the killed projector's HTTP server.
type connListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func newConnListener(l net.Listener) *connListener {
	return &connListener{Listener: l, conns: map[net.Conn]struct{}{}}
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = struct{}{}
	return &trackedConn{Conn: c, l: l}, nil
}

// CloseAll closes the listener and every connection it accepted.
func (l *connListener) CloseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.Listener.Close()
	for c := range l.conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *connListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.Conn)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
