package master

import (
	"math/rand"
	"testing"
)

func TestAllocatorFirstFitAndAlignment(t *testing.T) {
	a := NewAllocator(1000) // rounds down to 1000 (multiple of 8)
	off1, ok := a.Allocate(1)
	if !ok || off1 != 0 {
		t.Fatalf("first alloc = %d,%v", off1, ok)
	}
	off2, _ := a.Allocate(13)
	if off2 != 8 {
		t.Fatalf("second alloc at %d, want 8 (1 rounded up to 8)", off2)
	}
	if a.Allocated() != 8+16 {
		t.Fatalf("allocated %d, want 24", a.Allocated())
	}
	if _, ok := a.Allocate(0); ok {
		t.Fatal("zero-size allocation succeeded")
	}
	if _, ok := a.Allocate(2000); ok {
		t.Fatal("oversized allocation succeeded")
	}
	if NewAllocator(1001).Size() != 1000 {
		t.Fatal("size not rounded down to alignment")
	}
}

func TestAllocatorExhaustionAndReuse(t *testing.T) {
	a := NewAllocator(64)
	var offs []uint64
	for range 8 {
		off, ok := a.Allocate(8)
		if !ok {
			t.Fatal("allocation failed before the segment was full")
		}
		offs = append(offs, off)
	}
	if _, ok := a.Allocate(1); ok {
		t.Fatal("allocation succeeded in a full segment")
	}
	if a.FreeBytes() != 0 || a.FreeExtents() != 0 {
		t.Fatalf("full segment: free=%d extents=%d", a.FreeBytes(), a.FreeExtents())
	}
	a.Free(offs[3], 8)
	off, ok := a.Allocate(8)
	if !ok || off != offs[3] {
		t.Fatalf("reuse got %d,%v want %d", off, ok, offs[3])
	}
}

func TestAllocatorFragmentationAndCoalescing(t *testing.T) {
	a := NewAllocator(80)
	var offs []uint64
	for range 10 {
		off, _ := a.Allocate(8)
		offs = append(offs, off)
	}
	// Free every other block: 40 bytes free but no 16-byte hole.
	for i := 0; i < 10; i += 2 {
		a.Free(offs[i], 8)
	}
	if a.FreeBytes() != 40 || a.LargestFree() != 8 || a.FreeExtents() != 5 {
		t.Fatalf("fragmented: free=%d largest=%d extents=%d", a.FreeBytes(), a.LargestFree(), a.FreeExtents())
	}
	if _, ok := a.Allocate(16); ok {
		t.Fatal("16 bytes allocated in a segment with only 8-byte holes")
	}
	// Freeing block 1 merges holes 0,1,2 (prev and next at once).
	a.Free(offs[1], 8)
	if a.LargestFree() != 24 || a.FreeExtents() != 4 {
		t.Fatalf("after merge: largest=%d extents=%d", a.LargestFree(), a.FreeExtents())
	}
	off, ok := a.Allocate(24)
	if !ok || off != 0 {
		t.Fatalf("allocate into merged hole: %d,%v", off, ok)
	}
	a.Free(off, 24)
	// Free the rest in an order exercising merge-with-next and with-prev.
	for _, i := range []int{5, 3, 9, 7} {
		a.Free(offs[i], 8)
	}
	if a.FreeExtents() != 1 || a.LargestFree() != 80 || a.Allocated() != 0 {
		t.Fatalf("all freed: extents=%d largest=%d allocated=%d", a.FreeExtents(), a.LargestFree(), a.Allocated())
	}
}

func TestAllocatorDoubleFreePanics(t *testing.T) {
	a := NewAllocator(64)
	off, _ := a.Allocate(8)
	a.Free(off, 8)
	defer func() {
		if recover() == nil {
			t.Fatal("double free did not panic")
		}
	}()
	a.Free(off, 8)
}

// TestAllocatorBadFreePanics: with no table of allocations, Free checks
// its range against the free extents; a length reaching into free space,
// a range starting in it, an unaligned or empty range all panic and leave
// the allocator as it was.
func TestAllocatorBadFreePanics(t *testing.T) {
	a := NewAllocator(64)
	first, _ := a.Allocate(16)
	second, _ := a.Allocate(8) // [16, 24); [24, 64) stays free
	for _, c := range []struct {
		name   string
		off, n uint64
	}{
		{"length reaching into free space", second, 16},
		{"range starting in free space", 32, 8},
		{"range past the segment", 56, 16},
		{"unaligned offset", first + 4, 8},
		{"empty range", first, 0},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Free(%d, %d) did not panic", c.name, c.off, c.n)
				}
			}()
			a.Free(c.off, c.n)
		}()
		if a.Allocated() != 24 || a.FreeExtents() != 1 {
			t.Fatalf("%s: allocator changed: allocated=%d extents=%d", c.name, a.Allocated(), a.FreeExtents())
		}
	}
	// A range that is wholly held frees, even if it spans two allocations
	// (the holders' bookkeeping, not the allocator's, says what they own).
	a.Free(first, 24)
	if a.Allocated() != 0 || a.FreeExtents() != 1 {
		t.Fatalf("after freeing all: allocated=%d extents=%d", a.Allocated(), a.FreeExtents())
	}
}

// TestAllocatorRandomised checks the invariants (no overlap, accounting,
// full coalescing at the end) under random allocate/free sequences.
func TestAllocatorRandomised(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	a := NewAllocator(4096)
	live := map[uint64]uint64{}
	for range 5000 {
		if rng.Intn(2) == 0 || len(live) == 0 {
			n := uint64(rng.Intn(200) + 1)
			off, ok := a.Allocate(n)
			if !ok {
				if a.LargestFree() >= AlignUp(n) {
					t.Fatalf("allocation of %d failed with a %d-byte hole", n, a.LargestFree())
				}
				continue
			}
			for o, l := range live {
				if off < o+l && o < off+AlignUp(n) {
					t.Fatalf("overlap: [%d,+%d) and [%d,+%d)", off, n, o, l)
				}
			}
			if off+AlignUp(n) > a.Size() || off%Alignment != 0 {
				t.Fatalf("bad placement %d+%d", off, n)
			}
			live[off] = AlignUp(n)
		} else {
			for o := range live {
				a.Free(o, live[o])
				delete(live, o)
				break
			}
		}
		var sum uint64
		for _, l := range live {
			sum += l
		}
		if sum != a.Allocated() {
			t.Fatalf("allocated %d, live sum %d", a.Allocated(), sum)
		}
	}
	for o, l := range live {
		a.Free(o, l)
	}
	if a.FreeExtents() != 1 || a.Allocated() != 0 {
		t.Fatalf("after freeing all: extents=%d allocated=%d", a.FreeExtents(), a.Allocated())
	}
}
