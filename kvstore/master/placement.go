package master

// maxScan caps how many segments the random walk visits, as upstream's
// random allocation strategy does (min(100, #segments)).
const maxScan = 100

// allocate reserves up to cfg.ReplicaNum buffers of size bytes, each on a
// distinct segment, following upstream's "random" strategy: preferred
// segments first (in the order given), then segments on the writer's host
// when PreferSameNode is set, then a walk over consecutive segments from a
// random start. Draining segments are skipped. It returns what it got (possibly fewer than asked, possibly
// none); new replicas are PROCESSING.
func (s *State) allocate(size uint64, cfg ReplicateConfig) []*replica {
	want := cfg.ReplicaNum
	tried := make(map[*segment]bool)
	var out []*replica
	try := func(sg *segment) {
		if len(out) >= want || tried[sg] || sg.draining {
			return
		}
		tried[sg] = true
		off, ok := sg.alloc.Allocate(size)
		if !ok {
			return
		}
		s.nextReplica++
		out = append(out, &replica{id: s.nextReplica, status: ReplicaProcessing, seg: sg, off: off, size: size})
	}
	for _, name := range cfg.PreferredSegments {
		for _, sg := range s.segOrder {
			if sg.info.Name == name || sg.info.ID == name {
				try(sg)
			}
		}
	}
	if cfg.PreferSameNode && cfg.HostID != "" {
		for _, sg := range s.segOrder {
			if sg.info.HostID == cfg.HostID {
				try(sg)
			}
		}
	}
	if n := len(s.segOrder); n > 0 && len(out) < want {
		start := s.rng.Intn(n)
		for i := range min(maxScan, n) {
			try(s.segOrder[(start+i)%n])
		}
	}
	return out
}
