package shm

import (
	"errors"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Transport reaches peers on this host (same boot and PID namespace) that
// publish a control page, and carries transfers into the buffers they
// share.
type Transport struct {
	mem     *gpu.Memory // copies device memory
	workers copier
}

// NewTransport returns the same-host transport; device memory on the local
// side is copied by mem.
func NewTransport(mem *gpu.Memory) *Transport {
	return &Transport{mem: mem}
}

// Name is "shm".
func (*Transport) Name() string { return "shm" }

// Reaches reports whether the peer runs on this host and can be mapped.
func (*Transport) Reaches(p transport.Peer) bool {
	d := p.Desc
	return d.HostID != "" && d.HostID == HostID() && d.PID > 0 && d.CtlFD > 0
}

// Connect opens the peer's control page and a pidfd for its process.
func (t *Transport) Connect(p transport.Peer) (transport.Conn, error) {
	m, err := openMappings(p.Desc)
	if err != nil {
		return nil, err
	}
	c := &conn{t: t, m: m}
	c.desc.Store(p.Desc)
	return c, nil
}

// conn is the shm Conn of one peer process. It implements
// transport.DirectView.
type conn struct {
	t    *Transport
	m    *mappings
	desc atomic.Pointer[transport.SegmentDesc] // of the last Update
}

// errPeerExited is Check's error once the peer's process is gone.
var errPeerExited = errors.New("peer process exited")

// Update follows a descriptor of the same process and control page, and
// unmaps the buffers it no longer lists.
func (c *conn) Update(p transport.Peer) bool {
	d, old := p.Desc, c.desc.Load()
	if d.PID != old.PID || d.CtlInode != old.CtlInode {
		return false
	}
	keep := map[uint64]bool{}
	for _, b := range d.Buffers {
		keep[b.ShmInode] = true
	}
	c.m.forget(keep)
	c.desc.Store(d)
	return true
}

// Check sees the peer's exit through its pidfd (within AliveRecheck), and
// a changed registry through the version on its control page.
func (c *conn) Check() (bool, error) {
	// The pin keeps the control page mapped and the pidfd open: after
	// Close they are gone (the descriptor number may name another file).
	if !c.m.pinOpen() {
		return false, errPeerExited
	}
	defer c.m.unpin()
	if !c.m.aliveRecently() {
		return false, errPeerExited
	}
	return c.m.version() != c.desc.Load().Version, nil
}

// Exited looks at the peer's process now (transport.ExitWatch): true
// once it is gone or has begun to exit.
func (c *conn) Exited() bool {
	if !c.m.pinOpen() {
		return true
	}
	defer c.m.unpin()
	return c.m.exited()
}

// shared returns the peer buffer holding [addr, addr+n) if it is one the
// peer shares.
func (c *conn) shared(addr, n uint64) (transport.BufferDesc, bool) {
	d := c.desc.Load()
	i := d.FindBuffer(addr, n)
	if i < 0 || d.Buffers[i].ShmFD == 0 {
		return transport.BufferDesc{}, false
	}
	return d.Buffers[i], true
}

// Carries reports whether [addr, addr+n) lies in a shared buffer that this
// process can map (it maps it on first use).
func (c *conn) Carries(addr, n uint64) bool {
	return transport.View(c, addr, n, func([]byte) {})
}

// Pin maps the peer's [addr, addr+n) (on first use) and pins the
// mappings until Unpin.
func (c *conn) Pin(addr, n uint64) ([]byte, bool) {
	b, ok := c.shared(addr, n)
	if !ok {
		return nil, false
	}
	if !c.m.pin() {
		return nil, false
	}
	m, err := c.m.buffer(b)
	if err != nil {
		c.m.unpin()
		return nil, false
	}
	off := addr - b.Addr
	return m[off : off+n : off+n], true
}

// Unpin ends a Pin.
func (c *conn) Unpin() { c.m.unpin() }

// Submit hands the copy to the transport's workers and returns at once.
func (c *conn) Submit(j *transport.Job) {
	j.Tracker.Start(1)
	c.t.workers.add(c, j)
}

// Close unmaps everything, after copies in progress; queued copies then
// fail.
func (c *conn) Close() { c.m.close() }
