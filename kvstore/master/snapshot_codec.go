package master

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// This file is the metadata snapshot's format (docs/design/oplog.md,
// "Snapshot format"): the whole State at a point of the operation log, written
// by encodeSnapshot and read back by decodeSnapshot. A file is
//
//	"MCSN" version(1 byte) uvarint(seq) uvarint(next entry) body crc32c(4 bytes, big endian)
//
// seq is the last batch the snapshot covers and the next entry the number
// of the first entry after it; the checksum covers every byte before it.
// The body lists, in a fixed order with every map sorted by key, the
// segments any replica or quarantined buffer points at, then the
// replicas (each once: a task or a promotion may share an object's
// replica), then the objects, and the rest of the state, each reference
// as an index into an earlier table (0 is nil). The same State always
// encodes to the same bytes.

const (
	snapshotMagic = "MCSN"
	// snapshotVersion 2 added the reservations, 3 the task salt, 4 the
	// segments' incarnations and the suspect clients, 5 the clients' keys
	// (client_identity.go), 6 the tasks' hand-out counts and the keys'
	// read windows of dynamic replication; older files still load (a
	// state without a salt draws one with its next task; segments of
	// incarnation 0 match any, no client is suspect, a client without a
	// key binds one with its next call, a task's hand-outs count from 0,
	// and the read windows start empty). 7 dropped the allocators' table
	// of allocations (the holders know their ranges; older files' tables
	// are read, checked and dropped) and gave each quarantined buffer its
	// length.
	snapshotVersion = 7
)

var (
	errBadSnapshot      = errors.New("snapshot: malformed")
	errSnapshotChecksum = errors.New("snapshot: checksum mismatch (corrupt or truncated file)")
	crc32c              = crc32.MakeTable(crc32.Castagnoli)
)

// snapshotEncoder builds a snapshot's body.
type snapshotEncoder struct {
	b    []byte
	segs map[*segment]uint64
	reps map[*replica]uint64
	objs map[*object]uint64
}

func (e *snapshotEncoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *snapshotEncoder) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *snapshotEncoder) str(s string)     { e.b = replication.AppendString(e.b, s) }
func (e *snapshotEncoder) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// time writes a flag and, for a non-zero time, its Unix nanoseconds.
func (e *snapshotEncoder) time(t time.Time) {
	e.boolean(!t.IsZero())
	if !t.IsZero() {
		e.varint(t.UnixNano())
	}
}

func (e *snapshotEncoder) strs(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

func (e *snapshotEncoder) addSeg(sg *segment, order *[]*segment) {
	if sg == nil {
		return
	}
	if _, ok := e.segs[sg]; !ok {
		e.segs[sg] = uint64(len(*order)) + 1
		*order = append(*order, sg)
	}
}

func (e *snapshotEncoder) addRep(r *replica, order *[]*replica) {
	if r == nil {
		return
	}
	if _, ok := e.reps[r]; !ok {
		e.reps[r] = uint64(len(*order)) + 1
		*order = append(*order, r)
	}
}

// encodeSnapshot serialises st as the state after batch seq, whose next
// entry is nextN.
func encodeSnapshot(st *State, seq, nextN uint64) []byte {
	e := &snapshotEncoder{segs: map[*segment]uint64{}, reps: map[*replica]uint64{}, objs: map[*object]uint64{}}
	e.b = append(e.b, snapshotMagic...)
	e.b = append(e.b, snapshotVersion)
	e.uvarint(seq)
	e.uvarint(nextN)

	// Objects: the table's, then those only a disk job still points at.
	var objs []*object
	for _, k := range st.sortedKeys() {
		o := st.objects.get(k)
		e.objs[o] = uint64(len(objs)) + 1
		objs = append(objs, o)
	}
	diskClients := sortedMapKeys(st.disk.disks)
	for _, c := range diskClients {
		d := st.disk.disks[c]
		for _, k := range sortedMapKeys(d.offloads) {
			if o := d.offloads[k].obj; e.objs[o] == 0 {
				e.objs[o] = uint64(len(objs)) + 1
				objs = append(objs, o)
			}
		}
		for _, k := range sortedMapKeys(d.promotions) {
			if o := d.promotions[k].obj; e.objs[o] == 0 {
				e.objs[o] = uint64(len(objs)) + 1
				objs = append(objs, o)
			}
		}
	}
	taskIDs := make([]TaskID, 0, len(st.tasks))
	for id := range st.tasks {
		taskIDs = append(taskIDs, id)
	}
	sort.Slice(taskIDs, func(i, j int) bool {
		a, b := taskIDs[i], taskIDs[j]
		return a.Hi < b.Hi || (a.Hi == b.Hi && a.Lo < b.Lo)
	})

	// Replicas, each once.
	var reps []*replica
	for _, o := range objs {
		for _, r := range o.replicas {
			e.addRep(r, &reps)
		}
	}
	for _, id := range taskIDs {
		t := st.tasks[id]
		e.addRep(t.source, &reps)
		for _, r := range t.targets {
			e.addRep(r, &reps)
		}
	}
	for _, c := range diskClients {
		d := st.disk.disks[c]
		for _, k := range sortedMapKeys(d.promotions) {
			e.addRep(d.promotions[k].target, &reps)
		}
	}

	// Segments: mounted ones in mount order, then any other one still
	// pointed at (unmounted with buffers in quarantine or in a task).
	var segs []*segment
	for _, sg := range st.segOrder {
		e.addSeg(sg, &segs)
	}
	for _, id := range sortedMapKeys(st.segments) {
		e.addSeg(st.segments[id], &segs)
	}
	for _, r := range reps {
		e.addSeg(r.seg, &segs)
	}
	for _, d := range st.discarded {
		e.addSeg(d.seg, &segs)
	}

	e.uvarint(uint64(len(segs)))
	for _, sg := range segs {
		i := sg.info
		e.str(i.ID)
		e.str(i.Name)
		e.uvarint(i.Base)
		e.uvarint(i.Size)
		e.str(i.TEEndpoint)
		e.str(i.Protocol)
		e.str(i.HostID)
		e.varint(int64(i.HighWatermark))
		e.varint(int64(i.LowWatermark))
		e.str(sg.client)
		e.varint(int64(sg.mode))
		a := sg.alloc
		e.uvarint(a.size)
		e.uvarint(a.allocated)
		e.uvarint(uint64(len(a.free)))
		for _, x := range a.free {
			e.uvarint(x.off)
			e.uvarint(x.len)
		}
	}
	mounted := sortedMapKeys(st.segments)
	e.uvarint(uint64(len(mounted)))
	for _, id := range mounted {
		e.uvarint(e.segs[st.segments[id]])
	}
	e.uvarint(uint64(len(st.segOrder)))
	for _, sg := range st.segOrder {
		e.uvarint(e.segs[sg])
	}

	e.uvarint(uint64(len(reps)))
	for _, r := range reps {
		e.uvarint(r.id)
		e.varint(int64(r.status))
		e.uvarint(e.segs[r.seg])
		e.uvarint(r.off)
		e.uvarint(r.size)
	}

	e.uvarint(uint64(len(objs)))
	for _, o := range objs {
		e.boolean(st.objects.get(o.key) == o)
		e.str(o.key)
		e.uvarint(o.size)
		e.str(o.writerID())
		e.time(o.putStart.time())
		e.boolean(o.writing)
		e.uvarint(o.md().rewrites)
		e.uvarint(uint64(len(o.replicas)))
		for _, r := range o.replicas {
			e.uvarint(e.reps[r])
		}
		e.time(o.lease.time())
		e.varint(int64(o.md().softPinTTL))
		e.time(o.md().softPinUntil.time())
		e.boolean(o.hardPin)
		e.boolean(o.md().checksum != nil)
		if o.md().checksum != nil {
			e.uvarint(*o.md().checksum)
		}
		e.varint(int64(o.md().dataType))
		e.str(o.md().groupID)
		e.uvarint(o.charged)
		e.uvarint(uint64(len(o.md().disk)))
		for _, d := range o.md().disk {
			e.str(d.client)
		}
		e.boolean(o.offloading)
		e.boolean(o.md().fs != nil)
		if o.md().fs != nil {
			e.varint(int64(o.md().fs.status))
			e.str(o.md().fs.rel)
			e.str(o.md().fs.writer)
			e.time(o.md().fs.started)
		}
	}

	clients := sortedMapKeys(st.clients)
	e.uvarint(uint64(len(clients)))
	for _, id := range clients {
		c := st.clients[id]
		e.str(c.id)
		e.time(c.lastSeen)
		e.boolean(c.ok)
		e.strs(c.segments)
	}

	e.uvarint(uint64(len(st.discarded)))
	for _, d := range st.discarded {
		e.uvarint(e.segs[d.seg])
		e.uvarint(d.off)
		e.uvarint(d.len)
		e.time(d.releaseAt)
	}
	e.boolean(st.needEviction)
	e.uvarint(st.nextReplica)

	tenants := sortedMapKeys(st.tenants)
	e.uvarint(uint64(len(tenants)))
	for _, name := range tenants {
		t := st.tenants[name]
		e.str(name)
		e.uvarint(t.quota)
		e.uvarint(t.used)
		e.varint(int64(t.objects))
	}

	e.uvarint(uint64(len(taskIDs)))
	for _, id := range taskIDs {
		t := st.tasks[id]
		e.uvarint(id.Hi)
		e.uvarint(id.Lo)
		e.varint(int64(t.typ))
		e.varint(int64(t.status))
		e.str(t.key)
		e.uvarint(t.size)
		e.uvarint(e.reps[t.source])
		e.uvarint(uint64(len(t.targets)))
		for _, r := range t.targets {
			e.uvarint(e.reps[r])
		}
		e.str(t.client)
		e.str(t.assignee)
		e.time(t.created)
		e.time(t.updated)
		e.uvarint(t.version)
		e.time(t.sent)
		e.str(t.message)
	}

	e.uvarint(uint64(len(diskClients)))
	for _, c := range diskClients {
		d := st.disk.disks[c]
		e.str(d.client)
		e.str(d.endpoint)
		e.uvarint(d.capacity)
		offs := sortedMapKeys(d.offloads)
		e.uvarint(uint64(len(offs)))
		for _, k := range offs {
			j := d.offloads[k]
			e.str(k)
			e.uvarint(e.objs[j.obj])
			e.time(j.sent)
		}
		proms := sortedMapKeys(d.promotions)
		e.uvarint(uint64(len(proms)))
		for _, k := range proms {
			j := d.promotions[k]
			e.str(k)
			e.uvarint(e.objs[j.obj])
			e.uvarint(e.reps[j.target])
			e.time(j.sent)
		}
		e.strs(d.deletes)
	}
	e.varint(int64(st.disk.queued))
	e.varint(int64(st.disk.promoted))
	e.strs(st.disk.fsDeletes)

	for _, m := range []map[string]uint64{st.m.requests, st.m.failures} {
		ops := sortedMapKeys(m)
		e.uvarint(uint64(len(ops)))
		for _, op := range ops {
			e.str(op)
			e.uvarint(m[op])
		}
	}
	for _, v := range []uint64{st.m.evictedKeys, st.m.evictedBytes, st.m.evictionRuns, st.m.preempted, st.m.partialAllocs, st.m.expiredClients} {
		e.uvarint(v)
	}

	// Reservations (version 2), in id order.
	e.uvarint(st.nextReservation)
	ids := sortedMapKeys(st.reservations)
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		r := st.reservations[id]
		e.uvarint(r.id)
		e.str(r.client)
		e.uvarint(e.segs[r.seg])
		e.uvarint(r.start)
		e.uvarint(uint64(len(r.pieces)))
		for _, p := range r.pieces {
			e.uvarint(p.off)
			e.uvarint(p.len)
		}
	}

	// The task salt (version 3).
	e.uvarint(st.taskSalt)

	// Incarnations, in segment table order, the suspect clients and
	// their counters (version 4).
	for _, sg := range segs {
		e.uvarint(sg.info.Incarnation)
	}
	var suspect []string
	for _, id := range clients {
		if st.clients[id].suspect {
			suspect = append(suspect, id)
		}
	}
	e.strs(suspect)
	for _, v := range []uint64{st.m.suspectedClients, st.m.restoredClients, st.m.replacedSegments} {
		e.uvarint(v)
	}

	// The clients' keys, in client order (empty: none), and the identity
	// refusals (version 5).
	for _, id := range clients {
		if c := st.clients[id]; c.keyed {
			e.str(string(c.key[:]))
		} else {
			e.str("")
		}
	}
	e.uvarint(st.m.identityRefused)

	// The tasks' hand-out counts, in task order (version 6).
	for _, id := range taskIDs {
		e.uvarint(uint64(st.tasks[id].deliveries))
	}
	// The read windows, in key order, and dynamic replication's counters.
	e.uvarint(uint64(len(st.heat)))
	for _, key := range sortedMapKeys(st.heat) {
		e.str(key)
		e.time(st.heat[key].start)
		e.uvarint(st.heat[key].hits)
	}
	e.uvarint(st.m.dynReplProposals)
	e.uvarint(st.m.dynReplTasks)
	return binary.BigEndian.AppendUint32(e.b, crc32.Checksum(e.b, crc32c))
}

// snapshotDecoder reads a snapshot body; every failure is errBadSnapshot.
type snapshotDecoder struct {
	replication.Decoder
	// oldUsed holds a version 1-6 file's table of allocations (offset to
	// length) per segment, to give quarantined buffers their lengths and
	// check reservation pieces against; newer files have none.
	oldUsed map[*segment]map[uint64]uint64
	segs    []*segment
	reps    []*replica
	objs    []*object
	// writers holds the objects' writer ids read so far, so that the
	// objects of one client share one string (State.internClient).
	writers map[string]*string
}

func (d *snapshotDecoder) str() string { return string(d.Bytes()) }

// writer reads a client id, interned in d.writers.
func (d *snapshotDecoder) writer() *string {
	b := d.Bytes()
	if w, ok := d.writers[string(b)]; ok {
		return w
	}
	w := string(b)
	if d.writers == nil {
		d.writers = make(map[string]*string)
	}
	d.writers[w] = &w
	return &w
}
func (d *snapshotDecoder) boolean() bool {
	v := d.Byte()
	if v > 1 {
		d.Err = errBadSnapshot
	}
	return v == 1
}
func (d *snapshotDecoder) time() time.Time {
	if !d.boolean() {
		return time.Time{}
	}
	return time.Unix(0, d.Varint())
}
func (d *snapshotDecoder) int() int { return int(d.Varint()) }

// count reads a length whose items each take at least least bytes.
func (d *snapshotDecoder) count(least int) int {
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.B)/least) {
		d.Err = errBadSnapshot
	}
	if d.Err != nil {
		return 0
	}
	return int(n)
}

func (d *snapshotDecoder) strs() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str()
	}
	return out
}

// ref reads a 1-based index into a table of size n; 0 is nil.
func (d *snapshotDecoder) ref(n int) int {
	i := d.Uvarint()
	if i > uint64(n) {
		d.Err = errBadSnapshot
		return 0
	}
	return int(i)
}

func (d *snapshotDecoder) seg() *segment {
	if i := d.ref(len(d.segs)); i > 0 {
		return d.segs[i-1]
	}
	return nil
}

func (d *snapshotDecoder) rep() *replica {
	if i := d.ref(len(d.reps)); i > 0 {
		return d.reps[i-1]
	}
	return nil
}

func (d *snapshotDecoder) obj() *object {
	if i := d.ref(len(d.objs)); i > 0 {
		return d.objs[i-1]
	}
	return nil
}

// snapshotHeader is where in the log a snapshot was taken.
type snapshotHeader struct {
	seq   uint64 // last batch covered
	nextN uint64 // number of the first entry after it
}

// reservations reads the reservation table: each piece must be a live
// allocation of its segment of exactly its length, inside the segment's
// mounted table.
func (d *snapshotDecoder) reservations(st *State) {
	type place struct {
		seg *segment
		off uint64
	}
	// Every buffer a replica or the quarantine holds: a piece may be none.
	held := map[place]bool{}
	for _, r := range d.reps {
		held[place{r.seg, r.off}] = true
	}
	for _, q := range st.discarded {
		held[place{q.seg, q.off}] = true
	}
	st.nextReservation = d.Uvarint()
	n := d.count(5)
	if n > 0 {
		st.reservations = make(map[uint64]*reservation, n)
	}
	for i := 0; i < n && d.Err == nil; i++ {
		r := &reservation{id: d.Uvarint(), client: d.str(), seg: d.seg(), start: d.Uvarint()}
		for j, m := 0, d.count(2); j < m && d.Err == nil; j++ {
			p := extent{off: d.Uvarint(), len: d.Uvarint()}
			if r.seg == nil || p.len == 0 || p.off < r.start || held[place{r.seg, p.off}] || !d.inOldTable(r.seg, p.off, p.len) {
				d.Err = errBadSnapshot
			}
			held[place{r.seg, p.off}] = true
			r.pieces = append(r.pieces, p)
		}
		if r.seg == nil || r.id == 0 || r.id > st.nextReservation || st.reservations[r.id] != nil || len(r.pieces) == 0 {
			d.Err = errBadSnapshot
		}
		st.reservations[r.id] = r
	}
}

// oldTable reads a version 1-6 allocator's table of allocations into
// d.oldUsed: the entries must be aligned ranges inside the segment that
// overlap no free extent, tile the segment with the free extents, and add
// up to the allocated count.
func (d *snapshotDecoder) oldTable(sg *segment, a *Allocator) {
	if d.oldUsed == nil {
		d.oldUsed = map[*segment]map[uint64]uint64{}
	}
	m := map[uint64]uint64{}
	var sum uint64
	for j, n := 0, d.count(2); j < n && d.Err == nil; j++ {
		off, l := d.Uvarint(), d.Uvarint()
		if _, dup := m[off]; dup || !a.holds(off, l) {
			d.Err = errBadSnapshot
		}
		m[off] = l
		sum += l
	}
	if d.Err == nil && sum != a.allocated {
		d.Err = errBadSnapshot
	}
	d.oldUsed[sg] = m
}

// inOldTable reports whether a version 1-6 file's table holds exactly
// [off, off+n) in sg; a newer file has no table and the state's
// validation checks every held range instead.
func (d *snapshotDecoder) inOldTable(sg *segment, off, n uint64) bool {
	if d.oldUsed == nil {
		return true
	}
	l, ok := d.oldUsed[sg][off]
	return ok && l == n
}

// decodeSnapshot parses a snapshot into a State running with cfg. It
// never panics on bad input (FuzzDecodeSnapshot): a reference that does
// not resolve, an allocator that does not add up, a truncated or
// corrupted file is an error.
func decodeSnapshot(b []byte, cfg Config) (*State, snapshotHeader, error) {
	var h snapshotHeader
	if len(b) < len(snapshotMagic)+1+4 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, h, errBadSnapshot
	}
	version := b[len(snapshotMagic)]
	if version < 1 || version > snapshotVersion {
		return nil, h, fmt.Errorf("snapshot: version %d, want 1 to %d", version, snapshotVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crc32c) != sum {
		return nil, h, errSnapshotChecksum
	}
	st, err := NewState(cfg)
	if err != nil {
		return nil, h, err
	}
	d := &snapshotDecoder{Decoder: replication.Decoder{B: body[len(snapshotMagic)+1:]}}
	h.seq, h.nextN = d.Uvarint(), d.Uvarint()

	d.segs = make([]*segment, d.count(15))
	for i := range d.segs {
		sg := &segment{}
		sg.info = Segment{ID: d.str(), Name: d.str(), Base: d.Uvarint(), Size: d.Uvarint(),
			TEEndpoint: d.str(), Protocol: d.str(), HostID: d.str(), HighWatermark: d.int(), LowWatermark: d.int()}
		sg.client = d.str()
		sg.mode = SegmentMode(d.int())
		a := &Allocator{size: d.Uvarint(), allocated: d.Uvarint()}
		if n := d.count(2); n > 0 {
			a.free = make([]extent, n)
			for j := range a.free {
				a.free[j] = extent{off: d.Uvarint(), len: d.Uvarint()}
			}
		}
		if version < 7 {
			d.oldTable(sg, a)
		}
		sg.alloc = a
		d.segs[i] = sg
	}
	for i, n := 0, d.count(1); i < n; i++ {
		if sg := d.seg(); sg != nil {
			st.segments[sg.info.ID] = sg
		} else {
			d.Err = errBadSnapshot
		}
	}
	if n := d.count(1); n > 0 {
		st.segOrder = make([]*segment, n)
		for i := range st.segOrder {
			if st.segOrder[i] = d.seg(); st.segOrder[i] == nil {
				d.Err = errBadSnapshot
			}
		}
	}

	d.reps = make([]*replica, d.count(5))
	for i := range d.reps {
		r := &replica{id: d.Uvarint(), status: ReplicaStatus(d.int()), seg: d.seg(), off: d.Uvarint(), size: d.Uvarint()}
		if r.seg == nil {
			d.Err = errBadSnapshot
		}
		d.reps[i] = r
	}

	d.objs = make([]*object, d.count(12))
	for i := range d.objs {
		inTable := d.boolean()
		var m objectMeta
		o := &object{key: d.str(), size: d.Uvarint(), writer: d.writer(), putStart: stampOf(d.time()), writing: d.boolean()}
		m.rewrites = d.Uvarint()
		if n := d.count(1); n == 1 {
			// In the record (object.firstReplicas); whoever refers to
			// the replica further on (a task) gets the one in the record.
			if j := d.ref(len(d.reps)); j > 0 {
				o.firstReplicas(d.reps[j-1 : j])
				d.reps[j-1] = &o.inline
			} else {
				d.Err = errBadSnapshot
			}
		} else if n > 1 {
			o.replicas = make([]*replica, n)
			for j := range o.replicas {
				if o.replicas[j] = d.rep(); o.replicas[j] == nil {
					d.Err = errBadSnapshot
				}
			}
		}
		o.lease = stampOf(d.time())
		m.softPinTTL = time.Duration(d.Varint())
		m.softPinUntil = stampOf(d.time())
		o.hardPin = d.boolean()
		if d.boolean() {
			v := d.Uvarint()
			m.checksum = &v
		}
		m.dataType = d.int()
		m.groupID = d.str()
		o.charged = d.Uvarint()
		if n := d.count(1); n > 0 {
			m.disk = make([]diskReplica, n)
			for j := range m.disk {
				m.disk[j].client = d.str()
			}
		}
		o.offloading = d.boolean()
		if d.boolean() {
			m.fs = &fsReplica{status: ReplicaStatus(d.int()), rel: d.str(), writer: d.str(), started: d.time()}
		}
		if !m.empty() {
			o.meta = &m
		}
		if inTable {
			st.addObject(o)
			if o.writing {
				st.openWrites[o] = struct{}{}
			}
			if o.fsPending() {
				st.fsWrites[o] = struct{}{}
			}
		}
		d.objs[i] = o
	}

	for i, n := 0, d.count(4); i < n; i++ {
		c := &client{id: d.str(), lastSeen: d.time(), ok: d.boolean(), segments: d.strs()}
		st.clients[c.id] = c
	}
	if n := d.count(3); n > 0 {
		st.discarded = make([]discarded, n)
		for i := range st.discarded {
			q := discarded{seg: d.seg(), off: d.Uvarint()}
			if version >= 7 {
				q.len = d.Uvarint()
			} else if q.seg != nil {
				q.len = d.oldUsed[q.seg][q.off]
			}
			q.releaseAt = d.time()
			if q.seg == nil || q.len == 0 {
				d.Err = errBadSnapshot
			}
			st.discarded[i] = q
		}
	}
	st.needEviction = d.boolean()
	st.nextReplica = d.Uvarint()

	st.tenants = map[string]*tenant{}
	for i, n := 0, d.count(4); i < n; i++ {
		name := d.str()
		st.tenants[name] = &tenant{quota: d.Uvarint(), used: d.Uvarint(), objects: d.int()}
	}

	if n := d.count(14); n > 0 {
		st.tasks = make(map[TaskID]*task, n)
		for i := 0; i < n; i++ {
			id := TaskID{Hi: d.Uvarint(), Lo: d.Uvarint()}
			t := &task{id: id, typ: TaskType(d.int()), status: TaskStatus(d.int()), key: d.str(), size: d.Uvarint(), source: d.rep()}
			if t.source == nil {
				d.Err = errBadSnapshot
			}
			if m := d.count(1); m > 0 {
				t.targets = make([]*replica, m)
				for j := range t.targets {
					if t.targets[j] = d.rep(); t.targets[j] == nil {
						d.Err = errBadSnapshot
					}
				}
			}
			t.client, t.assignee = d.str(), d.str()
			t.created, t.updated = d.time(), d.time()
			t.version = d.Uvarint()
			t.sent = d.time()
			t.message = d.str()
			st.tasks[id] = t
		}
	}

	if n := d.count(5); n > 0 {
		st.disk.disks = make(map[string]*localDisk, n)
		for i := 0; i < n; i++ {
			ld := &localDisk{client: d.str(), endpoint: d.str(), capacity: d.Uvarint(),
				offloads: map[string]*offloadJob{}, promotions: map[string]*promotionJob{}}
			if m := d.count(3); m > 0 {
				for j := 0; j < m; j++ {
					k := d.str()
					ld.offloads[k] = &offloadJob{obj: d.obj(), sent: d.time()}
					if ld.offloads[k].obj == nil {
						d.Err = errBadSnapshot
					}
				}
			}
			if m := d.count(4); m > 0 {
				for j := 0; j < m; j++ {
					k := d.str()
					ld.promotions[k] = &promotionJob{obj: d.obj(), target: d.rep(), sent: d.time()}
					if ld.promotions[k].obj == nil {
						d.Err = errBadSnapshot
					}
				}
			}
			ld.deletes = d.strs()
			st.disk.disks[ld.client] = ld
		}
	}
	st.disk.queued = d.int()
	st.disk.promoted = d.int()
	st.disk.fsDeletes = d.strs()

	for _, m := range []map[string]uint64{st.m.requests, st.m.failures} {
		for i, n := 0, d.count(2); i < n; i++ {
			op := d.str()
			m[op] = d.Uvarint()
		}
	}
	for _, p := range []*uint64{&st.m.evictedKeys, &st.m.evictedBytes, &st.m.evictionRuns, &st.m.preempted, &st.m.partialAllocs, &st.m.expiredClients} {
		*p = d.Uvarint()
	}
	if version >= 2 {
		d.reservations(st)
	}
	if version >= 3 {
		st.taskSalt = d.Uvarint()
	}
	if version >= 4 {
		d.suspects(st)
	}
	if version >= 5 {
		d.clientKeys(st)
	}
	if version >= 6 {
		for _, id := range st.sortedTaskIDs() {
			st.tasks[id].deliveries = int(d.Uvarint())
		}
		if n := d.count(3); n > 0 {
			st.heat = make(map[string]*heatWindow, n)
			for i := 0; i < n; i++ {
				key := d.str()
				w := &heatWindow{start: d.time(), hits: d.Uvarint()}
				if _, dup := st.heat[key]; dup {
					d.Err = errBadSnapshot
				}
				st.heat[key] = w
			}
		}
		st.m.dynReplProposals, st.m.dynReplTasks = d.Uvarint(), d.Uvarint()
	}
	if d.Err != nil {
		return nil, h, errBadSnapshot
	}
	if len(d.B) != 0 {
		return nil, h, errBadSnapshot
	}
	if err := validateSnapshotState(st, d.segs); err != nil {
		return nil, h, err
	}
	st.rebuildLeases()
	st.recountServing()
	return st, h, nil
}

// clientKeys reads the version 5 tail: each client's key, in client id
// order, and the identity refusals.
func (d *snapshotDecoder) clientKeys(st *State) {
	for _, id := range sortedMapKeys(st.clients) {
		switch k := d.Bytes(); len(k) {
		case 0:
		case len(clientKey{}):
			c := st.clients[id]
			copy(c.key[:], k)
			c.keyed = true
		default:
			d.Err = errBadSnapshot
			return
		}
	}
	st.m.identityRefused = d.Uvarint()
}

// suspects reads the version 4 tail: the segments' incarnations, the
// suspect clients (their segments suspect with them) and the counters.
func (d *snapshotDecoder) suspects(st *State) {
	for _, sg := range d.segs {
		sg.info.Incarnation = d.Uvarint()
	}
	for _, id := range d.strs() {
		c, ok := st.clients[id]
		if !ok {
			d.Err = errBadSnapshot
			return
		}
		c.suspect = true
		for _, segID := range c.segments {
			if sg, ok := st.segments[segID]; ok {
				sg.suspect = true
			}
		}
	}
	for _, p := range []*uint64{&st.m.suspectedClients, &st.m.restoredClients, &st.m.replacedSegments} {
		*p = d.Uvarint()
	}
}
