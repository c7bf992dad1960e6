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
}

// client is what the master knows of a client: when it was last heard
// from, whether it has remounted since this master started (upstream's
// ok_client_ set), and the ids of its segments.
type client struct {
	id       string
	lastSeen time.Time
	ok       bool
	segments []string
}

// touch records that clientID was heard from at now, creating its record.
func (s *State) touch(clientID string, now time.Time) *client {
	c, ok := s.clients[clientID]
	if !ok {
		c = &client{id: clientID}
		s.clients[clientID] = c
	}
	if now.After(c.lastSeen) {
		c.lastSeen = now
	}
	return c
}

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
// segment id the same client already mounted is a no-op (OK); an id held
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
	if old, ok := s.segments[seg.ID]; ok {
		if old.client != clientID {
			return kvstore.SegmentAlreadyExists
		}
		s.touch(clientID, now)
		return kvstore.OK
	}
	// Replica addresses are base + offset, and capacities, usage and
	// tenant charges are sums over the mounted segments: a segment that
	// ends past 2^64, or one that takes the pool's total past it, would
	// make them wrap.
	if _, carry := bits.Add64(seg.Base, seg.Size, 0); carry != 0 {
		return kvstore.InvalidParams
	}
	if capacity, _ := s.usage(); addSat(capacity, seg.Size) == math.MaxUint64 {
		return kvstore.InvalidParams
	}
	c := s.touch(clientID, now)
	sg := &segment{info: seg, client: clientID, alloc: NewAllocator(seg.Size)}
	s.segments[seg.ID] = sg
	s.segOrder = append(s.segOrder, sg)
	c.segments = append(c.segments, seg.ID)
	return kvstore.OK
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
		if sg.mode.takesReplicas() {
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
	s.dropReservations(func(r *reservation) bool { return r.seg == sg }, func(*segment, uint64) {})
	for key, o := range s.objects {
		kept := o.replicas[:0]
		for _, r := range o.replicas {
			if r.seg != sg {
				kept = append(kept, r)
			}
		}
		clear(o.replicas[len(kept):])
		o.replicas = kept
		if o.gone() {
			delete(s.objects, key)
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
	s.segOrder = slices.DeleteFunc(s.segOrder, func(x *segment) bool { return x == sg })
	if c, ok := s.clients[sg.client]; ok {
		c.segments = slices.DeleteFunc(c.segments, func(id string) bool { return id == segID })
	}
}

// Ping records a heartbeat from clientID and answers OK if the client has
// remounted since this master started, NEED_REMOUNT otherwise.
func (s *State) Ping(clientID string, now time.Time) (ClientStatus, kvstore.ErrorCode) {
	if clientID == "" {
		return ClientUndefined, s.m.result("ping", kvstore.InvalidParams)
	}
	c := s.touch(clientID, now)
	s.m.result("ping", kvstore.OK)
	if c.ok {
		return ClientOK, kvstore.OK
	}
	return ClientNeedRemount, kvstore.OK
}

// ExpireClients forgets every client silent for longer than ClientTTL at
// now: it leaves the ok set, the tasks it executes fail, and its segments
// are unmounted (objects whose only replicas were there disappear; those
// with a replica elsewhere stay readable; tasks copying to them fail). It returns the segments unmounted, sorted by client.
func (s *State) ExpireClients(now time.Time) []ExpiredSegment {
	var ids []string
	for id, c := range s.clients {
		if now.Sub(c.lastSeen) > s.cfg.ClientTTL {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []ExpiredSegment
	for _, id := range ids {
		c := s.clients[id]
		s.failTasks(func(t *task) bool { return t.client == id },
			fmt.Sprintf("client %s, which executes the task, expired", id), now)
		for _, segID := range slices.Clone(c.segments) {
			out = append(out, ExpiredSegment{ClientID: id, Segment: s.segments[segID].info})
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
}

// Segments returns the mounted segments in mount order.
func (s *State) Segments() []SegmentInfo {
	out := make([]SegmentInfo, len(s.segOrder))
	for i, sg := range s.segOrder {
		out[i] = SegmentInfo{Segment: sg.info, ClientID: sg.client, Allocated: sg.alloc.Allocated(),
			Draining: !sg.mode.takesReplicas(), Mode: sg.mode}
	}
	return out
}
