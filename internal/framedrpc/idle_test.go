package framedrpc

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

func (s *Server) openConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// TestIdleConnectionsAreClosedAndDialledAgain: with IdleTimeout, a
// connection that carries calls more often than that stays open; one left
// idle is closed by the server, and the client's next call dials again.
func TestIdleConnectionsAreClosedAndDialledAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln}
	s := NewServer(nil)
	s.IdleTimeout = 100 * time.Millisecond
	s.RegisterService(&echoDesc, &echo{})
	rest := s.Split(counted)
	defer rest.Close()
	defer s.Close()

	c := dial(t, ln.Addr().String(), nil)
	for range 15 { // 300 ms of calls, 20 ms apart
		if got, err := call(c, "busy"); err != nil || got != "busy" {
			t.Fatalf("call: %q, %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := counted.accepted.Load(); n != 1 {
		t.Fatalf("a busy connection was replaced: %d connections accepted", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.openConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle connection was not closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := call(c, "again"); err != nil || got != "again" {
		t.Fatalf("call after the idle close: %q, %v", got, err)
	}
	if n := counted.accepted.Load(); n != 2 {
		t.Fatalf("%d connections accepted, want a second one after the idle close", n)
	}
}
