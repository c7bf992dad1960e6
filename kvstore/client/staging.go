package client

import (
	"context"

	"github.com/mooncake-go/mooncake/gpu"
)

// maxStageChunk bounds one staging chunk: a copying operation takes a
// chunk of this size (or the whole buffer, when smaller) from the local
// buffer's arena, so concurrent operations each get their own.
const maxStageChunk = 4 << 20

// stageAlign aligns staging chunks and local-buffer leases.
const stageAlign = 64

// stagingPool hands out chunks of the registered local buffer.
type stagingPool struct {
	arena *arena
	size  int
}

func newStagingPool(a *arena) *stagingPool {
	return &stagingPool{arena: a, size: int(min(a.size, maxStageChunk))}
}

// get waits for a free chunk.
func (p *stagingPool) get(ctx context.Context) ([]byte, error) {
	addr, err := p.arena.alloc(ctx, uint64(p.size), stageAlign)
	if err != nil {
		return nil, err
	}
	return mem(addr, uint64(p.size))[:p.size:p.size], nil
}

func (p *stagingPool) put(c []byte) { p.arena.release(gpu.AddrOf(c)) }

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
