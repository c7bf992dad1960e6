package master

// evictObject applies one eviction decision to o, a candidate an
// eviction run selected, and reports whether memory was given up.
// With offload on evict, an object without a LOCAL_DISK copy first gets
// its offload queued (at most offloads more in this run) and keeps its
// memory until the copy is recorded, even when a DISK replica on the
// shared file system (--root_fs_dir) holds it too, as upstream's
// promotion tests expect. Otherwise:
//
//   - an object with a DISK replica on the shared file system, or with a
//     LOCAL_DISK copy, loses only its memory replicas and stays readable
//     from disk;
//   - without the disk tier it is erased;
//   - with offload on evict, when its offload cannot be queued it is
//     kept, or erased if ForceEvict;
//   - otherwise (offload on write) it is erased: its offload was skipped.
//
// Objects without memory replicas give nothing up.
func (s *State) evictObject(o *object, offloads *int) bool {
	if len(o.replicas) == 0 {
		return false
	}
	off := s.cfg.Offload
	if off.Enable && off.OnEvict && len(o.md().disk) == 0 && *offloads > 0 && s.queueOffloadFromHolder(o) {
		*offloads--
		return false
	}
	if s.evictMemoryOnly(o) {
		return true // a DISK replica on the shared file system keeps it
	}
	switch {
	case !off.Enable:
	case len(o.md().disk) > 0:
		for _, r := range o.replicas {
			s.freeReplica(r)
		}
		o.replicas = nil
		s.charge(o)
		return true
	case off.OnEvict && !off.ForceEvict:
		return false
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
