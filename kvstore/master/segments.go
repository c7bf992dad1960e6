package master

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// segment is a mounted segment and its allocator.
type segment struct {
	info   Segment
	client string
	alloc  *Allocator
	mode   SegmentMode // lifecycle mode; only ACTIVE takes new replicas
	// suspect mirrors its client's suspect flag: the segment takes no new
	// replicas and keeps those it holds.
	suspect bool
}

// open reports whether new replicas may be placed on the segment: it is
// ACTIVE and its client is not suspect.
func (sg *segment) open() bool { return sg.mode.takesReplicas() && !sg.suspect }

// endpoint is the Transfer Engine segment that serves the segment's
// memory (its name when the client gave no endpoint, as describe()).
func (sg *segment) endpoint() string {
	if sg.info.TEEndpoint != "" {
		return sg.info.TEEndpoint
	}
	return sg.info.Name
}

// client is what the master knows of a client: when it was last heard
// from, whether it has remounted since this master started (upstream's
// ok_client_ set), whether it is suspect, and the ids of its segments.
type client struct {
	id       string
	lastSeen time.Time
	ok       bool
	// suspect marks a client silent for longer than ClientTTL but not yet
	// ClientDeadTTL: its segments take no new replicas; the first call
	// heard from it again restores it.
	suspect  bool
	segments []string
	// key is the SHA-256 of the secret the client registered with, when
	// keyed (client_identity.go).
	key   clientKey
	keyed bool
}

// Suspect clients. A client silent for longer than ClientTTL may only be
// cut off from the master (a partition, a stopped process) with its memory
// intact, so ExpireClients first makes it suspect: its segments get no new
// replicas and no reservations, eviction leaves what they hold alone, and
// reads still list their replicas (after the others). The client's next
// call that touches its record (a ping, mount, remount, reservation...)
// restores it: its client id is drawn per process, so a call with
// the same id comes from the process that holds the memory. The replicas
// are forgotten only when the memory is really gone:
//   - the client stays silent past ClientDeadTTL (ExpireClients);
//   - it unmounts the segment, or remounts the segment's id with another
//     base, size, endpoint or incarnation (mount);
//   - a segment is mounted on the same endpoint with another incarnation:
//     another process serves that endpoint now (mount);
//   - a ping carries another incarnation than the segment's (Ping).
// Incarnation 0 (a client that does not tell) matches any.

// touch records that clientID was heard from at now, creating its record;
// a suspect client is restored.
func (s *State) touch(clientID string, now time.Time) *client {
	c, ok := s.clients[clientID]
	if !ok {
		c = &client{id: clientID}
		s.clients[clientID] = c
	}
	if now.After(c.lastSeen) {
		c.lastSeen = now
	}
	if c.suspect {
		s.setSuspect(c, false, now)
		s.m.restoredClients++
	}
	return c
}

// setSuspect marks c and its segments suspect (closing the reservations
// in them) or restores them.
func (s *State) setSuspect(c *client, suspect bool, now time.Time) {
	c.suspect = suspect
	for _, id := range c.segments {
		sg := s.segments[id]
		s.serving.remove(sg)
		sg.suspect = suspect
		s.serving.add(sg)
		s.closeReservations(sg, now)
	}
}

// otherIncarnation reports whether a and b are both known and differ.
func otherIncarnation(a, b uint64) bool { return a != 0 && b != 0 && a != b }

// plainName reports whether a client-chosen segment id, name or endpoint
// has no control characters and at most maxSegmentName bytes.
func plainName(s string) bool {
	if len(s) > maxSegmentName {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// maxSegmentName bounds a segment's id, name and endpoint.
const maxSegmentName = 1024

// MountSegment adds seg to the pool on behalf of clientID. Mounting a
// segment id the same client already mounted with the same name, base,
// size, endpoint and incarnation is a no-op (OK); with any of them
// changed, the memory is another: the old segment is unmounted (its
// replicas dropped) and seg mounted. Segments of any client on seg's
// endpoint with another incarnation are unmounted too. An id held
// by another client is SEGMENT_ALREADY_EXISTS; an empty id, a zero size or
// a zero base address is INVALID_PARAMS (as upstream), and so are an id,
// name or endpoint with a control character or over 1 KiB, and a segment
// whose end passes 2^64 or which takes the pool's capacity to 2^64 bytes. Mounting does not make the client "ok": its next Ping
// answers NEED_REMOUNT until it calls ReMountSegment (upstream behaviour).
func (s *State) MountSegment(clientID string, seg Segment, now time.Time) kvstore.ErrorCode {
	return s.m.result("mount_segment", s.mount(clientID, seg, now))
}

func (s *State) mount(clientID string, seg Segment, now time.Time) kvstore.ErrorCode {
	if clientID == "" || seg.ID == "" || seg.Size == 0 || seg.Base == 0 {
		return kvstore.InvalidParams
	}
	// Names are listed one per line (/get_all_segments) and logged: a
	// control character in one would forge lines there.
	if !plainName(seg.ID) || !plainName(seg.Name) || !plainName(seg.TEEndpoint) {
		return kvstore.InvalidParams
	}
	// Replica addresses are base + offset, and capacities, usage and
	// tenant charges are sums over the mounted segments: a segment that
	// ends past 2^64, or one that takes the pool's total past it, would
	// make them wrap.
	if _, carry := bits.Add64(seg.Base, seg.Size, 0); carry != 0 {
		return kvstore.InvalidParams
	}
	capacity, _ := s.usage()
	old, exists := s.segments[seg.ID]
	if exists {
		if old.client != clientID {
			return kvstore.SegmentAlreadyExists
		}
		s.touch(clientID, now)
		if sameMemory(old.info, seg) {
			return kvstore.OK
		}
		capacity -= old.alloc.Size()
	}
	if addSat(capacity, seg.Size) == math.MaxUint64 {
		return kvstore.InvalidParams
	}
	if exists {
		s.unmount(seg.ID, now)
		s.m.replacedSegments++
	}
	c := s.touch(clientID, now)
	sg := &segment{info: seg, client: clientID, alloc: NewAllocator(seg.Size)}
	s.retireIncarnations(sg, now)
	s.segments[seg.ID] = sg
	s.segOrder = append(s.segOrder, sg)
	s.serving.add(sg)
	c.segments = append(c.segments, seg.ID)
	return kvstore.OK
}

// sameMemory reports whether b, mounted under a's id, names the same memory:
// same name, base, size, endpoint and incarnation (0 matching any).
func sameMemory(a, b Segment) bool {
	return a.Name == b.Name && a.Base == b.Base && a.Size == b.Size && a.TEEndpoint == b.TEEndpoint &&
		!otherIncarnation(a.Incarnation, b.Incarnation)
}

// retireIncarnations unmounts the segments served by sg's endpoint whose
// incarnation differs from sg's: the endpoint belongs to another process
// now, and their memory is gone.
func (s *State) retireIncarnations(sg *segment, now time.Time) {
	var gone []string
	for _, old := range s.segOrder {
		if old.endpoint() == sg.endpoint() && otherIncarnation(old.info.Incarnation, sg.info.Incarnation) {
			gone = append(gone, old.info.ID)
		}
	}
	for _, id := range gone {
		s.unmount(id, now)
		s.m.replacedSegments++
	}
}

// ReMountSegment makes clientID's mounted segments exactly segs: segments
// it holds that are not listed are unmounted, listed ones not yet mounted
// are mounted, and those already mounted keep their objects. The client
// then counts as ok (Ping answers OK). The client's reserved blocks are
// dropped, their unused bytes quarantined: a client remounts when it
// believes the master restarted, and forgets its blocks then (a client's
// first remount after it started is such a case; its writes into the
// blocks may still be in flight). It returns the first error among the
// listed segments (the others are still mounted).
func (s *State) ReMountSegment(clientID string, segs []Segment, now time.Time) kvstore.ErrorCode {
	if clientID == "" {
		return s.m.result("remount_segment", kvstore.InvalidParams)
	}
	want := make(map[string]bool, len(segs))
	for _, sg := range segs {
		want[sg.ID] = true
	}
	c := s.touch(clientID, now)
	s.dropReservations(func(r *reservation) bool { return r.client == clientID }, s.quarantineRange(now))
	for _, id := range slices.Clone(c.segments) {
		if !want[id] {
			s.unmount(id, now)
		}
	}
	code := kvstore.OK
	for _, sg := range segs {
		if err := s.mount(clientID, sg, now); err != kvstore.OK && code == kvstore.OK {
			code = err
		}
	}
	c.ok = true
	return s.m.result("remount_segment", code)
}

// UnmountSegment removes clientID's segment segID: replicas on it are
// dropped, objects left without a replica disappear, and quarantined
// buffers on it are forgotten. An unknown id, or one of another client, is
// SEGMENT_NOT_FOUND.
func (s *State) UnmountSegment(clientID, segID string, now time.Time) kvstore.ErrorCode {
	sg, ok := s.segments[segID]
	if !ok || sg.client != clientID {
		return s.m.result("unmount_segment", kvstore.SegmentNotFound)
	}
	s.touch(clientID, now)
	s.unmount(segID, now)
	return s.m.result("unmount_segment", kvstore.OK)
}

// DrainSegment closes clientID's segment segID to new allocations: puts
// and upserts place no replica there any more, while the replicas it
// holds stay readable until the segment is unmounted. Draining a drained
// segment is OK; another client's or an unknown segment is
// SEGMENT_NOT_FOUND. The flag lives in this master's memory: a restarted
// master learns the segment from the client's remount as open, and the
// client drains it again.
func (s *State) DrainSegment(clientID, segID string, now time.Time) kvstore.ErrorCode {
	sg, ok := s.segments[segID]
	if !ok || sg.client != clientID {
		return s.m.result("drain_segment", kvstore.SegmentNotFound)
	}
	s.touch(clientID, now)
	if sg.mode == SegmentActive || sg.mode == SegmentStandby {
		sg.mode = SegmentDraining
	}
	s.closeReservations(sg, now)
	return s.m.result("drain_segment", kvstore.OK)
}

// openSegments counts the segments that take new replicas: an allocation
// failure triggers eviction only when enough of them exist, so that a
// drained pool does not evict what it still serves.
func (s *State) openSegments() int {
	n := 0
	for _, sg := range s.segOrder {
		if sg.open() {
			n++
		}
	}
	return n
}

// unmount removes a segment and everything stored on it; tasks that
// read from or write to it fail.
func (s *State) unmount(segID string, now time.Time) {
	sg, ok := s.segments[segID]
	if !ok {
		return
	}
	s.failTasksOnSegment(sg, now)
	s.dropReservations(func(r *reservation) bool { return r.seg == sg }, func(*segment, uint64, uint64) {})
	for o := range s.objects.all() {
		kept := o.replicas[:0]
		for _, r := range o.replicas {
			if r.seg != sg {
				kept = append(kept, r)
			}
		}
		clear(o.replicas[len(kept):])
		o.replicas = kept
		if o.gone() {
			s.dropObject(o)
		}
		s.charge(o)
	}
	keptD := s.discarded[:0]
	for _, d := range s.discarded {
		if d.seg != sg {
			keptD = append(keptD, d)
		}
	}
	clear(s.discarded[len(keptD):])
	s.discarded = keptD

	delete(s.segments, segID)
	s.serving.remove(sg)
	s.segOrder = slices.DeleteFunc(s.segOrder, func(x *segment) bool { return x == sg })
	if c, ok := s.clients[sg.client]; ok {
		c.segments = slices.DeleteFunc(c.segments, func(id string) bool { return id == segID })
	}
}

// Ping records a heartbeat from clientID, which runs as incarnation (0:
// not told), and answers OK if the client has remounted since this master
// started, NEED_REMOUNT otherwise. The client's segments mounted with
// another incarnation are unmounted first (their memory is gone), and the
// client must remount.
func (s *State) Ping(clientID string, incarnation uint64, now time.Time) (ClientStatus, kvstore.ErrorCode) {
	if clientID == "" {
		return ClientUndefined, s.m.result("ping", kvstore.InvalidParams)
	}
	if c, ok := s.clients[clientID]; ok {
		for _, id := range slices.Clone(c.segments) {
			if otherIncarnation(s.segments[id].info.Incarnation, incarnation) {
				s.unmount(id, now)
				s.m.replacedSegments++
				c.ok = false
			}
		}
	}
	c := s.touch(clientID, now)
	s.m.result("ping", kvstore.OK)
	if c.ok {
		return ClientOK, kvstore.OK
	}
	return ClientNeedRemount, kvstore.OK
}

// ExpireClients passes judgement on the silent clients at now. One silent
// for longer than ClientTTL becomes suspect (see "Suspect clients"): its
// segments take no new replicas and keep those they hold; its
// reservations in other segments stay. One silent for longer than
// ClientDeadTTL is forgotten: it leaves the ok set, the tasks it executes
// fail, and its segments are unmounted (objects whose only replicas were
// there disappear; those with a replica elsewhere stay readable; tasks
// copying to them fail).
func (s *State) ExpireClients(now time.Time) ClientExpiry {
	var out ClientExpiry
	for id, c := range s.clients {
		switch silent := now.Sub(c.lastSeen); {
		case silent > s.cfg.deadTTL():
			out.Dead = append(out.Dead, id)
		case silent > s.cfg.ClientTTL && !c.suspect:
			out.Suspected = append(out.Suspected, id)
		}
	}
	slices.Sort(out.Suspected)
	slices.Sort(out.Dead)
	for _, id := range out.Suspected {
		s.setSuspect(s.clients[id], true, now)
		s.m.suspectedClients++
	}
	for _, id := range out.Dead {
		c := s.clients[id]
		s.failTasks(func(t *task) bool { return t.client == id },
			fmt.Sprintf("client %s, which executes the task, expired", id), now)
		for _, segID := range slices.Clone(c.segments) {
			out.Expired = append(out.Expired, ExpiredSegment{ClientID: id, Segment: s.segments[segID].info})
			s.unmount(segID, now)
		}
		s.unmountDisk(id)
		s.dropReservations(func(r *reservation) bool { return r.client == id }, s.quarantineRange(now))
		delete(s.clients, id)
		s.m.expiredClients++
	}
	return out
}

// SegmentInfo is a snapshot of one mounted segment.
type SegmentInfo struct {
	Segment
	ClientID  string
	Allocated uint64
	Draining  bool // not ACTIVE: closed to new replicas
	Mode      SegmentMode
	// Suspect: its client is silent past ClientTTL; closed to new
	// replicas, it keeps those it holds.
	Suspect bool
}

// Segments returns the mounted segments in mount order.
func (s *State) Segments() []SegmentInfo {
	out := make([]SegmentInfo, len(s.segOrder))
	for i, sg := range s.segOrder {
		out[i] = SegmentInfo{Segment: sg.info, ClientID: sg.client, Allocated: sg.alloc.Allocated(),
			Draining: !sg.mode.takesReplicas(), Mode: sg.mode, Suspect: sg.suspect}
	}
	return out
}
