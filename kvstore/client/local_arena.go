package client

import (
	"context"
	"sort"
	"sync"

	"github.com/mooncake-go/mooncake/gpu"
)

// arena hands out aligned ranges of the registered local buffer. Staging
// chunks of copying puts and gets and the leases of a Python BufferPool
// (LocalAlloc) both come from it, so they never overlap.
type arena struct {
	mu    sync.Mutex
	base  uintptr
	size  uint64
	free  []span            // sorted by off, coalesced
	used  map[uint64]uint64 // offset of a live range -> its length
	freed chan struct{}     // closed and replaced on every free
}

// span is [off, off+n) of the arena.
type span struct{ off, n uint64 }

func newArena(buf []byte) *arena {
	a := &arena{used: map[uint64]uint64{}, freed: make(chan struct{})}
	if len(buf) > 0 {
		a.base, a.size = gpu.AddrOf(buf), uint64(len(buf))
		a.free = []span{{0, a.size}}
	}
	return a
}

// tryAlloc takes n bytes whose address is a multiple of align (a power of
// two), first fit; ok=false when no free range holds them.
func (a *arena) tryAlloc(n, align uint64) (uintptr, bool) {
	if n == 0 || align == 0 || align&(align-1) != 0 {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, s := range a.free {
		start := (uint64(a.base)+s.off+align-1)&^(align-1) - uint64(a.base)
		if start+n > s.off+s.n {
			continue
		}
		var rest []span
		if start > s.off {
			rest = append(rest, span{s.off, start - s.off})
		}
		if end := start + n; end < s.off+s.n {
			rest = append(rest, span{end, s.off + s.n - end})
		}
		a.free = append(a.free[:i], append(rest, a.free[i+1:]...)...)
		a.used[start] = n
		return a.base + uintptr(start), true
	}
	return 0, false
}

// alloc waits for n bytes until ctx ends.
func (a *arena) alloc(ctx context.Context, n, align uint64) (uintptr, error) {
	for {
		wake := a.wake()
		if p, ok := a.tryAlloc(n, align); ok {
			return p, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// wake is closed at the next release.
func (a *arena) wake() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.freed
}

// release returns the range that starts at p; false if p is not the start
// of a live range.
func (a *arena) release(p uintptr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p < a.base {
		return false
	}
	off := uint64(p - a.base)
	n, ok := a.used[off]
	if !ok {
		return false
	}
	delete(a.used, off)
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free[:i], append([]span{{off, n}}, a.free[i:]...)...)
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	close(a.freed)
	a.freed = make(chan struct{})
	return true
}
