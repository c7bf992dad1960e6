package master

import (
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// replica is a memory replica: a buffer reserved in one segment.
type replica struct {
	id     uint64
	status ReplicaStatus
	seg    *segment
	off    uint64
	size   uint64
}

// object is one key's metadata. The record is the largest of the table's
// per-object costs (docs/store-master-scale.md), so it holds what every
// object has and nothing else: instants are stamps, the small fields
// share one word, what few objects carry (soft pin, upserts, checksum,
// metadata, disk copies) is in meta, and the common case of one memory
// replica lives in the record itself (inline, one) instead of a replica
// and a one-entry list allocated on their own. An object is never
// copied by value: the copy's replica list would point into the
// original's record.
type object struct {
	key string
	// writer is the client that opened the current/last write: the id
	// in its client record (internClient), shared by the objects it
	// writes, 8 bytes in the record where a string takes 16.
	writer   *string
	size     uint64
	putStart stamp // when the current/last write was opened
	// lease is the read lease deadline: Remove (without force) and
	// eviction leave the object alone while now < lease.
	lease stamp
	// charged is what the object counts against its tenant's quota
	// (size × replicas when last charged; see State.charge).
	charged uint64
	// replicas are the memory replicas. An object created with one
	// (newObject) has it in inline, the list's array in one; a list
	// that grows past one entry moves to an array of its own, and
	// replicas put in later are allocated on their own.
	replicas []*replica
	meta     *objectMeta // nil while every field of it is zero
	writing  bool        // a put or upsert is open (replicas PROCESSING)
	hardPin  bool
	// offloading marks an offload queued or in flight, which keeps the
	// memory replicas.
	offloading bool
	// kvMedia is the availability last published as KV events (kv_events.go).
	kvMedia uint8
	inTable bool // in State.objects (objectTable.insert, remove)
	indexed bool // has an entry in State.leases
	inline  replica
	one     [1]*replica
}

// objectMeta is the part of an object record that few objects use; an
// object without any of it keeps none (object.meta is nil).
type objectMeta struct {
	rewrites uint64 // upserts opened on the object; a task copies one version
	// softPinTTL > 0 marks a soft-pinned object; softPinUntil is set when
	// the object first becomes readable.
	softPinTTL   time.Duration
	softPinUntil stamp
	checksum     *uint64
	dataType     int    // upstream ObjectDataType, metadata only
	groupID      string // storage group, metadata only
	// disk holds the object's LOCAL_DISK replicas.
	disk []diskReplica
	// fs is the object's DISK replica on the shared file system
	// (fsdisk.go), nil without one.
	fs *fsReplica
}

// noMeta is what md returns for an object without meta: read it, never
// write it.
var noMeta objectMeta

// md returns o's rarely used fields for reading (all zero without meta).
func (o *object) md() *objectMeta {
	if o.meta == nil {
		return &noMeta
	}
	return o.meta
}

// mdw returns o's rarely used fields for writing, creating them.
func (o *object) mdw() *objectMeta {
	if o.meta == nil {
		o.meta = &objectMeta{}
	}
	return o.meta
}

// empty reports whether every field of m is zero.
func (m *objectMeta) empty() bool {
	return m.rewrites == 0 && m.softPinTTL == 0 && m.softPinUntil == 0 && m.checksum == nil &&
		m.dataType == 0 && m.groupID == "" && len(m.disk) == 0 && m.fs == nil
}

// firstReplicas gives a new object (nothing points at its inline
// replica yet) the replica list reps, which it takes over: a single
// replica is copied into the record (o.inline), and the caller must not
// use reps[0] afterwards.
func (o *object) firstReplicas(reps []*replica) {
	if len(reps) != 1 {
		o.replicas = reps
		return
	}
	o.inline = *reps[0]
	o.one[0] = &o.inline
	o.replicas = o.one[:]
}

// discarded is a quarantined buffer: still reserved in its segment until
// releaseAt, because a (preempted) writer or a leased reader may still
// touch it.
type discarded struct {
	seg       *segment
	off, len  uint64
	releaseAt time.Time
}

// State is the master's pure state machine: objects, segments, clients and
// metrics. Every method takes the current time explicitly; nothing happens
// between calls. State is not safe for concurrent use.
type State struct {
	cfg Config
	rng *rand.Rand
	// ids draws the first reservation id and the task salt, which must
	// differ between two incarnations of a master that keeps no log: a
	// client may still hold an id from the last one. Seeded at random,
	// not from Config.Seed; with the operation log every entry replaces
	// it, as rng, with the entry's deterministic source.
	ids     *rand.Rand
	objects objectTable
	// openWrites holds the objects whose write is open (writing), so the
	// release pass visits them alone, not every object; setWriting keeps
	// it, and the pass drops entries whose object left the table.
	openWrites map[*object]struct{}
	// fsWrites holds the objects whose DISK replica is being written
	// (addFSReplica adds them, putEndDisk and dropFS take them out), so
	// the release pass visits them alone.
	fsWrites map[*object]struct{}
	// softPins counts the objects in the table that are soft-pinned
	// (softPinTTL > 0), kept by addObject, dropObject and setSoftPinTTL,
	// so that Stats does not walk the table.
	softPins int
	// leases orders the evictable objects by lease (lease_index.go).
	leases       leaseIndex
	segments     map[string]*segment // by id
	segOrder     []*segment          // mount order; the allocation walk order
	serving      servingPool         // the tally of segOrder's serving segments
	clients      map[string]*client
	discarded    []discarded
	needEviction bool
	nextReplica  uint64
	// reservations are the blocks clients reserved for one-round-trip
	// puts (reservations.go), by id; nextReservation numbers them.
	reservations    map[uint64]*reservation
	nextReservation uint64
	tenants         map[string]*tenant // registered tenants; DefaultTenant always
	tasks           map[TaskID]*task   // copy and move tasks, until pruned
	// taskSalt, drawn from ids with the first task, is folded into every
	// task id's low half: a restarted master that keeps no log draws the
	// same ids from rng again, and a client may still report a task of
	// the last incarnation.
	taskSalt uint64
	disk     diskTier // local disks, offloads, promotions
	// heat counts the reads of keys in their current window, for
	// dynamic replication (dynamic_replication.go).
	heat map[string]*heatWindow
	m    counters
}

// NewState returns an empty table. cfg must pass Validate.
func NewState(cfg Config) (*State, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &State{
		cfg:        cfg,
		rng:        rand.New(rand.NewSource(cfg.Seed)),
		ids:        rand.New(rand.NewSource(randv2.Int64())),
		openWrites: make(map[*object]struct{}),
		fsWrites:   make(map[*object]struct{}),
		segments:   make(map[string]*segment),
		clients:    make(map[string]*client),
		tenants:    map[string]*tenant{DefaultTenant: {}},
		m:          newCounters(),
	}, nil
}

// Config returns the configuration the state runs with.
func (s *State) Config() Config { return s.cfg }

// describe turns an internal replica into its descriptor.
func (r *replica) describe() Replica {
	ep := r.seg.info.TEEndpoint
	if ep == "" {
		ep = r.seg.info.Name
	}
	return Replica{
		ID: r.id, Status: r.status, SegmentID: r.seg.info.ID, SegmentName: r.seg.info.Name,
		Endpoint: ep, Address: r.seg.info.Base + r.off, Size: r.size,
	}
}

func describeAll(rs []*replica) []Replica {
	out := make([]Replica, len(rs))
	for i, r := range rs {
		out[i] = r.describe()
	}
	return out
}

// freeReplica returns a replica's buffer to its segment.
func (s *State) freeReplica(r *replica) {
	s.freeIn(r.seg, r.off, r.size)
}

// discard quarantines a replica's buffer until releaseAt.
func (s *State) discard(r *replica, releaseAt time.Time) {
	s.discarded = append(s.discarded, discarded{seg: r.seg, off: r.off, len: r.size, releaseAt: releaseAt})
}

// erase drops an object and frees all its buffers.
func (s *State) erase(o *object) {
	for _, r := range o.replicas {
		s.freeReplica(r)
	}
	o.replicas = nil
	s.forgetDisk(o)
	s.dropObject(o)
	s.charge(o)
}

// addObject enters o into the table under its key, in place of any
// object the key held.
func (s *State) addObject(o *object) {
	if old, ok := s.objects.lookup(o.key); ok {
		s.dropObject(old)
	}
	s.objects.insert(o)
	if o.md().softPinTTL > 0 {
		s.softPins++
	}
}

// dropObject removes o from the table, if it is there.
func (s *State) dropObject(o *object) {
	if !s.objects.remove(o) {
		return
	}
	if o.md().softPinTTL > 0 {
		s.softPins--
	}
}

// setSoftPinTTL sets o's soft pin (0: none), keeping State.softPins.
func (s *State) setSoftPinTTL(o *object, ttl time.Duration) {
	if s.objects.get(o.key) == o {
		switch {
		case o.md().softPinTTL > 0 && ttl <= 0:
			s.softPins--
		case o.md().softPinTTL <= 0 && ttl > 0:
			s.softPins++
		}
	}
	if ttl != 0 || o.meta != nil {
		o.mdw().softPinTTL = ttl
	}
}

// readable returns the object's COMPLETE replicas.
func (o *object) readable() []*replica {
	var out []*replica
	for _, r := range o.replicas {
		if r.status == ReplicaComplete {
			out = append(out, r)
		}
	}
	return out
}

// allComplete reports whether the object has replicas and all are COMPLETE
// with no write open.
func (o *object) allComplete() bool {
	if o.writing || o.gone() {
		return false
	}
	for _, r := range o.replicas {
		if r.status != ReplicaComplete {
			return false
		}
	}
	return true
}

// leased reports whether a read lease is still active at now.
func (o *object) leased(now time.Time) bool { return now.Before(o.lease.time()) }

// internClient returns clientID as an object's writer: the id in the
// client's record when the client is registered, so that the objects a
// client writes share one copy of its id instead of one each from its
// requests (a record the client table forgets stays while objects point
// at it), else a copy of its own.
func (s *State) internClient(clientID string) *string {
	if c, ok := s.clients[clientID]; ok {
		return &c.id
	}
	own := clientID // on the heap on this path alone
	return &own
}

// writerID is the id of the client that opened o's current or last
// write.
func (o *object) writerID() string {
	if o.writer == nil {
		return ""
	}
	return *o.writer
}

// setWriting opens (w) or closes o's write, and keeps State.openWrites.
func (s *State) setWriting(o *object, w bool) {
	o.writing = w
	if w {
		s.openWrites[o] = struct{}{}
	} else {
		delete(s.openWrites, o)
	}
}

// grantLease extends the read lease to at least now+ttl.
func (o *object) grantLease(now time.Time, ttl time.Duration) {
	if d := stampOf(now.Add(ttl)); d > o.lease {
		o.lease = d
	}
}

// ReleaseExpired frees quarantined buffers whose time has come, discards
// writes left open longer than PutStartReleaseTimeout (their PROCESSING
// replicas are freed; an object left without replicas disappears) and
// forgets tasks finished more than 10 minutes ago. It returns the number
// of writes discarded.
func (s *State) ReleaseExpired(now time.Time) int {
	kept := s.discarded[:0]
	for _, d := range s.discarded {
		if !now.Before(d.releaseAt) {
			s.freeIn(d.seg, d.off, d.len)
		} else {
			kept = append(kept, d)
		}
	}
	clear(s.discarded[len(kept):])
	s.discarded = kept

	var stale []*object
	for o := range s.openWrites {
		switch {
		case !o.writing || s.objects.get(o.key) != o:
			delete(s.openWrites, o)
		case now.Sub(o.putStart.time()) > s.cfg.PutStartReleaseTimeout:
			stale = append(stale, o)
		}
	}
	// In key order, so that a replica of the log frees the same buffers
	// in the same order as the leader.
	slices.SortFunc(stale, func(a, b *object) int { return strings.Compare(a.key, b.key) })
	for _, o := range stale {
		s.dropProcessing(o, s.freeReplica)
	}
	s.pruneTasks(now)
	s.pruneHeat(now)
	s.releaseStaleFS(now)
	return len(stale)
}

// dropProcessing removes the object's PROCESSING replicas, handing each to
// release, closes the write, and erases the object if nothing is left.
func (s *State) dropProcessing(o *object, release func(*replica)) {
	kept := o.replicas[:0]
	for _, r := range o.replicas {
		if r.status == ReplicaProcessing {
			release(r)
		} else {
			kept = append(kept, r)
		}
	}
	o.replicas = kept
	s.setWriting(o, false)
	s.dropFSProcessing(o)
	if o.gone() {
		s.dropObject(o)
	}
	s.charge(o)
}

// sortedKeys returns all keys in order, so that bulk operations are
// deterministic.
func (s *State) sortedKeys() []string {
	keys := make([]string, 0, s.objects.len())
	for o := range s.objects.all() {
		keys = append(keys, o.key)
	}
	sort.Strings(keys)
	return keys
}

// ObjectInfo is a snapshot of one object, for the admin endpoint and tests.
type ObjectInfo struct {
	Key          string
	Size         uint64
	Writer       string
	Writing      bool
	Replicas     []Replica
	LeaseUntil   time.Time
	SoftPinned   bool
	SoftPinUntil time.Time
	HardPinned   bool
	DataType     int
	GroupID      string
}

// QueryKey returns a snapshot of key's metadata without granting a lease.
func (s *State) QueryKey(key string) (ObjectInfo, bool) {
	o, ok := s.objects.lookup(key)
	if !ok {
		return ObjectInfo{}, false
	}
	return ObjectInfo{
		Key: o.key, Size: o.size, Writer: o.writerID(), Writing: o.writing,
		Replicas: append(describeAll(o.replicas), s.diskDescriptors(o)...), LeaseUntil: o.lease.time(),
		SoftPinned: o.md().softPinTTL > 0, SoftPinUntil: o.md().softPinUntil.time(), HardPinned: o.hardPin,
		DataType: o.md().dataType, GroupID: o.md().groupID,
	}, true
}

// Keys returns every key, sorted.
func (s *State) Keys() []string { return s.sortedKeys() }

// String summarises the state for debugging.
func (s *State) String() string {
	st := s.Stats()
	return fmt.Sprintf("keys=%d segments=%d clients=%d allocated=%d/%d",
		st.KeyCount, st.Segments, st.ActiveClients, st.AllocatedBytes, st.CapacityBytes)
}
