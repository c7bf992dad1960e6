package master

import (
	"cmp"
	"slices"
)

// maxScan caps how many segments the random walk visits, as upstream's
// random allocation strategy does (min(100, #segments)).
const maxScan = 100

// allocate reserves, for a write by client writer, up to cfg.ReplicaNum
// buffers of size bytes, each on a
// distinct segment, following upstream's "random" strategy: preferred
// segments first (in the order given), then preferred storage owners,
// then the writer's own segments when PreferLocal is set, then segments on
// the writer's host when PreferSameNode is set, then either the RouteTopK
// open segments with the most free space (a routed write) or a walk over
// consecutive segments from a random start. Segments that are not ACTIVE,
// or whose client is suspect, are skipped. It returns what it got (possibly fewer than asked, possibly
// none); new replicas are PROCESSING.
func (s *State) allocate(writer string, size uint64, cfg ReplicateConfig) []*replica {
	want := cfg.ReplicaNum
	tried := make(map[*segment]bool)
	var out []*replica
	try := func(sg *segment) {
		if len(out) >= want || tried[sg] || !sg.open() {
			return
		}
		tried[sg] = true
		off, ok := s.allocateIn(sg, size)
		if !ok {
			return
		}
		s.nextReplica++
		out = append(out, &replica{id: s.nextReplica, status: ReplicaProcessing, seg: sg, off: off, size: size})
	}
	tryWhere := func(match func(*segment) bool) {
		for _, sg := range s.segOrder {
			if match(sg) {
				try(sg)
			}
		}
	}
	for _, name := range cfg.PreferredSegments {
		tryWhere(func(sg *segment) bool { return sg.info.Name == name || sg.info.ID == name })
	}
	for _, owner := range cfg.PreferredOwners {
		tryWhere(func(sg *segment) bool { return sg.info.Name == owner || sg.client == owner })
	}
	if cfg.PreferLocal {
		tryWhere(func(sg *segment) bool { return sg.client == writer })
	}
	if cfg.PreferSameNode && cfg.HostID != "" {
		tryWhere(func(sg *segment) bool { return sg.info.HostID == cfg.HostID })
	}
	if cfg.RouteTopK > 0 {
		for _, sg := range s.routeCandidates(cfg.RouteTopK) {
			try(sg)
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

// routeCandidates returns the k ACTIVE segments with the most free bytes
// (ties in mount order), most free first: where a routed write goes.
func (s *State) routeCandidates(k int) []*segment {
	var open []*segment
	for _, sg := range s.segOrder {
		if sg.open() {
			open = append(open, sg)
		}
	}
	slices.SortStableFunc(open, func(a, b *segment) int {
		return cmp.Compare(b.alloc.FreeBytes(), a.alloc.FreeBytes())
	})
	return open[:min(k, len(open))]
}
