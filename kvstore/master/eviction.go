package master

import (
	"container/heap"
	"math"
	"slices"
	"time"
)

// EvictionPlan is the outcome of the watermark arithmetic for one run.
type EvictionPlan struct {
	// Triggered says whether eviction runs: used ratio above the high
	// watermark, or an allocation failed and EvictionRatio > 0.
	Triggered bool
	// UsedRatio is allocated / capacity at the time of the run.
	UsedRatio float64
	// Target is the fraction of objects pass 1 evicts:
	// max(ratio, used - watermark + ratio).
	Target float64
	// LowerBound is the fraction pass 2 tops up to:
	// max(Target/2, used - watermark).
	LowerBound float64
}

// PlanEviction applies upstream's formulas (EvictionThreadFunc) to a used
// ratio.
func PlanEviction(used, highWatermark, ratio float64, needEviction bool) EvictionPlan {
	p := EvictionPlan{UsedRatio: used}
	if !(used > highWatermark || (needEviction && ratio > 0)) {
		return p
	}
	p.Triggered = true
	p.Target = max(ratio, used-highWatermark+ratio)
	p.LowerBound = max(p.Target*0.5, used-highWatermark)
	return p
}

// EvictionResult reports one eviction run.
type EvictionResult struct {
	Plan       EvictionPlan
	Evicted    []string // keys evicted, in eviction order
	FreedBytes uint64
}

// ceilCount is ceil(n*f), tolerant of floating point noise (20*0.05 is 1).
func ceilCount(n int, f float64) int {
	if f <= 0 {
		return 0
	}
	return int(math.Ceil(float64(n)*f - 1e-9))
}

// Evict runs one eviction round at now, as upstream's BatchEvict: with N
// the number of objects, pass 1 evicts up to ceil(N*Target) candidates
// that are not soft-pinned, oldest lease deadline first (approximate LRU,
// ties broken by key); if fewer than ceil(N*LowerBound) went, pass 2 tops
// up from the remaining unpinned candidates and then, when
// AllowEvictSoftPinned, the soft-pinned ones, oldest lease first.
// Candidates are fully written objects whose lease has expired and that
// are not hard-pinned, being offloaded nor held in part by a suspect
// segment; with the disk tier an evicted object may lose only its memory
// replicas (see evictObject). The used ratio leaves the suspect segments
// out (servingUsage). The need-eviction flag is cleared. Candidates come
// from the lease index (lease_index.go) in order, so a round visits the
// objects it takes and those it must skip, not the table.
func (s *State) Evict(now time.Time) EvictionResult {
	capacity, allocated := s.servingUsage()
	used := 0.0
	if capacity > 0 {
		used = float64(allocated) / float64(capacity)
	}
	plan := PlanEviction(used, s.cfg.EvictionHighWatermarkRatio, s.cfg.EvictionRatio, s.needEviction)
	s.needEviction = false
	res := EvictionResult{Plan: plan}
	s.evictOverfullSegments(now, &res)
	if !plan.Triggered {
		return res
	}
	s.m.evictionRuns++

	n := s.memoryObjects()
	target, lower := ceilCount(n, plan.Target), ceilCount(n, plan.LowerBound)
	offloads := s.cfg.Offload.evictCap()
	var aside, soft []*object // popped from the lease index, not (yet) evicted
	evict := func(o *object) {
		freed := o.size * uint64(len(o.replicas))
		if s.evictObject(o, &offloads) {
			res.Evicted = append(res.Evicted, o.key)
			res.FreedBytes += freed
		} else {
			aside = append(aside, o)
		}
	}
	// Unpinned candidates up to the target, or on to the lower bound when
	// that is higher.
	for len(res.Evicted) < max(target, lower) {
		o, pinned := s.nextCandidate(now, &aside)
		if o == nil {
			break
		}
		if pinned {
			soft = append(soft, o)
		} else {
			evict(o)
		}
	}
	// Soft-pinned objects go only when every unpinned candidate went and
	// the lower bound is not reached; soft then holds every soft-pinned
	// candidate, in lease order.
	i := 0
	for ; s.cfg.AllowEvictSoftPinned && i < len(soft) && len(res.Evicted) < lower; i++ {
		evict(soft[i])
	}
	for _, o := range append(aside, soft[i:]...) {
		s.indexLease(o)
	}
	s.m.evictedKeys += uint64(len(res.Evicted))
	s.m.evictedBytes += res.FreedBytes
	return res
}

// evictionCandidates returns the objects eviction may take at now (fully
// written, lease expired, not hard-pinned nor being offloaded, no replica
// on a suspect segment) for which keep is true (nil: all), split into
// unpinned and soft-pinned ones, each a queue that hands them out oldest
// lease first.
func (s *State) evictionCandidates(now time.Time, keep func(*object) bool) (plain, soft *candidateQueue) {
	plain, soft = &candidateQueue{}, &candidateQueue{}
	for o := range s.objects.all() {
		if o.hardPin || o.leased(now) || !o.allComplete() || o.offloading || o.onSuspect() || (keep != nil && !keep(o)) {
			continue
		}
		if o.softPinned(now) {
			soft.os = append(soft.os, o)
		} else {
			plain.os = append(plain.os, o)
		}
	}
	heap.Init(plain)
	heap.Init(soft)
	return plain, soft
}

// candidateQueue is a min-heap of eviction candidates by lease deadline
// (approximate LRU), ties broken by key: built in linear time, it sorts
// only as many candidates as a round takes (a round takes a few percent
// of them), where sorting them all cost O(n log n) under the master lock.
type candidateQueue struct{ os []*object }

func (q *candidateQueue) Len() int { return len(q.os) }
func (q *candidateQueue) Less(i, j int) bool {
	a, b := q.os[i], q.os[j]
	if a.lease != b.lease {
		return a.lease < b.lease
	}
	return a.key < b.key
}
func (q *candidateQueue) Swap(i, j int) { q.os[i], q.os[j] = q.os[j], q.os[i] }

// Push is heap.Interface's; the queue is filled before heap.Init only.
func (q *candidateQueue) Push(x any) { q.os = append(q.os, x.(*object)) }

// Pop is heap.Interface's: use next.
func (q *candidateQueue) Pop() any {
	o := q.os[len(q.os)-1]
	q.os[len(q.os)-1] = nil
	q.os = q.os[:len(q.os)-1]
	return o
}

// next removes and returns the oldest-lease candidate; Len must be > 0.
func (q *candidateQueue) next() *object { return heap.Pop(q).(*object) }

// onSuspect reports whether a replica of o is on a suspect segment:
// eviction leaves such an object alone, as it would free no room that
// takes new replicas and may drop the only reachable copy later.
func (o *object) onSuspect() bool {
	return slices.ContainsFunc(o.replicas, func(r *replica) bool { return r.seg.suspect })
}

// servingUsage is usage without the suspect segments: the pool whose
// fullness eviction watches.
func (s *State) servingUsage() (capacity, allocated uint64) {
	return s.serving.capacity, s.serving.allocated
}

// usage returns the total capacity and allocated bytes of all segments.
func (s *State) usage() (capacity, allocated uint64) {
	for _, sg := range s.segOrder {
		capacity += sg.alloc.Size()
		allocated += sg.alloc.Allocated()
	}
	return capacity, allocated
}

// NeedEviction reports whether an allocation failed since the last
// eviction run (the server uses it to wake the eviction loop).
func (s *State) NeedEviction() bool { return s.needEviction }

// softPinned reports whether the object's soft pin is in force at now.
func (o *object) softPinned(now time.Time) bool {
	return o.md().softPinTTL > 0 && o.md().softPinUntil != 0 && now.Before(o.md().softPinUntil.time())
}

// AboveHighWatermark reports whether allocated/capacity of the segments
// that are not suspect exceeds the eviction high watermark, or a segment
// its own (the conditions that trigger an eviction run).
func (s *State) AboveHighWatermark() bool {
	capacity, allocated := s.servingUsage()
	return capacity > 0 && float64(allocated)/float64(capacity) > s.cfg.EvictionHighWatermarkRatio ||
		s.anySegmentOverfull()
}
