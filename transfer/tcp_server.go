package transfer

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
)

// tcpServer executes peers' READ and WRITE requests against the registry.
// A request is served only when [addr, addr+size) lies inside one
// registered buffer; anything else is answered with statusRejected and no
// memory is touched.
type tcpServer struct {
	ln      net.Listener
	reg     *registry
	mem     *gpu.Memory   // stages registered device memory (device.go)
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
	if h.opcode == OpWrite {
		if err := s.receive(r, reg, h); err != nil {
			slog.Debug("tcp: write", "peer", conn.RemoteAddr(), "err", err)
			return false
		}
		return !h.v2 || writeStatus(conn, statusOK)
	}
	if h.v2 && !writeStatus(conn, statusOK) {
		return false
	}
	if err := s.send(conn, reg, h); err != nil {
		slog.Debug("tcp: read", "peer", conn.RemoteAddr(), "err", err)
		return false
	}
	return true
}

// receive reads a WRITE's payload into the registered region reg; device
// memory is filled through pinned host chunks.
func (s *tcpServer) receive(r io.Reader, reg *region, h tcpHeader) error {
	if reg.device {
		return s.mem.RecvDevice(r, uintptr(h.addr), h.size, reg.ordinal)
	}
	_, err := io.ReadFull(r, bytesAt(uintptr(h.addr), h.size))
	return err
}

// send writes a READ's bytes from the registered region reg; device memory
// is sent through pinned host chunks.
func (s *tcpServer) send(conn net.Conn, reg *region, h tcpHeader) error {
	if reg.device {
		return s.mem.SendDevice(conn, uintptr(h.addr), h.size, reg.ordinal)
	}
	_, err := conn.Write(bytesAt(uintptr(h.addr), h.size))
	return err
}

func writeStatus(conn net.Conn, code uint32) bool {
	st := encodeStatus(code)
	_, err := conn.Write(st[:])
	return err == nil
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
	return writeStatus(conn, statusRejected) && keep
}
