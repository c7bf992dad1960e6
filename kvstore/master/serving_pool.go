package master

// servingPool tallies the segments that take part in eviction's view of
// the pool (those not suspect): their capacity, their allocated bytes and
// how many are past their own high watermark. The master checks the
// watermarks after every call (Server.do); kept current on every change,
// the tally makes that check cost the same with ten segments or ten
// thousand, where a walk of every segment on every call made a heartbeat
// cost grow with the pool.
//
// Every change to a segment that the tally reads goes through State:
// allocateIn and freeIn for its allocation, setSuspect for its flag, mount and
// unmount for its membership, and recountServing after a snapshot is
// decoded.
type servingPool struct {
	capacity, allocated uint64
	overfull            int
}

// add counts sg in the tally as it is now (nothing when suspect).
func (p *servingPool) add(sg *segment) {
	if sg.suspect {
		return
	}
	p.capacity += sg.alloc.Size()
	p.allocated += sg.alloc.Allocated()
	if sg.overfull() {
		p.overfull++
	}
}

// remove takes sg out of the tally; sg must be as it was when added.
func (p *servingPool) remove(sg *segment) {
	if sg.suspect {
		return
	}
	p.capacity -= sg.alloc.Size()
	p.allocated -= sg.alloc.Allocated()
	if sg.overfull() {
		p.overfull--
	}
}

// allocateIn reserves n bytes of sg (Allocator.Allocate), keeping the
// serving tally current.
func (s *State) allocateIn(sg *segment, n uint64) (off uint64, ok bool) {
	s.serving.remove(sg)
	off, ok = sg.alloc.Allocate(n)
	s.serving.add(sg)
	return off, ok
}

// freeIn releases the n bytes of sg at off (Allocator.Free), keeping the
// serving tally current.
func (s *State) freeIn(sg *segment, off, n uint64) {
	s.serving.remove(sg)
	sg.alloc.Free(off, n)
	s.serving.add(sg)
}

// recountServing rebuilds the tally from every segment.
func (s *State) recountServing() {
	s.serving = servingPool{}
	for _, sg := range s.segOrder {
		s.serving.add(sg)
	}
}
