package master

import (
	"regexp"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// Remove deletes key and frees its buffers. Errors: OBJECT_NOT_FOUND,
// OBJECT_HAS_LEASE (a read lease is active and force is false),
// REPLICA_IS_NOT_READY (a write is open; force does not bypass it).
func (s *State) Remove(key string, force bool, now time.Time) kvstore.ErrorCode {
	return s.m.result("remove", s.remove(key, force, now))
}

func (s *State) remove(key string, force bool, now time.Time) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.ObjectNotFound
	}
	if !force && o.leased(now) {
		return kvstore.ObjectHasLease
	}
	if !o.allComplete() {
		return kvstore.ReplicaIsNotReady
	}
	s.erase(o)
	return kvstore.OK
}

// BatchRemove removes each key as Remove and returns one code per key.
func (s *State) BatchRemove(keys []string, force bool, now time.Time) []kvstore.ErrorCode {
	out := make([]kvstore.ErrorCode, len(keys))
	for i, k := range keys {
		out[i] = s.Remove(k, force, now)
	}
	return out
}

// RemoveByRegex removes every key of tenant's namespace ns (a
// kvstore.Namespace.KeyPrefix, "" for the empty one) in which pattern matches
// somewhere (a search, like upstream's std::regex_search, not a full
// match; the pattern sees the caller's keys, without the tenant), skipping
// leased objects unless force and always skipping objects being written.
// The pattern is Go RE2 syntax, not ECMAScript: backreferences and
// lookaround are rejected with INVALID_PARAMS. It returns how many keys
// were removed.
func (s *State) RemoveByRegex(tenant, ns, pattern string, force bool, now time.Time) (int64, kvstore.ErrorCode) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, s.m.result("remove_by_regex", kvstore.InvalidParams)
	}
	s.m.result("remove_by_regex", kvstore.OK)
	return s.removeMatching(tenant, ns, re.MatchString, force, now), kvstore.OK
}

// RemoveAll removes every object of tenant's namespace ns it may: leased ones are skipped
// unless force, ones being written always. It returns how many were
// removed.
func (s *State) RemoveAll(tenant, ns string, force bool, now time.Time) int64 {
	s.m.result("remove_all", kvstore.OK)
	n := s.removeMatching(tenant, ns, func(string) bool { return true }, force, now)
	s.kvCleared(tenant)
	return n
}

func (s *State) removeMatching(tenant, ns string, match func(string) bool, force bool, now time.Time) int64 {
	var n int64
	for _, key := range s.tenantKeys(tenant) {
		if k, in := kvstore.InNamespace(s.UserKey(key), ns); !in || !match(k) {
			continue
		}
		o := s.objects.get(key)
		if (!force && o.leased(now)) || !o.allComplete() {
			continue
		}
		s.erase(o)
		n++
	}
	return n
}

// BatchReplicaClear clears clientID's objects among keys and returns the
// indices of the keys cleared, in input order (upstream
// BatchReplicaClear). A key is skipped when it is empty or missing, was
// written by another client, or holds an active read lease. With segment
// "" the whole object is erased, provided all its replicas are COMPLETE;
// otherwise only its COMPLETE replicas on the segment of that name (or id)
// are removed, and the object is erased when none remain.
func (s *State) BatchReplicaClear(clientID string, keys []string, segment string, now time.Time) []int {
	s.m.result("batch_replica_clear", kvstore.OK)
	var out []int
	for i, key := range keys {
		o, ok := s.objects.lookup(key)
		if !ok || o.writerID() != clientID || o.leased(now) {
			continue
		}
		if segment == "" {
			if !o.allComplete() {
				continue
			}
			s.erase(o)
			out = append(out, i)
			continue
		}
		kept := o.replicas[:0]
		removed := false
		for _, r := range o.replicas {
			if r.status == ReplicaComplete && (r.seg.info.Name == segment || r.seg.info.ID == segment) {
				s.freeReplica(r)
				removed = true
			} else {
				kept = append(kept, r)
			}
		}
		clear(o.replicas[len(kept):])
		o.replicas = kept
		if !removed {
			continue
		}
		if o.gone() {
			s.dropObject(o)
		}
		s.charge(o)
		out = append(out, i)
	}
	return out
}
