package transfer

import (
	"net"
	"sync"
)

// connSet tracks live connections (accepted by a listener, or dialled by
// a TCP peer's lanes) so that closing cuts them all, including those in
// the middle of a request. It is safe for concurrent use.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// add tracks c. It reports false, and closes c, once the set is closed.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

// remove stops tracking c and closes it.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// closeAll closes every tracked connection and every later add's.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// serveAccepted accepts connections on ln until it is closed and serves
// each on its own goroutine, tracked in conns.
func serveAccepted(ln net.Listener, conns *connSet, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !conns.add(c) {
			continue
		}
		go func() {
			defer conns.remove(c)
			serve(c)
		}()
	}
}
