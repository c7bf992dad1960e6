package master

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// errSnapshotInconsistent means a snapshot decoded but its state does not
// hold together: restoring it would hand out bytes twice or read bytes no
// allocator holds, so a master refuses it as it refuses a corrupt file
// (upstream validates a standby's restore the same way before serving,
// its PR #3354).
var errSnapshotInconsistent = errors.New("snapshot: inconsistent state")

// span is a byte range [off, end) of a segment.
type span struct{ off, end uint64 }

// validateSnapshotState checks a decoded state. Every segment's free
// extents are sorted, disjoint, inside it and add up to its size less its
// allocated count. Every range something holds (objects' memory replicas,
// unfinished tasks' targets, promotions' targets, quarantined buffers,
// reservations' unused pieces), rounded up to Alignment, lies inside its
// segment, overlaps no free extent and no other held range. In a mounted
// segment the held ranges also add up to the allocated count, so held and
// free ranges tile it exactly; a segment no longer mounted keeps the
// allocations its dropped replicas had, which nothing holds. The
// allocator keeps no table of allocations, so this is what refuses a file
// that would hand out bytes twice or leak them.
func validateSnapshotState(st *State, segs []*segment) error {
	held := make(map[*segment][]span, len(segs))
	hold := func(sg *segment, off, n uint64) {
		held[sg] = append(held[sg], span{off, off + AlignUp(n)})
	}
	for _, key := range st.sortedKeys() {
		for _, r := range st.objects.get(key).replicas {
			hold(r.seg, r.off, r.size)
		}
	}
	for _, t := range st.tasks {
		for _, r := range t.targets {
			hold(r.seg, r.off, r.size)
		}
	}
	for _, d := range st.disk.disks {
		for _, j := range d.promotions {
			if j.target != nil {
				hold(j.target.seg, j.target.off, j.target.size)
			}
		}
	}
	for _, q := range st.discarded {
		hold(q.seg, q.off, q.len)
	}
	for _, r := range st.reservations {
		for _, p := range r.pieces {
			hold(r.seg, p.off, p.len)
		}
	}
	for _, sg := range segs {
		a := sg.alloc
		var free uint64
		for i, f := range a.free {
			if f.len == 0 || f.off+f.len < f.off || f.off+f.len > a.size || (i > 0 && f.off <= a.free[i-1].off+a.free[i-1].len) {
				return fmt.Errorf("%w: segment %s: free extent %d (+%d) is empty, outside the segment or out of order",
					errSnapshotInconsistent, sg.info.ID, f.off, f.len)
			}
			free += f.len
		}
		if a.allocated > a.size || free != a.size-a.allocated {
			return fmt.Errorf("%w: segment %s: %d free and %d allocated bytes do not make its %d",
				errSnapshotInconsistent, sg.info.ID, free, a.allocated, a.size)
		}
		spans := held[sg]
		slices.SortFunc(spans, func(x, y span) int { return cmp.Compare(x.off, y.off) })
		var taken uint64
		for i, h := range spans {
			if !a.holds(h.off, h.end-h.off) || (i > 0 && h.off < spans[i-1].end) {
				return fmt.Errorf("%w: segment %s: held range %d (+%d) is outside the segment, free, or held twice",
					errSnapshotInconsistent, sg.info.ID, h.off, h.end-h.off)
			}
			taken += h.end - h.off
		}
		if st.segments[sg.info.ID] == sg && taken != a.allocated {
			return fmt.Errorf("%w: segment %s: held ranges add up to %d bytes, %d allocated",
				errSnapshotInconsistent, sg.info.ID, taken, a.allocated)
		}
	}
	return nil
}
