package master

import (
	"container/heap"
	"time"
)

// leaseIndex orders the objects eviction may take by lease deadline, ties
// broken by key, so that an eviction round visits the oldest leases only
// instead of scanning and sorting the table. It is a min-heap of entries
// each holding the lease its object had when the entry was pushed: a
// lease only grows (grantLease), so an entry is never later than its
// object's lease, and a round that pops an outdated entry pushes the
// object again with its lease of now. Reads push nothing.
//
// Every object in the table with memory replicas, no write open and no
// hard pin (a hard pin is never dropped) has one entry (object.indexed):
// publishWrite pushes it when its write ends, with the lease that gives
// it, and charge, which runs after every change to an object's replicas,
// when it is not yet there. A round drops the entries of objects left
// without memory replicas, hard-pinned or written again (their next
// publishWrite or charge brings them back). The entry of an object that
// left the table (object.inTable) stays until popped or until the heap
// holds twice the table (compactLeases).
type leaseIndex struct{ es []leaseEntry }

type leaseEntry struct {
	lease stamp
	o     *object
}

func (x *leaseIndex) Len() int { return len(x.es) }
func (x *leaseIndex) Less(i, j int) bool {
	a, b := &x.es[i], &x.es[j]
	if a.lease != b.lease {
		return a.lease < b.lease
	}
	return a.o.key < b.o.key
}
func (x *leaseIndex) Swap(i, j int) { x.es[i], x.es[j] = x.es[j], x.es[i] }

// Push is heap.Interface's: use State.indexLease.
func (x *leaseIndex) Push(e any) { x.es = append(x.es, e.(leaseEntry)) }

// Pop is heap.Interface's: use State.nextCandidate.
func (x *leaseIndex) Pop() any {
	e := x.es[len(x.es)-1]
	x.es[len(x.es)-1] = leaseEntry{}
	x.es = x.es[:len(x.es)-1]
	return e
}

// indexLease gives o an entry in the lease index if it should have one
// and has none.
func (s *State) indexLease(o *object) {
	if o.indexed || !o.inTable || o.hardPin || o.writing || len(o.replicas) == 0 {
		return
	}
	if len(s.leases.es) >= 2*s.objects.len()+1024 {
		s.compactLeases()
	}
	o.indexed = true
	heap.Push(&s.leases, leaseEntry{o.lease, o})
}

// compactLeases drops the entries of objects no longer in the table.
func (s *State) compactLeases() {
	kept := s.leases.es[:0]
	for _, e := range s.leases.es {
		if e.o.inTable {
			kept = append(kept, e)
		}
	}
	clear(s.leases.es[len(kept):])
	s.leases.es = kept
	heap.Init(&s.leases)
}

// rebuildLeases indexes every object of the table anew (after a restore).
func (s *State) rebuildLeases() {
	s.leases.es = s.leases.es[:0]
	for o := range s.objects.all() {
		o.indexed = false
		if !o.hardPin && !o.writing && len(o.replicas) > 0 {
			o.indexed = true
			s.leases.es = append(s.leases.es, leaseEntry{o.lease, o})
		}
	}
	heap.Init(&s.leases)
}

// nextCandidate pops the lease index up to the next object eviction may
// take at now, oldest lease first (ties by key), and returns it with
// soft false, or true when it is soft-pinned; nil when no object with an
// expired lease is left. Objects that may not go now (a write open, being
// offloaded, a replica on a suspect segment) are added to aside; the
// caller hands them, and every returned object it keeps, to indexLease.
func (s *State) nextCandidate(now time.Time, aside *[]*object) (o *object, soft bool) {
	limit := stampOf(now)
	for len(s.leases.es) > 0 && s.leases.es[0].lease <= limit {
		e := heap.Pop(&s.leases).(leaseEntry)
		o := e.o
		if !o.inTable {
			continue
		}
		o.indexed = false
		switch {
		case o.hardPin || len(o.replicas) == 0:
			// out of the index until charge brings it back
		case e.lease != o.lease:
			s.indexLease(o) // read since: back in at its lease of now
		case !o.allComplete() || o.offloading || o.onSuspect():
			*aside = append(*aside, o)
		default:
			return o, o.softPinned(now)
		}
	}
	return nil, false
}
