package client

import (
	"context"
	"unsafe"
)

// maxStageChunk bounds one staging chunk; a client's local buffer is cut
// into chunks of this size (or one smaller chunk) so concurrent copying
// operations each get their own.
const maxStageChunk = 4 << 20

// stagingPool hands out chunks of the registered local buffer.
type stagingPool struct {
	chunks chan []byte
	size   int
}

func newStagingPool(buf []byte) *stagingPool {
	size := min(len(buf), maxStageChunk)
	p := &stagingPool{size: size}
	if size == 0 {
		return p
	}
	n := len(buf) / size
	p.chunks = make(chan []byte, n)
	for i := range n {
		p.chunks <- buf[i*size : (i+1)*size : (i+1)*size]
	}
	return p
}

// get waits for a free chunk.
func (p *stagingPool) get(ctx context.Context) ([]byte, error) {
	select {
	case c := <-p.chunks:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *stagingPool) put(c []byte) { p.chunks <- c }

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

// mem views a caller memory range.
func mem(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// copyOut copies object bytes [off, off+len(src)) from src into the parts,
// which together hold the object in order.
func copyOut(parts []Part, off uint64, src []byte) {
	for _, p := range parts {
		if len(src) == 0 {
			return
		}
		if off >= p.Size {
			off -= p.Size
			continue
		}
		n := copy(mem(p.Addr+uintptr(off), p.Size-off), src)
		src = src[n:]
		off = 0
	}
}

// copyIn gathers object bytes [off, off+len(dst)) from the parts into dst.
func copyIn(dst []byte, parts []Part, off uint64) {
	for _, p := range parts {
		if len(dst) == 0 {
			return
		}
		if off >= p.Size {
			off -= p.Size
			continue
		}
		n := copy(dst, mem(p.Addr+uintptr(off), p.Size-off))
		dst = dst[n:]
		off = 0
	}
}
