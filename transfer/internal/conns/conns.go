// Package conns tracks the live network connections of a server or a
// connection pool, so that closing it cuts every one of them, including
// those in the middle of a request.
package conns

import (
	"net"
	"sync"
)

// Set is a set of live connections. The zero value is an empty, open set.
// It is safe for concurrent use.
type Set struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Add tracks c. It reports false, and closes c, once the set is closed.
func (s *Set) Add(c net.Conn) bool {
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

// Remove stops tracking c and closes it.
func (s *Set) Remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// CloseAll closes every tracked connection and every later Add's.
func (s *Set) CloseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// Listener is a listener whose accepted connections are tracked, so that
// Close cuts them all: the base of a server.
type Listener struct {
	ln    net.Listener
	conns Set
}

// NewListener tracks the connections accepted on ln.
func NewListener(ln net.Listener) *Listener { return &Listener{ln: ln} }

// Serve accepts connections until Close and serves each on its own
// goroutine.
func (l *Listener) Serve(serve func(net.Conn)) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.conns.Add(c) {
			continue
		}
		go func() {
			defer l.conns.Remove(c)
			serve(c)
		}()
	}
}

// Close closes the listener and every accepted connection, so that a
// request in flight fails and no later one is served.
func (l *Listener) Close() {
	l.ln.Close()
	l.conns.CloseAll()
}
