package master

import (
	"fmt"
	"sort"
)

// Alignment is the granularity of the offset allocator: every allocation
// starts at a multiple of Alignment bytes from the segment base and its
// length is rounded up to a multiple of it (upstream's offset allocator
// works in units of at least 8 bytes as well).
const Alignment = 8

// extent is a free range [off, off+len) inside a segment.
type extent struct {
	off, len uint64
}

// Allocator is a first-fit offset allocator over one segment of Size bytes.
// It keeps only the free space, a list of extents sorted by offset: the
// holder of an allocation (a replica, a quarantined buffer, a reservation
// piece) knows its offset and length and hands both back to Free, so the
// master spends no memory per allocation here. Free coalesces a
// released range with its neighbours, so fragmentation never outlives the
// allocations that caused it. Allocate is O(#free extents), Free is
// O(log n) to find the slot plus the slice shift. It is not safe for
// concurrent use; State serialises access.
type Allocator struct {
	size      uint64
	allocated uint64
	free      []extent // sorted by off, never adjacent (always coalesced)
}

// NewAllocator returns an allocator managing size bytes (rounded down to
// Alignment).
func NewAllocator(size uint64) *Allocator {
	size -= size % Alignment
	a := &Allocator{size: size}
	if size > 0 {
		a.free = []extent{{0, size}}
	}
	return a
}

// AlignUp rounds n up to a multiple of Alignment (0 stays 0).
func AlignUp(n uint64) uint64 {
	return (n + Alignment - 1) / Alignment * Alignment
}

// Allocate reserves n bytes (rounded up to Alignment) at the lowest offset
// where they fit and returns that offset. ok is false when no free extent
// is large enough (including when n is 0 or larger than the segment).
func (a *Allocator) Allocate(n uint64) (off uint64, ok bool) {
	if n == 0 || n > a.size {
		return 0, false
	}
	need := AlignUp(n)
	for i := range a.free {
		e := &a.free[i]
		if e.len < need {
			continue
		}
		off = e.off
		if e.len == need {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			e.off += need
			e.len -= need
		}
		a.allocated += need
		return off, true
	}
	return 0, false
}

// Free releases the n bytes (rounded up to Alignment, as Allocate
// rounded them) at off. It panics when [off, off+n) is not wholly
// allocated (a double free, or a wrong offset or length): that is a
// bookkeeping bug in the caller.
func (a *Allocator) Free(off, n uint64) {
	n = AlignUp(n)
	a.mustHold(off, n)
	a.allocated -= n
	i := a.freeAfter(off)
	// Merge with the previous extent and/or the next one.
	mergePrev := i > 0 && a.free[i-1].off+a.free[i-1].len == off
	mergeNext := i < len(a.free) && off+n == a.free[i].off
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].len += n + a.free[i].len
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergePrev:
		a.free[i-1].len += n
	case mergeNext:
		a.free[i].off = off
		a.free[i].len += n
	default:
		a.free = append(a.free, extent{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = extent{off, n}
	}
}

// Size is the number of bytes the allocator manages.
func (a *Allocator) Size() uint64 { return a.size }

// Allocated is the number of bytes currently reserved (rounded lengths).
func (a *Allocator) Allocated() uint64 { return a.allocated }

// FreeBytes is Size minus Allocated.
func (a *Allocator) FreeBytes() uint64 { return a.size - a.allocated }

// LargestFree is the length of the largest free extent: the largest
// allocation that can currently succeed.
func (a *Allocator) LargestFree() uint64 {
	var m uint64
	for _, e := range a.free {
		m = max(m, e.len)
	}
	return m
}

// FreeExtents is the number of free extents (1 for an empty segment; more
// means fragmentation).
func (a *Allocator) FreeExtents() int { return len(a.free) }

// freeAfter is the index of the first free extent that starts after off.
func (a *Allocator) freeAfter(off uint64) int {
	return sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
}

// holds reports whether [off, off+n) is a non-empty, aligned range inside
// the segment that overlaps no free extent: bytes some holder owns. The
// free extents are sorted and disjoint, so only the one before off and
// the one after it can overlap.
func (a *Allocator) holds(off, n uint64) bool {
	end := off + n
	if n == 0 || end < off || end > a.size || off%Alignment != 0 || n%Alignment != 0 {
		return false
	}
	i := a.freeAfter(off)
	if i > 0 && a.free[i-1].off+a.free[i-1].len > off {
		return false
	}
	return i == len(a.free) || a.free[i].off >= end
}

// mustHold panics unless holds(off, n): a caller releasing or cutting
// bytes it does not hold has lost track of its allocations.
func (a *Allocator) mustHold(off, n uint64) {
	if !a.holds(off, n) {
		panic(fmt.Sprintf("master: allocation %d (+%d) is not held", off, n))
	}
}
