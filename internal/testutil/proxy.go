package testutil

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Partition is a TCP forwarder on a free loopback port in front of one
// address, which a test can cut off: Cut closes every connection through
// it and holds new ones unanswered until Heal, as a network partition
// would (without the refusals that would send a client into a long
// reconnect backoff). It is closed in t.Cleanup.
type Partition struct {
	target func() string // the address a new connection goes to
	ln     net.Listener

	mu     sync.Mutex
	cut    bool
	healed chan struct{}     // closed by Heal; a new one at each Cut
	conns  map[net.Conn]bool // true: the connection a client made to the forwarder
	closed chan struct{}     // closed at cleanup
}

// StartPartition forwards a free loopback port to target ("host:port",
// or an http:// URL as StartEtcd returns).
func StartPartition(t testing.TB, target string) *Partition {
	t.Helper()
	addr := strings.TrimPrefix(target, "http://")
	return StartPartitionTo(t, func() string { return addr })
}

// StartPartitionTo is StartPartition in front of whatever address target
// returns when a connection comes in (the current leader of a group, say);
// a connection for which it returns "" is closed.
func StartPartitionTo(t testing.TB, target func() string) *Partition {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Partition{target: target, ln: ln, healed: make(chan struct{}),
		conns: map[net.Conn]bool{}, closed: make(chan struct{})}
	close(p.healed)
	go p.accept()
	t.Cleanup(func() {
		close(p.closed)
		ln.Close()
		p.closeAll()
	})
	return p
}

// URL is the forwarder's address as an http:// URL.
func (p *Partition) URL() string { return "http://" + p.Addr() }

// Addr is the forwarder's address, host:port.
func (p *Partition) Addr() string { return p.ln.Addr().String() }

// Cut closes every forwarded connection and holds new ones until Heal;
// it returns how many connections it closed (each counted once, not with
// its upstream side).
func (p *Partition) Cut() int {
	p.mu.Lock()
	if !p.cut {
		p.cut = true
		p.healed = make(chan struct{})
	}
	p.mu.Unlock()
	return p.closeAll()
}

// Heal forwards again, the connections held since Cut included.
func (p *Partition) Heal() {
	p.mu.Lock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
	p.mu.Unlock()
}

func (p *Partition) closeAll() int {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	n := 0
	for c, accepted := range conns {
		c.Close()
		if accepted {
			n++
		}
	}
	return n
}

// track adds c to the connections Cut closes; false (and c closed) when
// a Cut came since healed was read.
func (p *Partition) track(c net.Conn, accepted bool, healed chan struct{}) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != healed || p.cut {
		c.Close()
		return false
	}
	p.conns[c] = accepted
	return true
}

func (p *Partition) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *Partition) forward(c net.Conn) {
	healed := p.currentHealed()
	select {
	case <-healed:
	case <-p.closed:
		c.Close()
		return
	}
	if !p.track(c, true, healed) {
		return
	}
	target := p.target()
	if target == "" {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(up, false, healed) {
		c.Close()
		return
	}
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

func (p *Partition) currentHealed() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed
}
