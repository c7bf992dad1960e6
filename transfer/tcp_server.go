package transfer

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"time"
)

// tcpServer executes peers' READ and WRITE requests against the registry.
// A request is served only when [addr, addr+size) lies inside one
// registered buffer; anything else is answered with statusRejected and no
// memory is touched.
type tcpServer struct {
	ln      net.Listener
	reg     *registry
	timeout time.Duration // bounds the data phase of one request
	conns   connSet       // accepted connections, cut by Engine.Close
}

func (s *tcpServer) serve() { serveAccepted(s.ln, &s.conns, s.serveConn) }

// serveConn serves one peer's requests until it hangs up, sends garbage,
// or the engine closes the connection.
func (s *tcpServer) serveConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	r := bufio.NewReaderSize(conn, frameReadBuffer)
	var hb [tcpHeaderSize]byte
	for {
		conn.SetReadDeadline(time.Time{}) // idle between requests
		if _, err := io.ReadFull(r, hb[:]); err != nil {
			return
		}
		h, err := decodeTCPHeader(hb[:])
		if err != nil {
			slog.Debug("tcp: bad header", "peer", conn.RemoteAddr(), "err", err)
			return
		}
		conn.SetDeadline(time.Now().Add(s.timeout))
		if !s.serveRequest(conn, r, h) {
			return
		}
	}
}

// serveRequest runs one request; false means the connection must close.
func (s *tcpServer) serveRequest(conn net.Conn, r io.Reader, h tcpHeader) bool {
	reg := s.reg.acquire(uintptr(h.addr), h.size)
	if reg != nil && reg.localOnly {
		reg.release()
		reg = nil
	}
	if reg == nil {
		return s.reject(conn, r, h)
	}
	defer reg.release()
	mem := bytesAt(uintptr(h.addr), h.size)
	switch h.opcode {
	case OpWrite:
		if _, err := io.ReadFull(r, mem); err != nil {
			return false
		}
		if h.v2 {
			st := encodeStatus(statusOK)
			if _, err := conn.Write(st[:]); err != nil {
				return false
			}
		}
	case OpRead:
		if h.v2 {
			st := encodeStatus(statusOK)
			if _, err := conn.Write(st[:]); err != nil {
				return false
			}
		}
		if _, err := conn.Write(mem); err != nil {
			return false
		}
	}
	return true
}

// maxDrain is the largest rejected WRITE payload the server reads and drops
// to keep the connection usable; larger ones close it.
const maxDrain = tcpSliceSize

func (s *tcpServer) reject(conn net.Conn, r io.Reader, h tcpHeader) bool {
	slog.Debug("tcp: request outside registered memory", "peer", conn.RemoteAddr(), "op", h.opcode, "addr", h.addr, "size", h.size)
	keep := true
	if h.opcode == OpWrite {
		if h.size > maxDrain {
			keep = false
		} else if _, err := io.CopyN(io.Discard, r, int64(h.size)); err != nil {
			return false
		}
	}
	if !h.v2 {
		return false // v1 learns of a rejection by the connection closing
	}
	st := encodeStatus(statusRejected)
	if _, err := conn.Write(st[:]); err != nil {
		return false
	}
	return keep
}
