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
	o, ok := s.objects[key]
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

// RemoveByRegex removes every key of tenant in which pattern matches
// somewhere (a search, like upstream's std::regex_search, not a full
// match; the pattern sees the caller's keys, without the tenant), skipping
// leased objects unless force and always skipping objects being written.
// The pattern is Go RE2 syntax, not ECMAScript: backreferences and
// lookaround are rejected with INVALID_PARAMS. It returns how many keys
// were removed.
func (s *State) RemoveByRegex(tenant, pattern string, force bool, now time.Time) (int64, kvstore.ErrorCode) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return 0, s.m.result("remove_by_regex", kvstore.InvalidParams)
	}
	s.m.result("remove_by_regex", kvstore.OK)
	return s.removeMatching(tenant, re.MatchString, force, now), kvstore.OK
}

// RemoveAll removes every object of tenant it may: leased ones are skipped
// unless force, ones being written always. It returns how many were
// removed.
func (s *State) RemoveAll(tenant string, force bool, now time.Time) int64 {
	s.m.result("remove_all", kvstore.OK)
	return s.removeMatching(tenant, func(string) bool { return true }, force, now)
}

func (s *State) removeMatching(tenant string, match func(string) bool, force bool, now time.Time) int64 {
	var n int64
	for _, key := range s.tenantKeys(tenant) {
		if !match(s.UserKey(key)) {
			continue
		}
		o := s.objects[key]
		if (!force && o.leased(now)) || !o.allComplete() {
			continue
		}
		s.erase(o)
		n++
	}
	return n
}
