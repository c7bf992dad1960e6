package client

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
)

// maxStageChunk bounds one staging chunk: a copying operation stages its
// bytes through a chunk of at most this size (or the whole buffer, when
// smaller), so concurrent operations each get their own.
const maxStageChunk = 4 << 20

// stageAlign aligns staging chunks and local-buffer leases.
const stageAlign = 64

// registrar registers memory as the local side of transfers (the
// client's Transfer Engine).
type registrar interface {
	RegisterLocalOnly(addr uintptr, length uint64) error
	UnregisterLocalMemory(addr uintptr) error
}

// stagingPool hands out staging chunks. It takes them from the local
// buffer's arena, which BufferPool leases (LocalAlloc) share; when the
// leases leave no room there, from a reserve that only staging uses: one
// chunk's worth of memory, mapped and registered the first time it is
// needed and kept until close. A lease can hold the local buffer for as
// long as its owner likes, but reserve chunks are held only by staging
// operations, each bounded by its transfer deadline, so a copying put or
// get always makes progress however much of the local buffer is leased.
type stagingPool struct {
	arena *arena
	size  int // the largest chunk; 0 without a local buffer
	reg   registrar

	mu      sync.Mutex
	reserve *arena // nil until first needed
	mapping []byte // the reserve's memory
	closed  bool
}

func newStagingPool(a *arena, reg registrar) *stagingPool {
	return &stagingPool{arena: a, size: int(min(a.size, maxStageChunk)), reg: reg}
}

// chunkSize is the chunk staging n bytes takes: n rounded up to
// stageAlign, at most size.
func (p *stagingPool) chunkSize(n uint64) uint64 {
	n = (max(n, 1) + stageAlign - 1) &^ (stageAlign - 1)
	return min(n, uint64(p.size))
}

// get returns a chunk for staging n bytes (in pieces of the chunk when n
// is larger than it). It waits, until ctx ends, only while other staging
// operations hold both the local buffer's free room and the reserve.
func (p *stagingPool) get(ctx context.Context, n uint64) ([]byte, error) {
	m := p.chunkSize(n)
	if addr, ok := p.arena.tryAlloc(m, stageAlign); ok {
		return mem(addr, m), nil
	}
	res, err := p.reserveArena()
	if err != nil {
		return nil, err
	}
	for {
		mainFreed, resFreed := p.arena.wake(), res.wake()
		if addr, ok := p.arena.tryAlloc(m, stageAlign); ok {
			return mem(addr, m), nil
		}
		if addr, ok := res.tryAlloc(m, stageAlign); ok {
			return mem(addr, m), nil
		}
		select {
		case <-mainFreed:
		case <-resFreed:
		case <-ctx.Done():
			return nil, fmt.Errorf("no staging chunk of %d bytes: %w", m, ctx.Err())
		}
	}
}

// reserveArena maps and registers the reserve on first use.
func (p *stagingPool) reserveArena() (*arena, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reserve != nil {
		return p.reserve, nil
	}
	if p.closed {
		return nil, fmt.Errorf("staging pool closed")
	}
	buf, err := unix.Mmap(-1, 0, p.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("staging reserve of %d bytes: %w", p.size, err)
	}
	if err := p.reg.RegisterLocalOnly(gpu.AddrOf(buf), uint64(len(buf))); err != nil {
		unix.Munmap(buf)
		return nil, fmt.Errorf("staging reserve of %d bytes: %w", p.size, err)
	}
	p.mapping, p.reserve = buf, newArena(buf)
	return p.reserve, nil
}

// put returns a chunk from get.
func (p *stagingPool) put(c []byte) {
	addr := gpu.AddrOf(c)
	if p.arena.release(addr) {
		return
	}
	p.mu.Lock()
	res := p.reserve
	p.mu.Unlock()
	if res != nil {
		res.release(addr)
	}
}

// close unregisters and unmaps the reserve; no chunk may be out.
func (p *stagingPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.mapping != nil {
		p.reg.UnregisterLocalMemory(gpu.AddrOf(p.mapping))
		unix.Munmap(p.mapping)
		p.mapping, p.reserve = nil, nil
	}
}

// Part is a range of the caller's memory.
type Part struct {
	Addr uintptr
	Size uint64
}

// partsSize sums the sizes of parts.
func partsSize(parts []Part) uint64 {
	var n uint64
	for _, p := range parts {
		n += p.Size
	}
	return n
}

// mem views a caller memory range (host memory).
func mem(addr uintptr, n uint64) []byte { return gpu.HostBytes(addr, n) }

// copyOut copies object bytes [off, off+len(src)) from src into the parts,
// which together hold the object in order. Parts may be device memory
// (gm copies it).
func copyOut(gm *gpu.Memory, parts []Part, off uint64, src []byte) error {
	for _, p := range parts {
		if len(src) == 0 {
			return nil
		}
		if off >= p.Size {
			off -= p.Size
			continue
		}
		n := min(p.Size-off, uint64(len(src)))
		if err := gm.CopyFromHost(p.Addr+uintptr(off), src[:n]); err != nil {
			return err
		}
		src = src[n:]
		off = 0
	}
	return nil
}

// copyIn gathers object bytes [off, off+len(dst)) from the parts, which may
// be device memory, into dst.
func copyIn(gm *gpu.Memory, dst []byte, parts []Part, off uint64) error {
	for _, p := range parts {
		if len(dst) == 0 {
			return nil
		}
		if off >= p.Size {
			off -= p.Size
			continue
		}
		n := min(p.Size-off, uint64(len(dst)))
		if err := gm.CopyToHost(dst[:n], p.Addr+uintptr(off)); err != nil {
			return err
		}
		dst = dst[n:]
		off = 0
	}
	return nil
}
