package master

import (
	"slices"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// SegmentMode is where a segment stands in its lifecycle (the Store-RS
// fleet operations; numbered as the proto enum).
type SegmentMode int

// Segment modes. Only ACTIVE takes new replicas; every mode serves reads.
const (
	// SegmentActive takes new replicas and serves reads.
	SegmentActive SegmentMode = 0
	// SegmentStandby serves reads only: a pause, its replicas stay.
	SegmentStandby SegmentMode = 1
	// SegmentDraining serves reads only while its replicas are moved to
	// other segments (EvacuateSegment).
	SegmentDraining SegmentMode = 2
	// SegmentRetired is draining for good: it cannot become ACTIVE again
	// and leaves the pool when its client unmounts it.
	SegmentRetired SegmentMode = 3
)

var segmentModeNames = [...]string{"ACTIVE", "STANDBY", "DRAINING", "RETIRED"}

// String returns the mode's name (ACTIVE, ...).
func (m SegmentMode) String() string {
	if m >= 0 && int(m) < len(segmentModeNames) {
		return segmentModeNames[m]
	}
	return "UNDEFINED"
}

// ParseSegmentMode reads a mode name, case-insensitively.
func ParseSegmentMode(name string) (SegmentMode, bool) {
	i := slices.Index(segmentModeNames[:], strings.ToUpper(name))
	return SegmentMode(i), i >= 0
}

// takesReplicas reports whether new replicas may be placed on a segment
// in this mode.
func (m SegmentMode) takesReplicas() bool { return m == SegmentActive }

// ownSegment returns clientID's segment segID, or nil.
func (s *State) ownSegment(clientID, segID string) *segment {
	sg, ok := s.segments[segID]
	if !ok || sg.client != clientID {
		return nil
	}
	return sg
}

// SetSegmentMode moves clientID's segment segID to mode. RETIRED is
// final: leaving it is UNAVAILABLE_IN_CURRENT_STATUS. An unknown mode is
// INVALID_PARAMS; another client's or an unknown segment is
// SEGMENT_NOT_FOUND. Like DrainSegment, the mode lives in this master's
// memory; the client sets it again after a remount.
func (s *State) SetSegmentMode(clientID, segID string, mode SegmentMode, now time.Time) kvstore.ErrorCode {
	return s.m.result("set_segment_mode", s.setSegmentMode(clientID, segID, mode, now))
}

func (s *State) setSegmentMode(clientID, segID string, mode SegmentMode, now time.Time) kvstore.ErrorCode {
	if mode.String() == "UNDEFINED" {
		return kvstore.InvalidParams
	}
	sg := s.ownSegment(clientID, segID)
	if sg == nil {
		return kvstore.SegmentNotFound
	}
	s.touch(clientID, now)
	if sg.mode == SegmentRetired && mode != SegmentRetired {
		return kvstore.UnavailableInCurrentStatus
	}
	sg.mode = mode
	s.closeReservations(sg, now)
	return kvstore.OK
}

// Evacuation is what one EvacuateSegment pass found and did.
type Evacuation struct {
	Remaining   int // replicas still on the segment, complete or being written
	Moving      int // move tasks off the segment in flight
	Started     int // move tasks this pass started
	Dropped     int // replicas dropped: no room for a copy, but one outlives the client
	Unplaceable int // objects whose only replica is here and fits nowhere else
	Quarantined int // moved or dropped buffers readers may still hold
	// Tasks are the move tasks this pass started (Started of them).
	Tasks []TaskID
}

// Done reports whether the segment is empty and no reader can still
// hold one of its buffers: it may then be unmounted without failing a
// read.
func (e Evacuation) Done() bool { return e.Remaining == 0 && e.Moving == 0 && e.Quarantined == 0 }

// EvacuateSegment runs one evacuation pass over clientID's segment segID,
// which must not be ACTIVE (UNAVAILABLE_IN_CURRENT_STATUS; new replicas
// would keep arriving): every COMPLETE replica on it that no task moves
// yet gets a move task to another ACTIVE segment that holds no replica of
// the object (executed by clientID, which holds the source). When no
// segment has room for a copy, a replica is dropped only if the object
// stays readable once clientID has left (survivesDeparture: another
// memory replica, or a disk copy on another client's disk); otherwise it
// stays, as unplaceable, and the drain waits as it would without a disk
// tier. Moved and dropped buffers stay reserved until the object's
// read lease ends, so reads already routed to them succeed. Calling it
// again picks up what earlier passes could not place and replicas whose
// writes completed since; the drain is over when Done.
func (s *State) EvacuateSegment(clientID, segID string, now time.Time) (Evacuation, kvstore.ErrorCode) {
	return s.EvacuateSegmentLimited(clientID, segID, now, EvacuationLimits{MaxStarts: -1})
}

// EvacuationLimits bounds one evacuation pass (a drain job's
// max_concurrency and target_segments).
type EvacuationLimits struct {
	// MaxStarts is how many move tasks the pass may start; below zero, no
	// limit. Replicas beyond it are left for a later pass, neither moved
	// nor dropped.
	MaxStarts int
	// Targets, when not nil, is the set of segment ids copies may go to;
	// the other ACTIVE segments are not used.
	Targets map[string]bool
}

// EvacuateSegmentLimited is EvacuateSegment within lim.
func (s *State) EvacuateSegmentLimited(clientID, segID string, now time.Time, lim EvacuationLimits) (Evacuation, kvstore.ErrorCode) {
	ev, code := s.evacuateSegment(clientID, segID, now, lim)
	return ev, s.m.result("evacuate_segment", code)
}

func (s *State) evacuateSegment(clientID, segID string, now time.Time, lim EvacuationLimits) (Evacuation, kvstore.ErrorCode) {
	sg := s.ownSegment(clientID, segID)
	if sg == nil {
		return Evacuation{}, kvstore.SegmentNotFound
	}
	if sg.mode.takesReplicas() {
		return Evacuation{}, kvstore.UnavailableInCurrentStatus
	}
	s.touch(clientID, now)
	moving := s.movingFrom(sg)
	var ev Evacuation
	for _, key := range s.sortedKeys() {
		o := s.objects.get(key)
		if o.writing { // the next pass moves what the write publishes
			continue
		}
		for _, r := range slices.Clone(o.replicas) {
			if r.seg != sg || r.status != ReplicaComplete || moving[r] {
				continue
			}
			if lim.MaxStarts >= 0 && ev.Started >= lim.MaxStarts {
				continue // at the job's concurrency limit: a later pass moves it
			}
			targets := s.copyTargets(o)
			if lim.Targets != nil {
				targets = slices.DeleteFunc(targets, func(t *segment) bool { return !lim.Targets[t.info.ID] })
			}
			if id, code := s.newTask(TaskReplicaMove, o, r, [][]*segment{targets}, now); code == kvstore.OK {
				ev.Started++
				ev.Tasks = append(ev.Tasks, id)
				continue
			}
			if s.survivesDeparture(o, r) {
				s.dropReplica(o, r, now)
				ev.Dropped++
			} else {
				ev.Unplaceable++
			}
		}
	}
	for o := range s.objects.all() {
		for _, r := range o.replicas {
			if r.seg == sg {
				ev.Remaining++
			}
		}
	}
	ev.Moving = len(s.movingFrom(sg))
	for _, d := range s.discarded {
		if d.seg == sg {
			ev.Quarantined++
		}
	}
	return ev, kvstore.OK
}

// survivesDeparture reports whether o stays readable without r and
// without anything else r's client owns on disk: another COMPLETE memory
// replica (a segment of its own, drained on its own turn), or a
// LOCAL_DISK copy on another client's disk. A copy on the leaving
// client's own disk goes with it, so it does not count.
func (s *State) survivesDeparture(o *object, r *replica) bool {
	for _, other := range o.readable() {
		if other != r {
			return true
		}
	}
	return slices.ContainsFunc(o.md().disk, func(d diskReplica) bool { return d.client != r.seg.client })
}

// movingFrom returns the source replicas of unfinished tasks reading
// from sg.
func (s *State) movingFrom(sg *segment) map[*replica]bool {
	out := map[*replica]bool{}
	for _, t := range s.tasks {
		if !t.final() && t.source.seg == sg {
			out[t.source] = true
		}
	}
	return out
}

// copyTargets lists the ACTIVE segments that hold no replica of o, from a
// random start: where a copy of o may go.
func (s *State) copyTargets(o *object) []*segment {
	n := len(s.segOrder)
	if n == 0 {
		return nil
	}
	var out []*segment
	start := s.rng.Intn(n)
	for i := range n {
		sg := s.segOrder[(start+i)%n]
		if sg.open() && !slices.ContainsFunc(o.replicas, func(r *replica) bool { return r.seg == sg }) {
			out = append(out, sg)
		}
	}
	return out
}

// dropReplica removes r from o, keeping its buffer until o's read lease
// ends.
func (s *State) dropReplica(o *object, r *replica, now time.Time) {
	o.replicas = slices.DeleteFunc(o.replicas, func(x *replica) bool { return x == r })
	s.discard(r, latest(now, o.lease.time()))
	s.charge(o)
}

// latest returns the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// HandoffItem is where one replica would go if its segment were
// evacuated now.
type HandoffItem struct {
	Key           string // object key (tenant- and namespace-qualified)
	Size          uint64
	From          Segment
	To            *Segment // nil: no other segment has room
	OtherReplicas int      // readable replicas that outlive the segments: other segments, other clients' disk copies
}

// PlanHandoff is a dry run of evacuating clientID's segments segIDs (all
// of them when empty): for each COMPLETE replica on them, in key order,
// the segment a move would pick now, as if the earlier moves had taken
// their room. Nothing changes. An unknown segment, or another client's,
// is SEGMENT_NOT_FOUND.
func (s *State) PlanHandoff(clientID string, segIDs []string) ([]HandoffItem, kvstore.ErrorCode) {
	items, code := s.planHandoff(clientID, segIDs)
	return items, s.m.result("plan_handoff", code)
}

func (s *State) planHandoff(clientID string, segIDs []string) ([]HandoffItem, kvstore.ErrorCode) {
	leaving := map[*segment]bool{}
	if len(segIDs) == 0 {
		if c, ok := s.clients[clientID]; ok {
			segIDs = c.segments
		}
	}
	for _, id := range segIDs {
		sg := s.ownSegment(clientID, id)
		if sg == nil {
			return nil, kvstore.SegmentNotFound
		}
		leaving[sg] = true
	}
	type held struct {
		sg     *segment
		off, n uint64
	}
	var reserved []held
	defer func() {
		for _, h := range reserved {
			s.freeIn(h.sg, h.off, h.n)
		}
	}()
	var items []HandoffItem
	for _, key := range s.sortedKeys() {
		o := s.objects.get(key)
		for _, r := range o.replicas {
			if !leaving[r.seg] || r.status != ReplicaComplete {
				continue
			}
			it := HandoffItem{Key: key, Size: o.size, From: r.seg.info}
			for _, d := range o.md().disk {
				if d.client != clientID {
					it.OtherReplicas++
				}
			}
			for _, other := range o.readable() {
				if !leaving[other.seg] {
					it.OtherReplicas++
				}
			}
			for _, sg := range s.copyTargets(o) {
				if leaving[sg] {
					continue
				}
				if off, ok := s.allocateIn(sg, o.size); ok {
					reserved = append(reserved, held{sg, off, o.size})
					info := sg.info
					it.To = &info
					break
				}
			}
			items = append(items, it)
		}
	}
	return items, kvstore.OK
}
