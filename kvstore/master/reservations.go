package master

import (
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// This file is the one-round-trip put (docs/design/master-transport.md, "Reserved
// space"). A client reserves a block of one segment ahead of its puts
// (Reserve), writes each small object into the next unused part of the
// block, and records it with one call (PutCommit) instead of PutStart and
// PutEnd. The master never hands a reserved byte to anyone else; a commit
// turns its range into the object's only replica, COMPLETE at once, and
// consumes the range whatever the outcome (a failed commit frees it).

// Limits on reservations: one block is at most MaxReservationBytes, and
// a client holds at most MaxReservationsPerClient blocks at a time.
const (
	MaxReservationBytes      = 4 << 20
	MaxReservationsPerClient = 8
)

// reservation is one block a client reserved: pieces are its unused
// parts, sorted by offset, each held in seg.alloc and freed on its own
// (the allocator keeps no table of allocations; take cuts pieces here).
type reservation struct {
	id     uint64
	client string
	seg    *segment
	start  uint64 // the block's offset in seg; commit offsets count from it
	pieces []extent
}

// Reservation describes a block Reserve handed out.
type Reservation struct {
	ID uint64
	// Block is where the client writes: Address is the block's first
	// byte, Size its length; the status is PROCESSING.
	Block Replica
}

// Reserve releases the blocks in release (clientID's; the client has no
// write in flight in them) and, when size > 0, reserves a block of size
// bytes (capped at MaxReservationBytes) in one ACTIVE segment chosen as a
// default put's replica would be, for a caller working in tenant. It
// counts as a heartbeat. Errors: INVALID_PARAMS (no client id),
// NOT_SUPPORTED (the master stores objects on a shared file system too,
// which a commit cannot write, or the tenant has a quota: a block's unused
// bytes are charged to nobody, so they would escape it),
// TENANT_NOT_REGISTERED, NO_AVAILABLE_HANDLE (the client holds
// MaxReservationsPerClient blocks, or no segment has the room, which
// triggers eviction).
func (s *State) Reserve(clientID, tenant string, size uint64, release []uint64, now time.Time) (Reservation, kvstore.ErrorCode) {
	r, code := s.reserve(clientID, tenant, size, release, now)
	return r, s.m.result("reserve", code)
}

func (s *State) reserve(clientID, tenant string, size uint64, release []uint64, now time.Time) (Reservation, kvstore.ErrorCode) {
	if clientID == "" {
		return Reservation{}, kvstore.InvalidParams
	}
	s.touch(clientID, now)
	for _, id := range release {
		if r := s.reservations[id]; r != nil && r.client == clientID {
			s.dropReservation(r, s.freeIn)
		}
	}
	if size == 0 {
		return Reservation{}, kvstore.OK
	}
	t, ok := s.tenants[tenant]
	switch {
	case !ok:
		return Reservation{}, kvstore.TenantNotRegistered
	case s.cfg.FS.Enabled() || t.quota > 0:
		return Reservation{}, kvstore.NotSupported
	}
	held := 0
	for _, r := range s.reservations {
		if r.client == clientID {
			held++
		}
	}
	if held >= MaxReservationsPerClient {
		return Reservation{}, kvstore.NoAvailableHandle
	}
	size = AlignUp(min(size, MaxReservationBytes))
	n := len(s.segOrder)
	if n == 0 {
		return Reservation{}, kvstore.NoAvailableHandle
	}
	first := s.rng.Intn(n)
	for i := range min(maxScan, n) {
		sg := s.segOrder[(first+i)%n]
		if !sg.open() {
			continue
		}
		off, ok := s.allocateIn(sg, size)
		if !ok {
			continue
		}
		if s.nextReservation == 0 {
			// Ids start at a random point, so that a restarted master
			// (without the operation log, it remembers nothing) does not
			// hand out an id a client still holds from the last one: a
			// commit with it would place the object in the wrong block.
			s.nextReservation = s.ids.Uint64() >> 1
		}
		s.nextReservation++
		r := &reservation{id: s.nextReservation, client: clientID, seg: sg, start: off, pieces: []extent{{off, size}}}
		if s.reservations == nil {
			s.reservations = make(map[uint64]*reservation)
		}
		s.reservations[r.id] = r
		block := (&replica{status: ReplicaProcessing, seg: sg, off: off, size: size}).describe()
		return Reservation{ID: r.id, Block: block}, kvstore.OK
	}
	s.needEviction = true
	return Reservation{}, kvstore.NoAvailableHandle
}

// PutCommit records clientID's object key of size bytes, written at
// offset inside its reservation resID, with checksum when the writer
// computed one: the object is readable at once, as after PutStart and
// PutEnd. cfg must ask for one replica and no placement (the block
// already placed it). gone reports that resID is not (or no longer)
// clientID's: the client drops it and puts the object the two-phase way.
// Errors otherwise as PutStart, and INVALID_PARAMS for a range that is not
// an unused part of the block. The range is consumed in every case.
func (s *State) PutCommit(clientID, key string, size uint64, resID, offset uint64, checksum *uint64, cfg ReplicateConfig, now time.Time) (code kvstore.ErrorCode, gone bool) {
	code, gone = s.putCommit(clientID, key, size, resID, offset, checksum, cfg, now)
	return s.m.result("put_commit", code), gone
}

func (s *State) putCommit(clientID, key string, size uint64, resID, offset uint64, checksum *uint64, cfg ReplicateConfig, now time.Time) (kvstore.ErrorCode, bool) {
	r := s.reservations[resID]
	if r == nil || r.client != clientID {
		return kvstore.InvalidWrite, true
	}
	if size == 0 || offset%Alignment != 0 {
		return kvstore.InvalidParams, false
	}
	off, n := r.start+offset, AlignUp(size)
	if off < r.start || off+n < off || !r.take(off, n) {
		return kvstore.InvalidParams, false
	}
	rep := &replica{status: ReplicaComplete, seg: r.seg, off: off, size: size}
	if len(r.pieces) == 0 {
		delete(s.reservations, r.id)
	}
	fail := func(code kvstore.ErrorCode) (kvstore.ErrorCode, bool) {
		s.freeReplica(rep)
		return code, false
	}
	if !validWrite(key, size, cfg) || !cfg.placesNothing() {
		return fail(kvstore.InvalidParams)
	}
	pinTTL, _, code := s.softPinTTL(cfg)
	if code != kvstore.OK {
		return fail(code)
	}
	if code := s.claimKey(key, now); code != kvstore.OK {
		return fail(code)
	}
	if code := s.admitWrite(key, size, 1, 0); code != kvstore.OK {
		return fail(code)
	}
	s.nextReplica++
	rep.id = s.nextReplica
	o := s.newObject(clientID, key, size, cfg, pinTTL, cfg.HardPin, []*replica{rep}, false, now)
	s.publishWrite(o, checksum, now)
	return kvstore.OK, false
}

// placesNothing reports whether cfg leaves placement to the master's
// default: one replica, no preferred segments, owners, node or routing.
func (c ReplicateConfig) placesNothing() bool {
	return c.ReplicaNum == 1 && len(c.PreferredSegments) == 0 && len(c.PreferredOwners) == 0 &&
		!c.PreferSameNode && !c.PreferLocal && c.RouteTopK == 0
}

// take cuts [off, off+n) out of the reservation's unused pieces, making
// it an allocation of its own; false when the range is not inside one
// piece.
func (r *reservation) take(off, n uint64) bool {
	i := slices.IndexFunc(r.pieces, func(p extent) bool { return p.off <= off && off+n <= p.off+p.len })
	if i < 0 {
		return false
	}
	p := r.pieces[i]
	// The allocator keeps no per-allocation record, so cutting a piece is
	// bookkeeping here alone: the piece must still be held and the cut an
	// aligned range of it (each part is later freed on its own), or the
	// pieces have lost track of the segment.
	r.seg.alloc.mustHold(p.off, p.len)
	r.seg.alloc.mustHold(off, n)
	var rest []extent
	if off > p.off {
		rest = append(rest, extent{p.off, off - p.off})
	}
	if end := p.off + p.len; off+n < end {
		rest = append(rest, extent{off + n, end - off - n})
	}
	r.pieces = slices.Replace(r.pieces, i, i+1, rest...)
	return true
}

// quarantineRange keeps an unused piece reserved for
// PutStartReleaseTimeout more: its client may still be writing into it.
func (s *State) quarantineRange(now time.Time) func(*segment, uint64, uint64) {
	return func(sg *segment, off, n uint64) {
		s.discarded = append(s.discarded, discarded{seg: sg, off: off, len: n, releaseAt: now.Add(s.cfg.PutStartReleaseTimeout)})
	}
}

// dropReservation forgets r, handing each unused piece to release.
func (s *State) dropReservation(r *reservation, release func(*segment, uint64, uint64)) {
	for _, p := range r.pieces {
		release(r.seg, p.off, p.len)
	}
	delete(s.reservations, r.id)
}

// closeReservations drops the reservations in sg once it takes no new
// replicas (drained, standby, retired, its client suspect): commits into them would keep
// placing objects there. Their unused pieces stay quarantined for
// PutStartReleaseTimeout, as writes may be in flight.
func (s *State) closeReservations(sg *segment, now time.Time) {
	if !sg.open() {
		s.dropReservations(func(r *reservation) bool { return r.seg == sg }, s.quarantineRange(now))
	}
}

// dropReservations forgets every reservation match selects, in id order.
func (s *State) dropReservations(match func(*reservation) bool, release func(*segment, uint64, uint64)) {
	ids := make([]uint64, 0, len(s.reservations))
	for id, r := range s.reservations {
		if match(r) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.dropReservation(s.reservations[id], release)
	}
}

// Reserved returns the number of reservations and the unused bytes they
// hold.
func (s *State) Reserved() (count int, bytes uint64) {
	for _, r := range s.reservations {
		count++
		for _, p := range r.pieces {
			bytes += p.len
		}
	}
	return count, bytes
}
