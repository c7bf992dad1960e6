package master

import (
	"cmp"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// This file moves objects between memory and the disk tier. The master
// queues the work per disk; the disk's client fetches it with its offload
// heartbeat, moves the bytes and reports:
//
//   - an offload copies an object from one of the client's own memory
//     replicas to its disk; success adds a LOCAL_DISK replica. While it is
//     queued or in flight the object's memory replicas are not evicted, so
//     memory is given up only after the disk copy is durable and recorded.
//   - a promotion copies a disk-only object into a memory replica the
//     master reserves when it hands the work out; success makes the
//     replica COMPLETE and readable.

// offloadJob is one queued or handed-out offload of obj.
type offloadJob struct {
	obj  *object
	sent time.Time // zero while queued
}

// promotionJob is one queued or handed-out promotion of obj.
type promotionJob struct {
	obj    *object
	target *replica // reserved when handed out; outside the object
	sent   time.Time
}

// OffloadWork asks a client to copy Size bytes of Key from Source, a
// memory replica in one of its own segments, to its disk.
type OffloadWork struct {
	Key    string
	Size   uint64
	Source Replica
}

// PromotionWork asks a client to copy Key from its disk into Target.
type PromotionWork struct {
	Key    string
	Size   uint64
	Target Replica
}

// DiskWork is an offload heartbeat's answer.
type DiskWork struct {
	Offloads   []OffloadWork
	Promotions []PromotionWork
	// Deletes are keys whose disk copies are no longer wanted (removed or
	// overwritten objects).
	Deletes []string
}

// offloadOnWrite queues o's offload at PutEnd (offload on write, the
// default mode): one per client holding a replica and a disk.
func (s *State) offloadOnWrite(o *object) {
	if !s.cfg.Offload.Enable || s.cfg.Offload.OnEvict {
		return
	}
	for _, r := range o.replicas {
		if d, ok := s.disk.disks[r.seg.client]; ok {
			s.queueOffload(d, o)
		}
	}
}

// queueOffload queues o's offload to d; false when the queue is full.
func (s *State) queueOffload(d *localDisk, o *object) bool {
	if _, ok := d.offloads[o.key]; ok || slices.ContainsFunc(o.md().disk, func(r diskReplica) bool { return r.client == d.client }) {
		return true
	}
	if s.disk.queued >= s.cfg.Offload.QueueLimit {
		return false
	}
	d.offloads[o.key] = &offloadJob{obj: o}
	s.disk.queued++
	o.offloading = true
	return true
}

// endOffload removes key's offload job from d.
func (s *State) endOffload(d *localDisk, key string) {
	j, ok := d.offloads[key]
	if !ok {
		return
	}
	delete(d.offloads, key)
	s.disk.queued--
	j.obj.offloading = slices.ContainsFunc(s.diskList(), func(d *localDisk) bool {
		other, ok := d.offloads[key]
		return ok && other.obj == j.obj
	})
}

// diskList returns the mounted disks in client id order.
func (s *State) diskList() []*localDisk {
	ids := make([]string, 0, len(s.disk.disks))
	for id := range s.disk.disks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*localDisk, len(ids))
	for i, id := range ids {
		out[i] = s.disk.disks[id]
	}
	return out
}

// OffloadHeartbeat is a storage client's heartbeat for its disk: dropped
// are keys its disk no longer holds (evicted when full, found corrupt).
// It hands out the offloads queued for the disk (and those handed out
// over a minute ago without a report), up to PromotionMaxPerHeartbeat
// promotions (reserving their memory replicas now; one that finds no room
// is dropped) and the keys to delete. An unknown disk is
// SEGMENT_NOT_FOUND: the client mounts it again (the master restarted, or
// expired the client).
func (s *State) OffloadHeartbeat(clientID string, dropped []string, now time.Time) (DiskWork, kvstore.ErrorCode) {
	d, ok := s.disk.disks[clientID]
	if !ok {
		return DiskWork{}, s.m.result("offload_heartbeat", kvstore.SegmentNotFound)
	}
	s.touch(clientID, now)
	for _, key := range dropped {
		if o, ok := s.objects.lookup(key); ok && s.dropDiskReplica(o, clientID) && o.gone() {
			s.dropObject(o)
			s.charge(o)
		}
	}
	var w DiskWork
	for _, key := range sortedMapKeys(d.offloads) {
		j := d.offloads[key]
		if !j.sent.IsZero() && now.Sub(j.sent) < taskRedeliverAfter {
			continue
		}
		src := s.replicaOfClient(j.obj, clientID)
		if s.objects.get(key) != j.obj || src == nil {
			s.endOffload(d, key)
			continue
		}
		j.sent = now
		w.Offloads = append(w.Offloads, OffloadWork{Key: key, Size: j.obj.size, Source: src.describe()})
	}
	for _, key := range sortedMapKeys(d.promotions) {
		if len(w.Promotions) >= s.cfg.Offload.PromotionMaxPerHeartbeat {
			break
		}
		j := d.promotions[key]
		if !j.sent.IsZero() && now.Sub(j.sent) < taskRedeliverAfter {
			continue
		}
		if j.target == nil {
			reps := s.allocate(clientID, j.obj.size, ReplicateConfig{ReplicaNum: 1})
			if len(reps) == 0 {
				s.endPromotion(d, key)
				continue
			}
			j.target = reps[0]
		}
		j.sent = now
		w.Promotions = append(w.Promotions, PromotionWork{Key: key, Size: j.obj.size, Target: j.target.describe()})
	}
	w.Deletes, d.deletes = d.deletes, nil
	return w, s.m.result("offload_heartbeat", kvstore.OK)
}

// replicaOfClient returns a COMPLETE memory replica of o in one of
// clientID's segments, or nil.
func (s *State) replicaOfClient(o *object, clientID string) *replica {
	for _, r := range o.readable() {
		if r.seg.client == clientID {
			return r
		}
	}
	return nil
}

// NotifyOffload records the outcome of key's offload by clientID. On
// success the object gains a LOCAL_DISK replica; if it was removed or
// overwritten meanwhile the disk is asked to delete the copy and the
// answer is OBJECT_NOT_FOUND. A failure only ends the job (the object
// stays in memory; offload on evict queues it again later).
func (s *State) NotifyOffload(clientID, key string, success bool, now time.Time) kvstore.ErrorCode {
	return s.m.result("notify_offload", s.notifyOffload(clientID, key, success, now))
}

func (s *State) notifyOffload(clientID, key string, success bool, now time.Time) kvstore.ErrorCode {
	d, ok := s.disk.disks[clientID]
	if !ok {
		return kvstore.SegmentNotFound
	}
	s.touch(clientID, now)
	j, ok := d.offloads[key]
	if ok && j.sent.IsZero() {
		// A report of an earlier offload of the key, overwritten since:
		// the queued job copies the new object after the delete.
		if success {
			d.deleteLater(key)
		}
		return kvstore.ObjectNotFound
	}
	if ok {
		s.endOffload(d, key)
	}
	if !success {
		return kvstore.OK
	}
	if !ok || s.objects.get(key) != j.obj {
		d.deleteLater(key)
		return kvstore.ObjectNotFound
	}
	j.obj.addDisk(clientID)
	s.kvAvailability(j.obj)
	return kvstore.OK
}

// diskHit counts a read of o served from disk only and, with promotion on
// hit, queues o's promotion once the key's count reaches the admission
// threshold, provided memory is below the eviction high watermark and the
// promotion queue has room.
func (s *State) diskHit(o *object) {
	if !s.cfg.Offload.Enable || !s.cfg.Offload.PromotionOnHit || len(o.md().disk) == 0 {
		return
	}
	if s.disk.hits == nil {
		s.disk.hits = newCountMinSketch()
	}
	if s.disk.hits.add(o.key) < s.cfg.Offload.threshold() || s.AboveHighWatermark() ||
		s.disk.promoted >= s.cfg.Offload.PromotionQueueLimit {
		return
	}
	d, ok := s.disk.disks[o.md().disk[0].client]
	if !ok {
		return
	}
	if _, queued := d.promotions[o.key]; queued {
		return
	}
	d.promotions[o.key] = &promotionJob{obj: o}
	s.disk.promoted++
}

// endPromotion removes key's promotion job from d, freeing a reserved
// replica that did not join the object.
func (s *State) endPromotion(d *localDisk, key string) {
	j, ok := d.promotions[key]
	if !ok {
		return
	}
	if j.target != nil && s.segments[j.target.seg.info.ID] == j.target.seg {
		s.freeReplica(j.target)
	}
	delete(d.promotions, key)
	s.disk.promoted--
}

// NotifyPromotion records the outcome of key's promotion into memory
// replica replicaID by clientID: success makes the replica COMPLETE (if
// the object and the replica's segment are still there), failure frees
// it. A promotion not handed out to the caller is OBJECT_NOT_FOUND.
func (s *State) NotifyPromotion(clientID, key string, replicaID uint64, success bool, now time.Time) kvstore.ErrorCode {
	return s.m.result("notify_promotion", s.notifyPromotion(clientID, key, replicaID, success, now))
}

func (s *State) notifyPromotion(clientID, key string, replicaID uint64, success bool, now time.Time) kvstore.ErrorCode {
	d, ok := s.disk.disks[clientID]
	if !ok {
		return kvstore.SegmentNotFound
	}
	s.touch(clientID, now)
	j, ok := d.promotions[key]
	if !ok || j.target == nil || j.target.id != replicaID {
		return kvstore.ObjectNotFound
	}
	live := s.objects.get(key) == j.obj && !j.obj.writing && s.segments[j.target.seg.info.ID] == j.target.seg
	if success && live {
		j.target.status = ReplicaComplete
		j.obj.replicas = append(j.obj.replicas, j.target)
		s.charge(j.obj)
		j.target = nil // it belongs to the object now
	}
	s.endPromotion(d, key)
	if success && !live {
		return kvstore.ObjectNotFound
	}
	return kvstore.OK
}

// sortedMapKeys returns m's keys in order.
func sortedMapKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
