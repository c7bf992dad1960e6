package master

import (
	"slices"
	"time"
)

// Segment watermarks: a client can give each of its segments an eviction
// high and low watermark (percent of the segment's size, Store-RS's
// eviction_high/low_watermark_percent). Independently of the pool-wide
// watermark, an eviction run empties every segment past its high mark
// down to its low mark.

// overfull reports whether sg is past its high watermark.
func (sg *segment) overfull() bool {
	hi := uint64(sg.info.HighWatermark)
	return hi > 0 && sg.alloc.Allocated()*100 > hi*sg.alloc.Size()
}

// belowLow reports whether sg is at or below its low watermark.
func (sg *segment) belowLow() bool {
	return sg.alloc.Allocated()*100 <= uint64(sg.info.LowWatermark)*sg.alloc.Size()
}

// anySegmentOverfull reports whether some segment is past its high
// watermark.
func (s *State) anySegmentOverfull() bool {
	return slices.ContainsFunc(s.segOrder, (*segment).overfull)
}

// evictOverfullSegments frees room on each segment past its high
// watermark until it is at or below its low one. Candidates are the
// objects with a replica there that eviction may take (fully written,
// lease expired, not hard-pinned; soft-pinned ones last and only when
// AllowEvictSoftPinned), oldest lease first. An object with replicas on
// other segments loses only the one here; otherwise it is evicted as a
// pool-wide run evicts it (evictObject: with the disk tier it may keep a
// disk copy, or be queued for offload and keep its memory for now). What
// goes is added to res.
func (s *State) evictOverfullSegments(now time.Time, res *EvictionResult) {
	offloads := s.cfg.Offload.evictCap()
	for _, sg := range s.segOrder {
		if !sg.overfull() {
			continue
		}
		plain, soft := s.evictionCandidates(now, func(o *object) bool { return replicaOn(o, []*segment{sg}) != nil })
		candidates := plain
		if s.cfg.AllowEvictSoftPinned {
			candidates = append(candidates, soft...)
		}
		for _, o := range candidates {
			if sg.belowLow() {
				break
			}
			r := replicaOn(o, []*segment{sg})
			if len(o.replicas) > 1 {
				o.replicas = slices.DeleteFunc(o.replicas, func(x *replica) bool { return x == r })
				s.freeReplica(r)
				s.charge(o)
				res.FreedBytes += o.size
				s.m.evictedBytes += o.size
				continue
			}
			if s.evictObject(o, &offloads) {
				res.Evicted = append(res.Evicted, o.key)
				res.FreedBytes += o.size
				s.m.evictedKeys++
				s.m.evictedBytes += o.size
			}
		}
	}
}
