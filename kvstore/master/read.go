package master

import (
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// suspectLast orders rs with the replicas on suspect segments last, each
// group in its order: their memory is probably intact, but a reader
// tries the others first.
func suspectLast(rs []*replica) []*replica {
	out := make([]*replica, 0, len(rs))
	for _, suspect := range []bool{false, true} {
		for _, r := range rs {
			if r.seg.suspect == suspect {
				out = append(out, r)
			}
		}
	}
	return out
}

// GetReplicaList returns key's readable (COMPLETE) memory replicas (those
// on suspect segments last), or
// its LOCAL_DISK replicas when it has none in memory, and grants a
// read lease of DefaultLeaseTTL, whose length it returns. Errors:
// OBJECT_NOT_FOUND (no such key), REPLICA_IS_NOT_READY (it is still being
// written). A failed lookup grants nothing.
func (s *State) GetReplicaList(key string, now time.Time) (ReadResult, kvstore.ErrorCode) {
	res, code := s.getReplicaList(key, now)
	return res, s.m.result("get_replica_list", code)
}

func (s *State) getReplicaList(key string, now time.Time) (ReadResult, kvstore.ErrorCode) {
	if key == "" {
		return ReadResult{}, kvstore.InvalidParams
	}
	o, ok := s.objects.lookup(key)
	if !ok {
		return ReadResult{}, kvstore.ObjectNotFound
	}
	readable := o.readable()
	reps := describeAll(suspectLast(readable))
	if len(reps) == 0 && !o.writing {
		// Memory replicas first; a disk-only object is read from disk
		// (and counts towards its promotion).
		if reps = s.diskDescriptors(o); len(reps) > 0 {
			s.diskHit(o)
		}
	}
	if len(reps) == 0 {
		if o.writing || o.fsPending() {
			return ReadResult{}, kvstore.ReplicaIsNotReady
		}
		return ReadResult{}, kvstore.ObjectNotFound
	}
	o.grantLease(now, s.cfg.DefaultLeaseTTL)
	s.noteRead(o, readable, now)
	return ReadResult{Replicas: reps, LeaseTTL: s.cfg.DefaultLeaseTTL, Checksum: o.md().checksum}, kvstore.OK
}

// ExistKey reports whether key has a readable replica; if so it grants
// the same read lease as GetReplicaList. A missing or unfinished key is
// (false, OK).
func (s *State) ExistKey(key string, now time.Time) (bool, kvstore.ErrorCode) {
	if key == "" {
		return false, s.m.result("exist_key", kvstore.InvalidParams)
	}
	s.m.result("exist_key", kvstore.OK)
	o, ok := s.objects.lookup(key)
	if !ok || (len(o.readable()) == 0 && (o.writing || len(s.diskDescriptors(o)) == 0)) {
		return false, kvstore.OK
	}
	o.grantLease(now, s.cfg.DefaultLeaseTTL)
	return true, kvstore.OK
}
