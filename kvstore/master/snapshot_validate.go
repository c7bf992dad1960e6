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

// validateSnapshotState checks a decoded state (whose allocators' counts
// the decoder checked): every segment's free and allocated extents tile
// its size without overlap, and every memory replica of an object lies inside one
// allocated extent of its segment, no two of them sharing a byte.
func validateSnapshotState(st *State, segs []*segment) error {
	used := make(map[*segment][]span, len(segs))
	for _, sg := range segs {
		a := sg.alloc
		var all, taken []span
		for off, n := range a.used {
			taken = append(taken, span{off, off + n})
		}
		for _, f := range a.free {
			all = append(all, span{f.off, f.off + f.len})
		}
		all = append(all, taken...)
		slices.SortFunc(all, func(x, y span) int { return cmp.Compare(x.off, y.off) })
		slices.SortFunc(taken, func(x, y span) int { return cmp.Compare(x.off, y.off) })
		var at uint64
		for _, s := range all {
			if s.off != at || s.end <= s.off {
				return fmt.Errorf("%w: segment %s: extents do not tile its %d bytes at offset %d", errSnapshotInconsistent, sg.info.ID, a.size, at)
			}
			at = s.end
		}
		if at != a.size {
			return fmt.Errorf("%w: segment %s: extents cover %d of its %d bytes", errSnapshotInconsistent, sg.info.ID, at, a.size)
		}
		used[sg] = taken
	}
	held := map[*segment][]span{}
	for _, key := range st.sortedKeys() {
		for _, r := range st.objects.get(key).replicas {
			taken := used[r.seg]
			i, _ := slices.BinarySearchFunc(taken, r.off+1, func(s span, off uint64) int { return cmp.Compare(s.off, off) })
			if i == 0 || r.off+r.size > taken[i-1].end || r.size == 0 {
				return fmt.Errorf("%w: object %q: replica at %d+%d of segment %s is not inside an allocated extent",
					errSnapshotInconsistent, key, r.off, r.size, r.seg.info.ID)
			}
			held[r.seg] = append(held[r.seg], span{r.off, r.off + r.size})
		}
	}
	for sg, spans := range held {
		slices.SortFunc(spans, func(x, y span) int { return cmp.Compare(x.off, y.off) })
		for i := 1; i < len(spans); i++ {
			if spans[i].off < spans[i-1].end {
				return fmt.Errorf("%w: segment %s: two replicas share the bytes at %d", errSnapshotInconsistent, sg.info.ID, spans[i].off)
			}
		}
	}
	return nil
}
