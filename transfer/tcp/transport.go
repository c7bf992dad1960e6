// Package tcp is the Transfer Engine's TCP transport, in upstream's v2 wire
// format: the initiator's side (Transport, one Conn per peer with a bounded
// pool of connections) and the target's side (Server, which checks every
// request against the registered memory before touching it).
package tcp

import (
	"net"
	"strconv"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Transport reaches any peer that publishes a TCP data port.
type Transport struct {
	lanes  int         // connections per peer
	mem    *gpu.Memory // stages device memory
	secret []byte      // the cluster secret, nil for none (auth.go)
}

// NewTransport returns a transport that opens up to lanes connections per
// peer and moves device memory through mem's pinned host chunks. With a
// secret (LoadSecret), every connection first proves it holds the secret
// and checks that the peer does.
func NewTransport(lanes int, mem *gpu.Memory, secret []byte) *Transport {
	return &Transport{lanes: max(lanes, 1), mem: mem, secret: secret}
}

// Name is "tcp".
func (*Transport) Name() string { return "tcp" }

// Reaches reports whether the peer publishes a data port.
func (*Transport) Reaches(p transport.Peer) bool { return p.Desc.TCPDataPort > 0 }

// Connect returns the peer's connection pool; connections are dialled on
// first use.
func (t *Transport) Connect(p transport.Peer) (transport.Conn, error) {
	return newPeer(dataAddr(p), t.lanes, t.mem, t.secret, p.Invalidate), nil
}

func dataAddr(p transport.Peer) string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Desc.TCPDataPort))
}
