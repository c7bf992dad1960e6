package tcp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/transfer/internal/conns"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// slice is one piece of a job that travels as one TCP request (followed,
// for a job with a trailer, by the trailer's request: such a job is one
// slice).
type slice struct {
	j       *transport.Job
	local   uintptr
	remote  uint64
	length  uint64
	trailer transport.Trailer
}

// peer is the Conn of one remote data port: it moves slices over a bounded
// pool of connections ("lanes"). Slices are served in submission order.
type peer struct {
	addr     string
	maxLanes int
	mem      *gpu.Memory // stages device memory
	secret   []byte      // the cluster secret, nil for none (auth.go)
	// onFailure runs after a slice fails for a reason other than the
	// peer rejecting it (the peer may be gone or have moved).
	onFailure func()
	queue     chan *slice
	closed    chan struct{}

	mu    sync.Mutex
	lanes int
	// gate is held shared while slices are queued and exclusively by
	// close, so nothing is queued after the lanes have drained.
	gate     sync.RWMutex
	isClosed bool
	// conns are the lanes' and the direct connections: close cuts them,
	// so a slice in the middle of a request ends at once instead of at its
	// deadline.
	conns conns.Set
	// The direct connections (direct.go), guarded by mu: all of them, the
	// idle ones, how many there are or are being dialled (at most
	// maxLanes), and whether Close has stopped them.
	direct       map[*wireConn]struct{}
	idle         []*wireConn
	directs      int
	directClosed bool
}

func newPeer(addr string, lanes int, mem *gpu.Memory, secret []byte, onFailure func()) *peer {
	return &peer{addr: addr, maxLanes: lanes, mem: mem, secret: secret, onFailure: onFailure, queue: make(chan *slice, 4096), closed: make(chan struct{})}
}

// Carries is true for every range: the target checks it.
func (p *peer) Carries(addr, n uint64) bool { return true }

// Update keeps the pool while the peer's data address stays the same.
func (p *peer) Update(d transport.Peer) bool { return dataAddr(d) == p.addr }

// Check never finds the peer gone: only a request can tell.
func (p *peer) Check() (bool, error) { return false, nil }

// CarriesTrailers: a job's trailer is its slice's second request on the
// same connection, sent right behind the bytes (transport.TrailerCarrier).
func (p *peer) CarriesTrailers() {}

// Submit queues the job's slices; it fails a slice that cannot be queued
// before the job's deadline. It blocks only while the queue is full. A
// job with a trailer must be one slice.
func (p *peer) Submit(j *transport.Job) {
	n := int((j.Length + SliceSize - 1) / SliceSize)
	j.Tracker.Start(n)
	p.gate.RLock()
	defer p.gate.RUnlock()
	if j.Trailer.Length > 0 && (n != 1 || j.Op != transport.OpWrite) {
		for range n {
			j.Tracker.FinishSlice(transport.StatusFailed, 0)
		}
		return
	}
	if p.isClosed {
		for range n {
			j.Tracker.FinishSlice(transport.StatusCanceled, 0)
		}
		return
	}
	p.growLanes(n)
	for off := uint64(0); off < j.Length; off += SliceSize {
		s := &slice{j: j, local: j.Local + uintptr(off), remote: j.Remote + off, length: min(SliceSize, j.Length-off), trailer: j.Trailer}
		select {
		case p.queue <- s:
		default:
			timer := time.NewTimer(time.Until(j.Deadline))
			select {
			case p.queue <- s:
			case <-timer.C:
				j.Tracker.FinishSlice(transport.StatusTimeout, 0)
			}
			timer.Stop()
		}
	}
}

// growLanes starts lanes, up to the limit, for n more slices.
func (p *peer) growLanes(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.lanes < p.maxLanes && n > 0 {
		p.lanes++
		n--
		go p.lane()
	}
}

// Close stops the lanes and cuts their connections: queued slices are
// canceled, a slice in flight fails.
func (p *peer) Close() {
	p.gate.Lock()
	defer p.gate.Unlock()
	if !p.isClosed {
		p.isClosed = true
		close(p.closed)
		p.stopDirect()
		p.conns.CloseAll()
	}
}

// lane serves slices over one connection, redialling after any failure.
func (p *peer) lane() {
	var c *wireConn
	defer func() {
		if c != nil {
			p.conns.Remove(c.Conn)
		}
	}()
	for {
		select {
		case <-p.closed:
			p.drain()
			return
		case s := <-p.queue:
			if !time.Now().Before(s.j.Deadline) {
				s.j.Tracker.FinishSlice(transport.StatusTimeout, 0)
				continue
			}
			var st transport.Status
			st, c = p.runSlice(c, s)
			s.j.Tracker.FinishSlice(st, s.length)
		}
	}
}

// runSlice runs s over c, dialling a connection when c is nil, and again
// on a fresh one while the connection stalled or the peer was unreachable
// and s's deadline allows (stall.go). It returns s's status and the
// connection to keep (nil: none).
func (p *peer) runSlice(c *wireConn, s *slice) (transport.Status, *wireConn) {
	for {
		if c == nil {
			var st transport.Status
			if c, st = p.dial(s.j.Deadline, false); c == nil {
				return st, nil
			}
		}
		st, err := c.do(s)
		st, keep := p.settle(st)
		if keep {
			return st, c
		}
		p.conns.Remove(c.Conn)
		c = nil
		if !retryable(err, s.j.Deadline) {
			return st, nil
		}
	}
}

// dial opens a connection to the peer (stall.go: dialled again while the
// peer is unreachable, until deadline), tracked in p.conns; direct ones
// read in poll(2) on the caller's thread (direct.go). On failure it
// returns nil and the status to report.
func (p *peer) dial(deadline time.Time, direct bool) (*wireConn, transport.Status) {
	tc, err := dialData(p.addr, deadline)
	if err != nil {
		p.onFailure()
		return nil, failureStatus(err)
	}
	conn := net.Conn(tc)
	if !p.conns.Add(conn) {
		return nil, transport.StatusCanceled
	}
	c := &wireConn{Conn: conn, mem: p.mem}
	var r io.Reader = conn
	if direct {
		if c.pr, err = pollread.New(tc); err != nil {
			p.conns.Remove(conn)
			return nil, transport.StatusFailed
		}
		c.pr.SetSpin(syncSpin)
		r = c.pr
	}
	c.r = bufio.NewReaderSize(r, frameReadBuffer)
	if p.secret != nil {
		if err := c.authenticate(deadline, p.secret); err != nil {
			slog.Warn("tcp: peer failed the cluster secret exchange", "peer", p.addr, "err", err)
			p.conns.Remove(conn)
			return nil, transport.StatusFailed
		}
	}
	return c, transport.StatusCompleted
}

// settle turns a slice's outcome on a connection into the status to
// report and whether the connection stays usable; a failure other than
// the peer's rejection may mean the peer moved, so it is told to the
// engine.
func (p *peer) settle(st transport.Status) (transport.Status, bool) {
	switch st {
	case transport.StatusCompleted:
		return st, true
	case statusRejectedKeep:
		return transport.StatusFailed, true
	}
	p.onFailure()
	return st, false
}

// drain cancels slices left in the queue after close.
func (p *peer) drain() {
	for {
		select {
		case s := <-p.queue:
			s.j.Tracker.FinishSlice(transport.StatusCanceled, 0)
		default:
			return
		}
	}
}

// statusRejectedKeep is a lane-internal outcome: the peer rejected the
// request and the connection is still usable. It never reaches a task.
const statusRejectedKeep transport.Status = -1

type wireConn struct {
	net.Conn
	r   *bufio.Reader
	pr  *pollread.Reader // under r on a direct connection, else nil
	mem *gpu.Memory
}

// authenticate runs the initiator's side of the secret exchange before
// deadline (auth.go).
func (c *wireConn) authenticate(deadline time.Time, secret []byte) error {
	c.SetDeadline(deadline)
	if c.pr != nil {
		c.pr.SetDeadline(deadline)
	}
	return authInitiator(c.r, c.Conn, secret)
}

// do runs one slice as a v2 request; a failure of the connection comes
// with its error.
func (c *wireConn) do(s *slice) (transport.Status, error) {
	c.SetDeadline(s.j.Deadline)
	if c.pr != nil {
		c.pr.SetDeadline(s.j.Deadline)
	}
	var hb [tcpHeaderSize]byte
	tcpHeader{size: s.length, addr: s.remote, opcode: s.j.Op, v2: true}.encode(&hb)
	if s.j.Op == transport.OpWrite {
		if err := c.sendWrite(hb, s); err != nil {
			return failureStatus(err), err
		}
		st, err := c.readStatus()
		if s.trailer.Length == 0 || st != transport.StatusCompleted && st != statusRejectedKeep {
			return st, err
		}
		// The trailer's status follows on a usable connection either
		// way; the slice succeeds only when both requests did.
		tst, err := c.readStatus()
		if st == transport.StatusCompleted {
			st = tst
		}
		return st, err
	}
	if _, err := c.Write(hb[:]); err != nil {
		return failureStatus(err), err
	}
	if st, err := c.readStatus(); st != transport.StatusCompleted {
		return st, err
	}
	if err := c.receive(s); err != nil {
		return failureStatus(err), err
	}
	return transport.StatusCompleted, nil
}

// sendWrite sends a WRITE's header and payload, and its trailer's request
// right behind them, without waiting for the payload's status. A device
// payload travels through pinned host chunks, never from the device
// address.
func (c *wireConn) sendWrite(hb [tcpHeaderSize]byte, s *slice) error {
	var tb [tcpHeaderSize]byte
	tr := s.trailer
	if tr.Length > 0 {
		tcpHeader{size: tr.Length, addr: tr.Remote, opcode: transport.OpWrite, v2: true}.encode(&tb)
	}
	if s.j.LocalMem.Device {
		if _, err := c.Write(hb[:]); err != nil {
			return err
		}
		if err := c.mem.SendDevice(c.Conn, s.local, s.length, s.j.LocalMem.Ordinal); err != nil || tr.Length == 0 {
			return err
		}
		bufs := net.Buffers{tb[:], gpu.HostBytes(tr.Local, tr.Length)}
		_, err := bufs.WriteTo(c.Conn)
		return err
	}
	bufs := net.Buffers{hb[:], gpu.HostBytes(s.local, s.length)}
	if tr.Length > 0 {
		bufs = append(bufs, tb[:], gpu.HostBytes(tr.Local, tr.Length))
	}
	_, err := bufs.WriteTo(c.Conn)
	return err
}

// receive reads a READ's payload into local memory (device memory through
// pinned host chunks).
func (c *wireConn) receive(s *slice) error {
	if s.j.LocalMem.Device {
		return c.mem.RecvDevice(c.r, s.local, s.length, s.j.LocalMem.Ordinal)
	}
	_, err := io.ReadFull(c.r, gpu.HostBytes(s.local, s.length))
	return err
}

func (c *wireConn) readStatus() (transport.Status, error) {
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return failureStatus(err), err
	}
	code, err := decodeStatus(b[:])
	switch {
	case err != nil:
		return transport.StatusFailed, nil
	case code == statusOK:
		return transport.StatusCompleted, nil
	case code == statusRejected:
		return statusRejectedKeep, nil
	default:
		return transport.StatusFailed, nil
	}
}

// failureStatus maps a network error to TIMEOUT or FAILED.
func failureStatus(err error) transport.Status {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return transport.StatusTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return transport.StatusTimeout
	}
	return transport.StatusFailed
}
