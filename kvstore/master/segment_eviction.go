package master

import (
	"math/bits"
	"slices"
	"time"
)

// Segment watermarks: a client can give each of its segments an eviction
// high and low watermark (percent of the segment's size, Store-RS's
// eviction_high/low_watermark_percent). Independently of the pool-wide
// watermark, an eviction run empties every segment past its high mark
// down to its low mark.

// overfull reports whether sg is past its high watermark; a suspect
// segment never is (eviction leaves what it holds alone).
func (sg *segment) overfull() bool {
	return !sg.suspect && sg.info.HighWatermark > 0 && cmpPercent(sg.alloc.Allocated(), sg.info.HighWatermark, sg.alloc.Size()) > 0
}

// belowLow reports whether sg is at or below its low watermark.
func (sg *segment) belowLow() bool {
	return cmpPercent(sg.alloc.Allocated(), sg.info.LowWatermark, sg.alloc.Size()) <= 0
}

// cmpPercent compares allocated×100 with percent×size in 128 bits, so a
// segment of many EiB (or a percent from a uint32 field) cannot wrap the
// products: -1, 0 or +1. A negative percent counts as 0.
func cmpPercent(allocated uint64, percent int, size uint64) int {
	ah, al := bits.Mul64(allocated, 100)
	bh, bl := bits.Mul64(uint64(max(percent, 0)), size)
	switch {
	case ah != bh:
		return cmpU64(ah, bh)
	default:
		return cmpU64(al, bl)
	}
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// anySegmentOverfull reports whether some segment is past its high
// watermark.
func (s *State) anySegmentOverfull() bool { return s.serving.overfull > 0 }

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
		for !sg.belowLow() {
			var o *object
			switch {
			case plain.Len() > 0:
				o = plain.next()
			case soft.Len() > 0 && s.cfg.AllowEvictSoftPinned:
				o = soft.next()
			}
			if o == nil {
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
