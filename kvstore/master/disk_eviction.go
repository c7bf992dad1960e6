package master

// evictObject applies one eviction decision to o, a candidate an
// eviction run selected, and reports whether memory was given up.
// Without the disk tier the object is erased. With it:
//
//   - an object with a disk copy loses only its memory replicas and stays
//     readable from disk;
//   - with offload on evict, an object without one gets its offload
//     queued instead (at most offloads more in this run) and keeps its
//     memory until the copy is recorded; when that cannot be queued it is
//     kept, or erased if ForceEvict;
//   - otherwise (offload on write) it is erased: its offload was skipped.
//
// Objects without memory replicas give nothing up.
func (s *State) evictObject(o *object, offloads *int) bool {
	if len(o.replicas) == 0 {
		return false
	}
	if s.evictMemoryOnly(o) {
		return true // a DISK replica on the shared file system keeps it
	}
	off := s.cfg.Offload
	switch {
	case !off.Enable:
	case len(o.md().disk) > 0:
		for _, r := range o.replicas {
			s.freeReplica(r)
		}
		o.replicas = nil
		s.charge(o)
		return true
	case off.OnEvict:
		if *offloads > 0 && s.queueOffloadFromHolder(o) {
			*offloads--
			return false
		}
		if !off.ForceEvict {
			return false
		}
	}
	s.erase(o)
	return true
}

// queueOffloadFromHolder queues o's offload to the disk of a client
// holding one of its memory replicas; false if none has a disk or the
// queue is full.
func (s *State) queueOffloadFromHolder(o *object) bool {
	for _, r := range o.replicas {
		if d, ok := s.disk.disks[r.seg.client]; ok {
			return s.queueOffload(d, o)
		}
	}
	return false
}

// memoryObjects counts the objects holding memory replicas (eviction's
// population): the tenants' object counts, which charge keeps.
func (s *State) memoryObjects() int {
	n := 0
	for _, t := range s.tenants {
		n += t.objects
	}
	return n
}
