package tcp

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/transfer/internal/conns"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Server executes peers' READ and WRITE requests against the exposed
// memory. A request is served only when [addr, addr+size) lies inside one
// exposed region; anything else is answered with statusRejected and no
// memory is touched. Close closes the listener and every accepted
// connection, so that a request in flight fails and no later one reaches
// the memory.
type Server struct {
	*conns.Listener
	memory  transport.Exposed
	mem     *gpu.Memory   // stages registered device memory
	timeout time.Duration // bounds the data phase of one request
	// secret, when not nil, is the cluster secret every connection must
	// prove it holds before its first request (auth.go); refused counts
	// the connections that did not.
	secret  []byte
	refused atomic.Uint64
}

// NewServer returns a server for ln that serves requests into memory, each
// data phase bounded by timeout, device memory staged through mem. With a
// secret (LoadSecret), a connection is served only once its peer proved
// it holds it. Serve starts it.
func NewServer(ln net.Listener, memory transport.Exposed, mem *gpu.Memory, timeout time.Duration, secret []byte) *Server {
	return &Server{Listener: conns.NewListener(ln), memory: memory, mem: mem, timeout: timeout, secret: secret}
}

// Refused counts the connections closed because their peer did not prove
// it holds the cluster secret.
func (s *Server) Refused() uint64 { return s.refused.Load() }

// authTimeout bounds the exchange that authenticates a connection.
const authTimeout = 10 * time.Second

// Serve accepts and serves connections until Close.
func (s *Server) Serve() { s.Listener.Serve(s.serveConn) }

// serveConn serves one peer's requests until it hangs up, sends garbage,
// or the engine closes the connection.
func (s *Server) serveConn(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	rw := pollread.NewRawIO(conn)
	p := &servedConn{conn: conn, w: rw, r: bufio.NewReaderSize(rw, frameReadBuffer)}
	if s.secret != nil {
		conn.SetDeadline(time.Now().Add(authTimeout))
		if err := authTarget(p.r, p.w, s.secret); err != nil {
			s.refused.Add(1)
			slog.Debug("tcp: peer refused", "peer", conn.RemoteAddr(), "err", err)
			return
		}
		conn.SetDeadline(time.Time{})
	}
	var hb [tcpHeaderSize]byte
	for {
		conn.SetReadDeadline(time.Time{}) // idle between requests
		if _, err := io.ReadFull(p.r, hb[:]); err != nil {
			return
		}
		h, err := decodeTCPHeader(hb[:])
		if err != nil {
			slog.Debug("tcp: bad header", "peer", conn.RemoteAddr(), "err", err)
			return
		}
		conn.SetDeadline(time.Now().Add(s.timeout))
		if !s.serveRequest(p, h) {
			return
		}
	}
}

// servedConn is one accepted connection. Its socket is read and written with
// raw system calls (internal/pollread: no Go syscall bookkeeping, which
// woke the runtime's monitor thread on a target serving one small request
// at a time); conn stays for deadlines and logging.
type servedConn struct {
	conn net.Conn
	w    io.Writer
	r    *bufio.Reader
	out  []byte // a small READ's reply: status and bytes, sent in one write
}

// inlineReadMax is the largest READ whose reply is copied behind its
// status and sent in one write, so that the initiator wakes once; larger
// ones are sent as two writes, straight from the exposed memory.
const inlineReadMax = 16 << 10

// serveRequest runs one request; false means the connection must close.
func (s *Server) serveRequest(p *servedConn, h tcpHeader) bool {
	reg := s.memory.AcquireExposed(uintptr(h.addr), h.size)
	if reg == nil {
		return s.reject(p, h)
	}
	defer reg.Release()
	at := reg.Placement()
	if h.opcode == transport.OpWrite {
		if err := s.receive(p.r, at, h); err != nil {
			slog.Debug("tcp: write", "peer", p.conn.RemoteAddr(), "err", err)
			return false
		}
		return !h.v2 || writeStatus(p.w, statusOK)
	}
	if h.v2 && !at.Device && h.size <= inlineReadMax {
		st := encodeStatus(statusOK)
		p.out = append(append(p.out[:0], st[:]...), gpu.HostBytes(uintptr(h.addr), h.size)...)
		if _, err := p.w.Write(p.out); err != nil {
			slog.Debug("tcp: read", "peer", p.conn.RemoteAddr(), "err", err)
			return false
		}
		return true
	}
	if h.v2 && !writeStatus(p.w, statusOK) {
		return false
	}
	if err := s.send(p.w, at, h); err != nil {
		slog.Debug("tcp: read", "peer", p.conn.RemoteAddr(), "err", err)
		return false
	}
	return true
}

// receive reads a WRITE's payload into the exposed region at; device
// memory is filled through pinned host chunks.
func (s *Server) receive(r io.Reader, at transport.Placement, h tcpHeader) error {
	if at.Device {
		return s.mem.RecvDevice(r, uintptr(h.addr), h.size, at.Ordinal)
	}
	_, err := io.ReadFull(r, gpu.HostBytes(uintptr(h.addr), h.size))
	return err
}

// send writes a READ's bytes from the exposed region at; device memory
// is sent through pinned host chunks.
func (s *Server) send(w io.Writer, at transport.Placement, h tcpHeader) error {
	if at.Device {
		return s.mem.SendDevice(w, uintptr(h.addr), h.size, at.Ordinal)
	}
	_, err := w.Write(gpu.HostBytes(uintptr(h.addr), h.size))
	return err
}

func writeStatus(w io.Writer, code uint32) bool {
	st := encodeStatus(code)
	_, err := w.Write(st[:])
	return err == nil
}

// maxDrain is the largest rejected WRITE payload the server reads and drops
// to keep the connection usable; larger ones close it.
const maxDrain = SliceSize

func (s *Server) reject(p *servedConn, h tcpHeader) bool {
	slog.Debug("tcp: request outside registered memory", "peer", p.conn.RemoteAddr(), "op", h.opcode, "addr", h.addr, "size", h.size)
	keep := true
	if h.opcode == transport.OpWrite {
		if h.size > maxDrain {
			keep = false
		} else if _, err := io.CopyN(io.Discard, p.r, int64(h.size)); err != nil {
			return false
		}
	}
	if !h.v2 {
		return false // v1 learns of a rejection by the connection closing
	}
	return writeStatus(p.w, statusRejected) && keep
}
