package master

import (
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// softPinTTL validates a write's soft pin request and returns the TTL to
// apply (0: none) and whether the request changes the pin at all
// (PRESERVE does not).
func (s *State) softPinTTL(cfg ReplicateConfig) (ttl time.Duration, change bool, code kvstore.ErrorCode) {
	switch cfg.SoftPin {
	case SoftPinPreserve, SoftPinDisable:
		if cfg.SoftPinTTL != nil {
			return 0, false, kvstore.InvalidParams
		}
		return 0, cfg.SoftPin == SoftPinDisable, kvstore.OK
	case SoftPinEnable:
		ttl = s.cfg.DefaultSoftPinTTL
		if cfg.SoftPinTTL != nil {
			ttl = *cfg.SoftPinTTL
		}
		if ttl < 0 || ttl > s.cfg.MaxSoftPinTTL {
			return 0, false, kvstore.InvalidParams
		}
		return ttl, true, kvstore.OK
	}
	return 0, false, kvstore.InvalidParams
}

// validWrite checks the parameters every write start shares.
func validWrite(key string, size uint64, cfg ReplicateConfig) bool {
	return key != "" && size > 0 && cfg.ReplicaNum > 0
}

// PutStart opens a write of size bytes under key for clientID and returns
// the PROCESSING replicas to write into: up to cfg.ReplicaNum, each one
// contiguous buffer on a distinct segment. Errors:
//
//   - INVALID_PARAMS: empty key, zero size, zero replicas, bad soft pin;
//   - OBJECT_ALREADY_EXISTS: key has a readable replica, or a write younger
//     than PutStartDiscardTimeout is open (an older one is preempted: its
//     buffers are quarantined for PutStartReleaseTimeout);
//   - NO_AVAILABLE_HANDLE: no segment could hold one replica; the next
//     eviction run is triggered.
func (s *State) PutStart(clientID, key string, size uint64, cfg ReplicateConfig, now time.Time) ([]Replica, kvstore.ErrorCode) {
	rs, code := s.putStart(clientID, key, size, cfg, now)
	return rs, s.m.result("put_start", code)
}

func (s *State) putStart(clientID, key string, size uint64, cfg ReplicateConfig, now time.Time) ([]Replica, kvstore.ErrorCode) {
	if !validWrite(key, size, cfg) {
		return nil, kvstore.InvalidParams
	}
	pinTTL, _, code := s.softPinTTL(cfg)
	if code != kvstore.OK {
		return nil, code
	}
	if code := s.claimKey(key, now); code != kvstore.OK {
		return nil, code
	}
	if code := s.admitWrite(key, size, cfg.ReplicaNum, 0); code != kvstore.OK {
		return nil, code
	}
	return s.create(clientID, key, size, cfg, pinTTL, cfg.HardPin, now)
}

// claimKey readies key for a new object (a put, not an upsert): it is
// OBJECT_ALREADY_EXISTS while the key has a readable replica, a disk copy
// or a write younger than PutStartDiscardTimeout; an older open write is
// preempted, its buffers quarantined (its writer may still be writing into
// them).
func (s *State) claimKey(key string, now time.Time) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.OK
	}
	if len(o.readable()) > 0 || len(o.md().disk) > 0 || o.md().fs != nil || (o.writing && now.Sub(o.putStart.time()) < s.cfg.PutStartDiscardTimeout) {
		return kvstore.ObjectAlreadyExists
	}
	s.dropProcessing(o, func(r *replica) { s.discard(r, now.Add(s.cfg.PutStartReleaseTimeout)) })
	s.dropObject(o)
	s.charge(o)
	s.m.preempted++
	return kvstore.OK
}

// create allocates and records a new object with an open write.
func (s *State) create(clientID, key string, size uint64, cfg ReplicateConfig, pinTTL time.Duration, hardPin bool, now time.Time) ([]Replica, kvstore.ErrorCode) {
	reps := s.allocate(clientID, size, cfg)
	if len(reps) == 0 {
		if s.openSegments() >= cfg.ReplicaNum {
			s.needEviction = true
		}
		return nil, kvstore.NoAvailableHandle
	}
	if len(reps) < cfg.ReplicaNum {
		s.m.partialAllocs++
	}
	o := s.newObject(clientID, key, size, cfg, pinTTL, hardPin, reps, true, now)
	s.addFSReplica(o, clientID, now)
	return append(describeAll(o.replicas), o.fsDescriptor()...), kvstore.OK
}

// newObject records key as a new object on reps (which it takes over:
// object.firstReplicas), written by clientID; writing marks the write
// still open.
func (s *State) newObject(clientID, key string, size uint64, cfg ReplicateConfig, pinTTL time.Duration, hardPin bool, reps []*replica, writing bool, now time.Time) *object {
	o := &object{key: key, size: size, writer: s.internClient(clientID), putStart: stampOf(now), hardPin: hardPin}
	o.firstReplicas(reps)
	if pinTTL != 0 || cfg.DataType != 0 || cfg.GroupID != "" {
		o.meta = &objectMeta{softPinTTL: pinTTL, dataType: cfg.DataType, groupID: cfg.GroupID}
	}
	s.setWriting(o, writing)
	s.addObject(o)
	s.charge(o)
	return o
}

// UpsertStart opens a write that inserts or overwrites key. Absent, it is
// PutStart. Present: an open write is preempted at once (its buffers
// quarantined); with no write open, the same size and no read lease
// active, the existing buffers are returned for an in-place overwrite
// (they read as not ready until PutEnd); otherwise (a different size, or
// a reader holding a lease) new buffers are allocated and the old ones are
// quarantined until the object's read lease ends, so a reader never sees
// a mix of the two values. A same-size upsert that finds no room for new
// buffers while the lease is held fails OBJECT_REPLICA_BUSY (the old value
// stays). A hard pin is kept; the soft pin follows cfg.SoftPin (PRESERVE
// keeps it).
func (s *State) UpsertStart(clientID, key string, size uint64, cfg ReplicateConfig, now time.Time) ([]Replica, kvstore.ErrorCode) {
	rs, code := s.upsertStart(clientID, key, size, cfg, now)
	return rs, s.m.result("upsert_start", code)
}

func (s *State) upsertStart(clientID, key string, size uint64, cfg ReplicateConfig, now time.Time) ([]Replica, kvstore.ErrorCode) {
	if !validWrite(key, size, cfg) {
		return nil, kvstore.InvalidParams
	}
	pinTTL, pinChange, code := s.softPinTTL(cfg)
	if code != kvstore.OK {
		return nil, code
	}
	o, ok := s.objects.lookup(key)
	if ok && s.dropDiskCopies(o) {
		ok = false // it lived on disk only: write it anew
	}
	var held uint64
	if ok {
		held = o.charged
	}
	if code := s.admitWrite(key, size, cfg.ReplicaNum, held); code != kvstore.OK {
		return nil, code
	}
	if !ok {
		return s.create(clientID, key, size, cfg, pinTTL, cfg.HardPin, now)
	}
	if !pinChange {
		pinTTL = o.md().softPinTTL
	}
	hardPin := o.hardPin || cfg.HardPin
	if o.writing {
		s.dropProcessing(o, func(r *replica) { s.discard(r, now.Add(s.cfg.PutStartReleaseTimeout)) })
		s.m.preempted++
		if len(o.replicas) == 0 {
			return s.create(clientID, key, size, cfg, pinTTL, hardPin, now)
		}
	}
	if o.size == size && !o.leased(now) {
		// Nobody may be reading these buffers: overwrite them in place.
		for _, r := range o.replicas {
			r.status = ReplicaProcessing
		}
	} else {
		// A reader holding a lease reads the old buffers whole, so the
		// new value goes into new ones whatever its size.
		reps := s.allocate(clientID, size, cfg)
		if len(reps) == 0 {
			if o.size == size && len(o.replicas) > 0 {
				return nil, kvstore.ObjectReplicaBusy
			}
			if s.openSegments() >= cfg.ReplicaNum {
				s.needEviction = true
			}
			return nil, kvstore.NoAvailableHandle
		}
		if len(reps) < cfg.ReplicaNum {
			s.m.partialAllocs++
		}
		release := now
		if l := o.lease.time(); l.After(now) {
			release = l
		}
		for _, r := range o.replicas {
			s.discard(r, release)
		}
		o.replicas = reps
		o.size = size
		s.charge(o)
	}
	o.writer, o.putStart = s.internClient(clientID), stampOf(now)
	s.setWriting(o, true)
	m := o.mdw()
	m.rewrites++
	o.hardPin = hardPin
	m.dataType, m.groupID = cfg.DataType, cfg.GroupID
	if pinChange || m.softPinTTL != pinTTL {
		m.softPinUntil = 0
	}
	s.setSoftPinTTL(o, pinTTL)
	m.checksum = nil
	s.addFSReplica(o, clientID, now)
	s.kvAvailability(o)
	return append(describeAll(o.replicas), o.fsDescriptor()...), kvstore.OK
}

// PutEnd publishes clientID's open write of key: its replicas become
// COMPLETE and readable, the object gets a zero-length lease (it is
// immediately removable and evictable) and a pending soft pin starts.
// Errors: OBJECT_NOT_FOUND, ILLEGAL_CLIENT (another client's write),
// INVALID_WRITE (no write open, unless it is a retry of a completed one).
func (s *State) PutEnd(clientID, key string, checksum *uint64, now time.Time) kvstore.ErrorCode {
	return s.m.result("put_end", s.putEnd(clientID, key, checksum, now))
}

func (s *State) putEnd(clientID, key string, checksum *uint64, now time.Time) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.ObjectNotFound
	}
	if o.writerID() != clientID {
		return kvstore.IllegalClient
	}
	if !o.writing {
		if o.allComplete() {
			return kvstore.OK
		}
		return kvstore.InvalidWrite
	}
	for _, r := range o.replicas {
		r.status = ReplicaComplete
	}
	s.setWriting(o, false)
	s.publishWrite(o, checksum, now)
	return kvstore.OK
}

// publishWrite makes o's finished write readable: zero-length lease,
// pending soft pin, offload and KV events.
func (s *State) publishWrite(o *object, checksum *uint64, now time.Time) {
	if checksum != nil || o.meta != nil {
		o.mdw().checksum = checksum
	}
	o.grantLease(now, 0)
	if m := o.meta; m != nil && m.softPinTTL > 0 && m.softPinUntil == 0 {
		m.softPinUntil = stampOf(now.Add(m.softPinTTL))
	}
	s.offloadOnWrite(o)
	s.kvAvailability(o)
	s.indexLease(o)
}

// PutRevoke cancels clientID's open write of key: its PROCESSING buffers
// are freed, and the object disappears if nothing is left. Errors as
// PutEnd.
func (s *State) PutRevoke(clientID, key string, now time.Time) kvstore.ErrorCode {
	return s.m.result("put_revoke", s.putRevoke(clientID, key))
}

func (s *State) putRevoke(clientID, key string) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.ObjectNotFound
	}
	if o.writerID() != clientID {
		return kvstore.IllegalClient
	}
	if !o.writing {
		return kvstore.InvalidWrite
	}
	s.dropProcessing(o, s.freeReplica)
	return kvstore.OK
}
