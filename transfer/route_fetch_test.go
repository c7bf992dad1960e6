package transfer

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/transfer/metadata"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// gatedDir answers lookups from the real directory until silence names
// an address; from then on it asks that address, as a P2P lookup of a
// peer whose handshake port accepts and never answers would.
type gatedDir struct {
	metadata.Directory
	silent atomic.Pointer[string]
}

func (d *gatedDir) Lookup(name string) (metadata.Location, []byte, error) {
	if addr := d.silent.Load(); addr != nil {
		return metadata.P2P{Timeout: time.Minute, MaxFrame: 1 << 20}.Lookup(*addr)
	}
	return d.Directory.Lookup(name)
}

// silentListener accepts connections on loopback and never answers; each
// accepted connection is announced on accepted. Cleanup closes them all.
func silentListener(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

// staleTransport reaches no peer; staleConn is a connection of it whose
// peer's registrations always look changed (as a shm connection's do
// after the peer registers a buffer).
type staleTransport struct{}

func (staleTransport) Name() string                { return "stale" }
func (staleTransport) Reaches(transport.Peer) bool { return false }
func (staleTransport) Connect(transport.Peer) (transport.Conn, error) {
	return nil, errors.New("stale transport connects nowhere")
}

type staleConn struct{}

func (staleConn) Carries(uint64, uint64) bool { return false }
func (staleConn) Submit(j *transport.Job) {
	j.Tracker.Start(1)
	j.Tracker.FinishSlice(transport.StatusFailed, 0)
}
func (staleConn) Update(transport.Peer) bool { return false }
func (staleConn) Check() (bool, error)       { return true, nil }
func (staleConn) Close()                     {}

// A connection whose peer's registrations changed makes the route fetch
// the descriptor again. When that fetch hangs (the peer's handshake port
// accepts and never answers), transfers over the segment's TCP connection,
// already open, still complete: the fetch runs without the segment's lock.
// Before, route fetched while holding it, and every transfer to the
// segment waited for the handshake's timeout (a minute here).
func TestRouteDoesNotWaitForAHangingFetch(t *testing.T) {
	target, e, remote, local := enginePair(t, true)
	dir := &gatedDir{Directory: e.dir}
	e.dir = dir
	seg, err := e.OpenSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if err := writeThrough(t, e, seg.Handle(), local, remote, 1); err != nil {
		t.Fatal(err)
	}
	s, err := e.segment(seg.Handle())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	e.transports = append(e.transports, staleTransport{})
	s.conns = append(s.conns, staleConn{})
	s.mu.Unlock()

	addr, accepted := silentListener(t)
	dir.silent.Store(&addr)
	const deadline = 20 * time.Second // far below the lookup's minute
	for seed := byte(2); seed < 5; seed++ {
		done := make(chan error, 1)
		go func() { done <- writeThrough(t, e, seg.Handle(), local, remote, seed) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("write %d over the open TCP connection: %v", seed, err)
			}
		case <-time.After(deadline):
			t.Fatalf("write %d waited for the hanging descriptor fetch", seed)
		}
		if seed == 2 {
			select {
			case <-accepted: // the fetch is in flight on the silent port
			case <-time.After(deadline):
				t.Fatal("the stale connection started no descriptor fetch")
			}
		}
	}
	s.mu.Lock()
	inFlight := s.fetching != nil
	s.mu.Unlock()
	if !inFlight {
		t.Fatal("the fetch ended although the peer never answered")
	}
	// The descriptor stays readable meanwhile.
	if _, err := e.SegmentDescriptor(seg.Handle()); err != nil {
		t.Fatal(err)
	}
}
