package transfer

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
)

// tcpSlice is one piece of a task that travels as one TCP request.
type tcpSlice struct {
	t      *task
	local  uintptr
	remote uint64
	length uint64
}

// tcpPeer moves slices to one remote data port over a bounded pool of
// connections ("lanes"). Slices are served in submission order.
type tcpPeer struct {
	addr     string
	maxLanes int
	mem      *gpu.Memory // stages device memory (device.go)
	// onFailure runs after a slice fails for a reason other than the
	// peer rejecting it (the peer may be gone or have moved).
	onFailure func()
	queue     chan *tcpSlice
	closed    chan struct{}

	mu    sync.Mutex
	lanes int
	// gate is held shared while slices are queued and exclusively by
	// close, so nothing is queued after the lanes have drained.
	gate     sync.RWMutex
	isClosed bool
	// conns are the lanes' connections: close cuts them, so a slice in
	// the middle of a request ends at once instead of at its deadline.
	conns connSet
}

func newTCPPeer(addr string, lanes int, mem *gpu.Memory, onFailure func()) *tcpPeer {
	return &tcpPeer{addr: addr, maxLanes: lanes, mem: mem, onFailure: onFailure, queue: make(chan *tcpSlice, 4096), closed: make(chan struct{})}
}

// submit queues the task's slices; it fails a slice that cannot be queued
// before the task's deadline.
func (p *tcpPeer) submit(t *task) {
	n := int((t.req.Length + tcpSliceSize - 1) / tcpSliceSize)
	t.start(n)
	p.gate.RLock()
	defer p.gate.RUnlock()
	if p.isClosed {
		for range n {
			t.finishSlice(StatusCanceled, 0)
		}
		return
	}
	p.growLanes(n)
	for off := uint64(0); off < t.req.Length; off += tcpSliceSize {
		s := &tcpSlice{t: t, local: t.req.Source + uintptr(off), remote: t.req.TargetOffset + off, length: min(tcpSliceSize, t.req.Length-off)}
		select {
		case p.queue <- s:
		default:
			timer := time.NewTimer(time.Until(t.deadline))
			select {
			case p.queue <- s:
			case <-timer.C:
				t.finishSlice(StatusTimeout, 0)
			}
			timer.Stop()
		}
	}
}

// growLanes starts lanes, up to the limit, for n more slices.
func (p *tcpPeer) growLanes(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.lanes < p.maxLanes && n > 0 {
		p.lanes++
		n--
		go p.lane()
	}
}

// close stops the lanes and cuts their connections: queued slices are
// canceled, a slice in flight fails.
func (p *tcpPeer) close() {
	p.gate.Lock()
	defer p.gate.Unlock()
	if !p.isClosed {
		p.isClosed = true
		close(p.closed)
		p.conns.closeAll()
	}
}

// lane serves slices over one connection, redialling after any failure.
func (p *tcpPeer) lane() {
	var c *tcpConn
	defer func() {
		if c != nil {
			p.conns.remove(c.Conn)
		}
	}()
	for {
		select {
		case <-p.closed:
			p.drain()
			return
		case s := <-p.queue:
			if !time.Now().Before(s.t.deadline) {
				s.t.finishSlice(StatusTimeout, 0)
				continue
			}
			if c == nil {
				conn, err := net.DialTimeout("tcp", p.addr, time.Until(s.t.deadline))
				if err != nil {
					p.onFailure()
					s.t.finishSlice(failureStatus(err), 0)
					continue
				}
				if !p.conns.add(conn) {
					s.t.finishSlice(StatusCanceled, 0)
					continue
				}
				conn.(*net.TCPConn).SetNoDelay(true)
				c = &tcpConn{Conn: conn, r: bufio.NewReaderSize(conn, frameReadBuffer), mem: p.mem}
			}
			st := c.do(s)
			if st != StatusCompleted && st != statusRejectedKeep {
				p.conns.remove(c.Conn)
				c = nil
				p.onFailure()
			}
			if st == statusRejectedKeep {
				st = StatusFailed
			}
			s.t.finishSlice(st, s.length)
		}
	}
}

// drain cancels slices left in the queue after close.
func (p *tcpPeer) drain() {
	for {
		select {
		case s := <-p.queue:
			s.t.finishSlice(StatusCanceled, 0)
		default:
			return
		}
	}
}

// statusRejectedKeep is a lane-internal outcome: the peer rejected the
// request and the connection is still usable. It never reaches a task.
const statusRejectedKeep Status = -1

type tcpConn struct {
	net.Conn
	r   *bufio.Reader
	mem *gpu.Memory
}

// do runs one slice as a v2 request.
func (c *tcpConn) do(s *tcpSlice) Status {
	c.SetDeadline(s.t.deadline)
	var hb [tcpHeaderSize]byte
	tcpHeader{size: s.length, addr: s.remote, opcode: s.t.req.Opcode, v2: true}.encode(&hb)
	if s.t.req.Opcode == OpWrite {
		if err := c.sendWrite(hb, s); err != nil {
			return failureStatus(err)
		}
		return c.readStatus()
	}
	if _, err := c.Write(hb[:]); err != nil {
		return failureStatus(err)
	}
	if st := c.readStatus(); st != StatusCompleted {
		return st
	}
	if err := c.receive(s); err != nil {
		return failureStatus(err)
	}
	return StatusCompleted
}

// sendWrite sends a WRITE's header and payload. A device payload travels
// through pinned host chunks, never from the device address.
func (c *tcpConn) sendWrite(hb [tcpHeaderSize]byte, s *tcpSlice) error {
	if s.t.local.device {
		if _, err := c.Write(hb[:]); err != nil {
			return err
		}
		return c.mem.SendDevice(c.Conn, s.local, s.length, s.t.local.ordinal)
	}
	bufs := net.Buffers{hb[:], bytesAt(s.local, s.length)}
	_, err := bufs.WriteTo(c.Conn)
	return err
}

// receive reads a READ's payload into local memory (device memory through
// pinned host chunks).
func (c *tcpConn) receive(s *tcpSlice) error {
	if s.t.local.device {
		return c.mem.RecvDevice(c.r, s.local, s.length, s.t.local.ordinal)
	}
	_, err := io.ReadFull(c.r, bytesAt(s.local, s.length))
	return err
}

func (c *tcpConn) readStatus() Status {
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return failureStatus(err)
	}
	code, err := decodeStatus(b[:])
	switch {
	case err != nil:
		return StatusFailed
	case code == statusOK:
		return StatusCompleted
	case code == statusRejected:
		return statusRejectedKeep
	default:
		return StatusFailed
	}
}

// failureStatus maps a network error to TIMEOUT or FAILED.
func failureStatus(err error) Status {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return StatusTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return StatusTimeout
	}
	return StatusFailed
}
