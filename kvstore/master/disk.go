package master

import (
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// This file holds the master's view of the disk tier: the local disks
// storage clients mount and the LOCAL_DISK replicas on them. The bytes
// live in the clients' files; the master records only which client holds
// which object (see disk_tasks.go for how copies get there and back).

// ReplicaType says where a replica lives, numbered as the proto enum.
type ReplicaType int

// Replica types.
const (
	ReplicaMemory    ReplicaType = 0
	ReplicaDisk      ReplicaType = 1
	ReplicaLocalDisk ReplicaType = 2
)

// String returns the upstream name of the type.
func (t ReplicaType) String() string {
	return [...]string{"MEMORY", "DISK", "LOCAL_DISK"}[t]
}

// diskReplica is an object's copy on a client's local disk.
type diskReplica struct {
	client string
}

// localDisk is a storage client's mounted disk.
type localDisk struct {
	client   string
	endpoint string // host:port of its offload RPC server
	capacity uint64
	// offloads are the keys whose offload to this disk is queued
	// (sent zero) or handed out (sent set), with the object they copy.
	offloads map[string]*offloadJob
	// promotions are queued or handed out promotions from this disk.
	promotions map[string]*promotionJob
	// deletes are keys whose copies the disk should delete, delivered
	// with the next heartbeat.
	deletes []string
}

// deleteLater asks the disk to delete key's copy at its next heartbeat.
func (d *localDisk) deleteLater(key string) {
	if !slices.Contains(d.deletes, key) {
		d.deletes = append(d.deletes, key)
	}
}

// diskTier is the state's disk bookkeeping.
type diskTier struct {
	disks    map[string]*localDisk // by client id
	queued   int                   // offload jobs across disks
	promoted int                   // promotion jobs across disks
	hits     *countMinSketch       // disk-only reads per key
	// fsDeletes are files of dropped DISK replicas (shared file
	// system), relative to FSConfig.Dir, for the server to delete.
	fsDeletes []string
}

// DiskObject is an object a client announces from its disk.
type DiskObject struct {
	Key  string
	Size uint64
}

// gone reports whether the object has no replica left, in memory or on
// disk.
func (o *object) gone() bool {
	return len(o.replicas) == 0 && len(o.md().disk) == 0 && o.md().fs == nil
}

// MountLocalDisk registers clientID's disk, served at endpoint, and takes
// the objects already on it as LOCAL_DISK replicas: an absent key becomes
// a disk-only object, a present one of the same size gains the replica.
// It returns the indices of the objects refused (the key holds an object
// of another size, or is being written). Errors: UNABLE_OFFLOAD (offload
// is disabled), INVALID_PARAMS (no client id or endpoint).
func (s *State) MountLocalDisk(clientID, endpoint string, capacity uint64, objects []DiskObject, now time.Time) ([]int, kvstore.ErrorCode) {
	rejected, code := s.mountLocalDisk(clientID, endpoint, capacity, objects, now)
	return rejected, s.m.result("mount_local_disk_segment", code)
}

func (s *State) mountLocalDisk(clientID, endpoint string, capacity uint64, objects []DiskObject, now time.Time) ([]int, kvstore.ErrorCode) {
	if !s.cfg.Offload.Enable {
		return nil, kvstore.UnableOffload
	}
	if clientID == "" || endpoint == "" {
		return nil, kvstore.InvalidParams
	}
	s.touch(clientID, now)
	if s.disk.disks == nil {
		s.disk.disks = map[string]*localDisk{}
	}
	d, ok := s.disk.disks[clientID]
	if !ok {
		d = &localDisk{client: clientID, offloads: map[string]*offloadJob{}, promotions: map[string]*promotionJob{}}
		s.disk.disks[clientID] = d
	}
	d.endpoint, d.capacity = endpoint, capacity
	var rejected []int
	for i, obj := range objects {
		if !s.adoptDiskObject(clientID, obj, now) {
			rejected = append(rejected, i)
		}
	}
	return rejected, kvstore.OK
}

// adoptDiskObject records obj as a replica on clientID's disk.
func (s *State) adoptDiskObject(clientID string, obj DiskObject, now time.Time) bool {
	if tenant, _ := s.splitKey(obj.Key); obj.Key == "" || obj.Size == 0 || s.tenants[tenant] == nil {
		return false
	}
	o, ok := s.objects.lookup(obj.Key)
	if !ok {
		o = &object{key: obj.Key, size: obj.Size, writer: s.internClient(clientID), putStart: stampOf(now)}
		s.addObject(o)
		s.charge(o)
	}
	if o.writing || o.size != obj.Size {
		return false
	}
	o.addDisk(clientID)
	s.kvAvailability(o)
	return true
}

// addDisk records a copy on clientID's disk (once).
func (o *object) addDisk(clientID string) {
	if !slices.ContainsFunc(o.md().disk, func(r diskReplica) bool { return r.client == clientID }) {
		m := o.mdw()
		m.disk = append(m.disk, diskReplica{client: clientID})
	}
}

// UnmountLocalDisk forgets clientID's disk: its replicas are dropped
// (objects left without any disappear), its queued offloads and
// promotions are cancelled. An unknown disk is SEGMENT_NOT_FOUND.
func (s *State) UnmountLocalDisk(clientID string, now time.Time) kvstore.ErrorCode {
	if _, ok := s.disk.disks[clientID]; !ok {
		return s.m.result("unmount_local_disk_segment", kvstore.SegmentNotFound)
	}
	s.touch(clientID, now)
	s.unmountDisk(clientID)
	return s.m.result("unmount_local_disk_segment", kvstore.OK)
}

// unmountDisk drops clientID's disk, if it has one.
func (s *State) unmountDisk(clientID string) {
	d, ok := s.disk.disks[clientID]
	if !ok {
		return
	}
	for key := range d.offloads {
		s.endOffload(d, key)
	}
	for key := range d.promotions {
		s.endPromotion(d, key)
	}
	for o := range s.objects.all() {
		if s.dropDiskReplica(o, clientID) && o.gone() {
			s.dropObject(o)
			s.charge(o)
		}
	}
	delete(s.disk.disks, clientID)
}

// dropDiskReplica removes o's copy on clientID's disk; false if it had
// none.
func (s *State) dropDiskReplica(o *object, clientID string) bool {
	m := o.md()
	n := len(m.disk)
	if n > 0 {
		m.disk = slices.DeleteFunc(m.disk, func(r diskReplica) bool { return r.client == clientID })
	}
	s.kvAvailability(o)
	return len(m.disk) < n
}

// forgetDisk drops all of o's disk copies, asking their disks to delete
// the files, and cancels its pending offloads and promotions.
func (s *State) forgetDisk(o *object) {
	for _, r := range o.md().disk {
		if d, ok := s.disk.disks[r.client]; ok {
			d.deleteLater(o.key)
		}
	}
	if o.meta != nil {
		o.meta.disk = nil
	}
	s.dropFS(o)
	for _, d := range s.disk.disks {
		if j, ok := d.offloads[o.key]; ok && j.obj == o {
			if !j.sent.IsZero() {
				d.deleteLater(o.key) // it may land after all
			}
			s.endOffload(d, o.key)
		}
		if j, ok := d.promotions[o.key]; ok && j.obj == o {
			s.endPromotion(d, o.key)
		}
	}
}

// dropDiskCopies forgets o's disk copies before an overwrite and reports
// whether o is left without replicas (it is then removed from the table,
// and the caller writes the key anew).
func (s *State) dropDiskCopies(o *object) bool {
	if len(o.md().disk) == 0 && !o.offloading && o.md().fs == nil {
		return false
	}
	s.forgetDisk(o)
	if len(o.replicas) > 0 {
		return false
	}
	s.dropObject(o)
	s.charge(o)
	return true
}

// diskDescriptors lists o's disk replicas as readers receive them.
func (s *State) diskDescriptors(o *object) []Replica {
	var out []Replica
	for _, r := range o.md().disk {
		d, ok := s.disk.disks[r.client]
		if !ok {
			continue
		}
		out = append(out, Replica{Type: ReplicaLocalDisk, Status: ReplicaComplete, Endpoint: d.endpoint,
			Size: o.size, DiskClient: r.client, DiskKey: o.key})
	}
	if o.fsReadable() {
		out = append(out, o.fsDescriptor()...)
	}
	return out
}

// DiskStats are the disk tier's gauges.
type DiskStats struct {
	Disks             int
	DiskOnlyKeys      int
	PendingOffloads   int
	PendingPromotions int
}

func (s *State) diskStats() DiskStats {
	st := DiskStats{Disks: len(s.disk.disks), PendingOffloads: s.disk.queued, PendingPromotions: s.disk.promoted}
	if st.Disks == 0 {
		return st // disk replicas live only on mounted disks (unmountDisk)
	}
	for o := range s.objects.all() {
		if len(o.replicas) == 0 && len(o.md().disk) > 0 {
			st.DiskOnlyKeys++
		}
	}
	return st
}

// DiskInfo is a snapshot of one mounted disk.
type DiskInfo struct {
	ClientID         string
	Endpoint         string
	CapacityBytes    uint64
	Objects          int
	PendingOffloads  int
	PendingPromotion int
}

// LocalDisks returns the mounted disks, by client id.
func (s *State) LocalDisks() []DiskInfo {
	var out []DiskInfo
	for id, d := range s.disk.disks {
		n := 0
		for o := range s.objects.all() {
			if slices.ContainsFunc(o.md().disk, func(r diskReplica) bool { return r.client == id }) {
				n++
			}
		}
		out = append(out, DiskInfo{ClientID: id, Endpoint: d.endpoint, CapacityBytes: d.capacity, Objects: n,
			PendingOffloads: len(d.offloads), PendingPromotion: len(d.promotions)})
	}
	slices.SortFunc(out, func(a, b DiskInfo) int {
		if a.ClientID < b.ClientID {
			return -1
		}
		if a.ClientID > b.ClientID {
			return 1
		}
		return 0
	})
	return out
}
