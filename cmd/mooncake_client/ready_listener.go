package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// readyListener is the daemon's TCP port (--port): upstream serves its
// RPC there, and launchers (SGLang's test fixture among them) take a TCP
// connect to it as "the daemon is up". Ours says exactly that and nothing
// more: it accepts a connection and closes it at once, without reading a
// byte. The dummy protocol is served on the Unix socket only: it shares
// memory (memfds over SCM_RIGHTS), which TCP cannot carry, so a peer that
// reaches this port can do less than any local caller: learn that the
// daemon is up. It opens once the daemon serves dummies and closes first
// when it stops.
type readyListener struct {
	ln   net.Listener
	done sync.WaitGroup
}

// acceptRetry is the pause after a failed accept that did not come from
// closing the listener.
const acceptRetry = 50 * time.Millisecond

// readyAddress is where the TCP port listens: host's address on port, or
// loopback when host is a wildcard (the default --host, 0.0.0.0) or empty.
func readyAddress(host string, port int) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// listenReady opens the TCP port on addr.
func listenReady(addr string) (*readyListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp port %s: %w", addr, err)
	}
	r := &readyListener{ln: ln}
	r.done.Add(1)
	go r.serve()
	return r, nil
}

func (r *readyListener) serve() {
	defer r.done.Done()
	for {
		c, err := r.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: try again shortly
			time.Sleep(acceptRetry)
			continue
		}
		c.Close()
	}
}

// Addr is the address the port listens on.
func (r *readyListener) Addr() string { return r.ln.Addr().String() }

// Close stops accepting and waits for the accept loop to end.
func (r *readyListener) Close() {
	r.ln.Close()
	r.done.Wait()
}
