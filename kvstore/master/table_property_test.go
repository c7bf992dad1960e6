package master

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// refObject is the reference model's record of one object.
type refObject struct {
	size         uint64
	writer       string
	writing      bool
	replicas     int
	putStart     time.Time
	lease        time.Time
	softPinTTL   time.Duration
	softPinUntil time.Time
	hardPin      bool
	dataType     int
	groupID      string
	checksum     *uint64
}

// refQuarantine is a preempted write's buffers, in the model: bytes held
// until releaseAt.
type refQuarantine struct {
	bytes     uint64
	releaseAt time.Time
}

// refTable is a plain model of the object table: puts, removes, leases,
// eviction and the release pass, written from the documented rules alone.
type refTable struct {
	cfg          Config
	capacity     uint64
	objects      map[string]*refObject
	quarantine   []refQuarantine
	needEviction bool // an allocation failed since the last round
}

func (m *refTable) allocated() uint64 {
	var n uint64
	for _, o := range m.objects {
		n += AlignUp(o.size) * uint64(o.replicas)
	}
	for _, q := range m.quarantine {
		n += q.bytes
	}
	return n
}

// putStart applies the model's PutStart up to the allocation: the code
// it predicts (OK: the allocation decides) after preempting a stale write.
func (m *refTable) putStart(key string, now time.Time) kvstore.ErrorCode {
	o, ok := m.objects[key]
	if !ok {
		return kvstore.OK
	}
	if !o.writing || now.Sub(o.putStart) < m.cfg.PutStartDiscardTimeout {
		return kvstore.ObjectAlreadyExists
	}
	m.quarantine = append(m.quarantine, refQuarantine{AlignUp(o.size) * uint64(o.replicas), now.Add(m.cfg.PutStartReleaseTimeout)})
	delete(m.objects, key)
	return kvstore.OK
}

// writtenBy is key's object when client is its writer, else nil and the
// code a put end or revoke gets.
func (m *refTable) writtenBy(client, key string) (*refObject, kvstore.ErrorCode) {
	o, ok := m.objects[key]
	switch {
	case !ok:
		return nil, kvstore.ObjectNotFound
	case o.writer != client:
		return nil, kvstore.IllegalClient
	}
	return o, kvstore.OK
}

func (m *refTable) putEnd(client, key string, sum *uint64, now time.Time) kvstore.ErrorCode {
	o, code := m.writtenBy(client, key)
	if o == nil || !o.writing {
		return code
	}
	o.writing, o.checksum = false, sum
	if now.After(o.lease) {
		o.lease = now
	}
	if o.softPinTTL > 0 && o.softPinUntil.IsZero() {
		o.softPinUntil = now.Add(o.softPinTTL)
	}
	return kvstore.OK
}

func (m *refTable) putRevoke(client, key string) kvstore.ErrorCode {
	o, code := m.writtenBy(client, key)
	if o == nil {
		return code
	}
	if !o.writing {
		return kvstore.InvalidWrite
	}
	delete(m.objects, key)
	return kvstore.OK
}

func (m *refTable) remove(key string, force bool, now time.Time) kvstore.ErrorCode {
	o, ok := m.objects[key]
	switch {
	case !ok:
		return kvstore.ObjectNotFound
	case !force && now.Before(o.lease):
		return kvstore.ObjectHasLease
	case o.writing:
		return kvstore.ReplicaIsNotReady
	}
	delete(m.objects, key)
	return kvstore.OK
}

func (m *refTable) read(key string, now time.Time) kvstore.ErrorCode {
	o, ok := m.objects[key]
	switch {
	case !ok:
		return kvstore.ObjectNotFound
	case o.writing:
		return kvstore.ReplicaIsNotReady
	}
	if d := now.Add(m.cfg.DefaultLeaseTTL); d.After(o.lease) {
		o.lease = d
	}
	return kvstore.OK
}

func (m *refTable) release(now time.Time) int {
	m.quarantine = slices.DeleteFunc(m.quarantine, func(q refQuarantine) bool { return !now.Before(q.releaseAt) })
	n := 0
	for k, o := range m.objects {
		if o.writing && now.Sub(o.putStart) > m.cfg.PutStartReleaseTimeout {
			delete(m.objects, k)
			n++
		}
	}
	return n
}

// evict is the model's eviction round (upstream's BatchEvict as
// documented on State.Evict): the keys it evicts, in order.
func (m *refTable) evict(now time.Time) (EvictionPlan, []string) {
	plan := PlanEviction(float64(m.allocated())/float64(m.capacity), m.cfg.EvictionHighWatermarkRatio, m.cfg.EvictionRatio, m.needEviction)
	m.needEviction = false
	if !plan.Triggered {
		return plan, nil
	}
	var plain, soft []string
	for k, o := range m.objects {
		if o.writing || o.hardPin || now.Before(o.lease) {
			continue
		}
		if o.softPinTTL > 0 && !o.softPinUntil.IsZero() && now.Before(o.softPinUntil) {
			soft = append(soft, k)
		} else {
			plain = append(plain, k)
		}
	}
	byLease := func(a, b string) int {
		if c := m.objects[a].lease.Compare(m.objects[b].lease); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	}
	slices.SortFunc(plain, byLease)
	slices.SortFunc(soft, byLease)
	n := len(m.objects)
	target, lower := ceilCount(n, plan.Target), ceilCount(n, plan.LowerBound)
	out := plain[:min(len(plain), max(target, lower))]
	if len(out) < lower && m.cfg.AllowEvictSoftPinned {
		out = append(out, soft[:min(len(soft), lower-len(out))]...)
	}
	for _, k := range out {
		delete(m.objects, k)
	}
	return plan, out
}

// check compares st with the model: every key's record field by field,
// the key set and the table's counters.
func (m *refTable) check(t *testing.T, st *State, step int, op string) {
	t.Helper()
	keys := make([]string, 0, len(m.objects))
	for k := range m.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got := st.Keys(); !slices.Equal(got, keys) {
		t.Fatalf("step %d (%s): keys %v, model %v", step, op, got, keys)
	}
	pins := 0
	for _, k := range keys {
		o, info := m.objects[k], ObjectInfo{}
		info, _ = st.QueryKey(k)
		status := ReplicaComplete
		if o.writing {
			status = ReplicaProcessing
		}
		if o.softPinTTL > 0 {
			pins++
		}
		if info.Size != o.size || info.Writer != o.writer || info.Writing != o.writing || len(info.Replicas) != o.replicas ||
			!info.LeaseUntil.Equal(o.lease) || info.SoftPinned != (o.softPinTTL > 0) || !info.SoftPinUntil.Equal(o.softPinUntil) ||
			info.HardPinned != o.hardPin || info.DataType != o.dataType || info.GroupID != o.groupID ||
			slices.ContainsFunc(info.Replicas, func(r Replica) bool { return r.Status != status || r.Size != o.size }) {
			t.Fatalf("step %d (%s): %s is %+v, model %+v", step, op, k, info, *o)
		}
		inner := st.objects.get(k)
		if (inner.md().checksum == nil) != (o.checksum == nil) || (o.checksum != nil && *inner.md().checksum != *o.checksum) ||
			!inner.putStart.time().Equal(o.putStart) || inner.md().softPinTTL != o.softPinTTL {
			t.Fatalf("step %d (%s): %s has checksum %v, put start %v, soft pin TTL %v; model %+v", step, op, k, inner.md().checksum, inner.putStart, inner.md().softPinTTL, *o)
		}
	}
	// The lease index (lease_index.go): one entry for each object with
	// memory replicas, no write open and no hard pin, never later than its
	// lease, and object.indexed says whether an object has one.
	indexed := map[*object]stamp{}
	for _, e := range st.leases.es {
		if _, dup := indexed[e.o]; dup && e.o.inTable {
			t.Fatalf("step %d (%s): %s twice in the lease index", step, op, e.o.key)
		}
		indexed[e.o] = e.lease
	}
	// The record (state.go): a replica belongs to one object, in its
	// record or on its own, and an object restored from a snapshot with
	// one replica has it in its record again.
	inline, owner := map[*replica]*object{}, map[*replica]*object{}
	for o := range st.objects.all() {
		inline[&o.inline] = o
	}
	walked := 0
	for o := range st.objects.all() {
		k := o.key
		if len(o.replicas) > 0 {
			walked++
		}
		for _, r := range o.replicas {
			if x := inline[r]; (x != nil && x != o) || owner[r] != nil {
				t.Fatalf("step %d (%s): %s holds a replica of another object", step, op, k)
			}
			owner[r] = o
		}
		if op == "snapshot_restore" && len(o.replicas) == 1 && o.replicas[0] != &o.inline {
			t.Fatalf("step %d (%s): %s restored with its one replica outside its record", step, op, k)
		}
		l, ok := indexed[o]
		if want := !o.hardPin && !o.writing && len(o.replicas) > 0; !o.inTable || o.indexed != ok || want && !ok || ok && l > o.lease {
			t.Fatalf("step %d (%s): %s in the lease index %v (flag %v, lease %d there, %d now), hard pin %v, %d replicas",
				step, op, k, ok, o.indexed, l, o.lease, o.hardPin, len(o.replicas))
		}
	}
	if n := st.memoryObjects(); n != walked {
		t.Fatalf("step %d (%s): %d objects with memory replicas counted, %d in the table", step, op, n, walked)
	}
	stats := st.Stats()
	if stats.KeyCount != len(keys) || stats.SoftPinKeyCount != pins || stats.AllocatedBytes != m.allocated() {
		t.Fatalf("step %d (%s): stats keys %d, soft-pinned %d, allocated %d; model %d, %d, %d",
			step, op, stats.KeyCount, stats.SoftPinKeyCount, stats.AllocatedBytes, len(keys), pins, m.allocated())
	}
}

// TestObjectTableMatchesReferenceModel runs random puts, put ends and
// revokes, removes, reads (leases), eviction rounds, release passes and
// snapshot restores on the object table and on refTable, and compares
// every object's fields and the table's counters after each step. A
// snapshot restore must carry every field: the model does not restore.
func TestObjectTableMatchesReferenceModel(t *testing.T) {
	for seed := range int64(24) {
		t.Run(strconv.FormatInt(seed, 10), func(t *testing.T) {
			runTableModel(t, seed, 500)
		})
	}
}

func runTableModel(t *testing.T, seed int64, steps int) {
	rng := rand.New(rand.NewSource(seed))
	st := newTestState(t, func(c *Config) {
		c.DefaultLeaseTTL = 4 * time.Second
		c.PutStartDiscardTimeout = 5 * time.Second
		c.PutStartReleaseTimeout = 20 * time.Second
		c.EvictionRatio = 0.2
		c.EvictionHighWatermarkRatio = 0.6
		c.AllowEvictSoftPinned = seed%2 == 0
		c.Seed = seed
	})
	m := &refTable{cfg: st.cfg, capacity: 3 * 16 << 10, objects: map[string]*refObject{}}
	now := epoch
	for i := range 3 {
		id := "s" + strconv.Itoa(i)
		mustMount(t, st, "storage", Segment{ID: id, Name: "n" + id, Base: 1 << 30, Size: 16 << 10, TEEndpoint: "te-" + id}, now)
	}
	clients := []string{"a", "b"}
	for step := range steps {
		now = now.Add(time.Duration(rng.Intn(1500)) * time.Millisecond)
		key := "k" + strconv.Itoa(rng.Intn(16))
		client := clients[rng.Intn(len(clients))]
		var op string
		switch r := rng.Intn(100); {
		case r < 30:
			op = "put_start " + key
			rc := ReplicateConfig{ReplicaNum: 1 + rng.Intn(3), HardPin: rng.Intn(8) == 0, DataType: rng.Intn(3), GroupID: []string{"", "g"}[rng.Intn(2)]}
			var pin time.Duration
			if rng.Intn(3) == 0 {
				pin = time.Duration(1+rng.Intn(30)) * time.Second
				rc.SoftPin, rc.SoftPinTTL = SoftPinEnable, &pin
			}
			size := uint64(1 + rng.Intn(2000))
			want := m.putStart(key, now)
			rs, code := st.PutStart(client, key, size, rc, now)
			switch {
			case want != kvstore.OK && code != want:
				t.Fatalf("step %d: %s: %v, model %v", step, op, code, want)
			case want == kvstore.OK && code == kvstore.OK:
				if len(rs) < 1 || len(rs) > rc.ReplicaNum {
					t.Fatalf("step %d: %s: %d replicas for %d wanted", step, op, len(rs), rc.ReplicaNum)
				}
				m.objects[key] = &refObject{size: size, writer: client, writing: true, replicas: len(rs), putStart: now,
					softPinTTL: pin, hardPin: rc.HardPin, dataType: rc.DataType, groupID: rc.GroupID}
			case want == kvstore.OK && code != kvstore.NoAvailableHandle:
				t.Fatalf("step %d: %s: %v, model OK or NO_AVAILABLE_HANDLE", step, op, code)
			case want == kvstore.OK:
				m.needEviction = true
			}
		case r < 50:
			op = "put_end " + key
			var sum *uint64
			if rng.Intn(2) == 0 {
				v := rng.Uint64()
				sum = &v
			}
			if code, want := st.PutEnd(client, key, sum, now), m.putEnd(client, key, sum, now); code != want {
				t.Fatalf("step %d: %s: %v, model %v", step, op, code, want)
			}
		case r < 55:
			op = "put_revoke " + key
			if code, want := st.PutRevoke(client, key, now), m.putRevoke(client, key); code != want {
				t.Fatalf("step %d: %s: %v, model %v", step, op, code, want)
			}
		case r < 65:
			force := rng.Intn(3) == 0
			op = "remove " + key
			if code, want := st.Remove(key, force, now), m.remove(key, force, now); code != want {
				t.Fatalf("step %d: %s (force %v): %v, model %v", step, op, force, code, want)
			}
		case r < 80:
			op = "get_replica_list " + key
			res, code := st.GetReplicaList(key, now)
			if want := m.read(key, now); code != want {
				t.Fatalf("step %d: %s: %v, model %v", step, op, code, want)
			}
			if o := m.objects[key]; code == kvstore.OK && (len(res.Replicas) != o.replicas || (res.Checksum == nil) != (o.checksum == nil)) {
				t.Fatalf("step %d: %s: %+v, model %+v", step, op, res, *o)
			}
		case r < 85:
			op = "exist_key " + key
			ok, _ := st.ExistKey(key, now)
			if want := m.read(key, now) == kvstore.OK; ok != want {
				t.Fatalf("step %d: %s: %v, model %v", step, op, ok, want)
			}
		case r < 92:
			op = "evict"
			res := st.Evict(now)
			if plan, want := m.evict(now); res.Plan != plan || !slices.Equal(res.Evicted, want) {
				t.Fatalf("step %d: evicted %v (%+v), model %v (%+v)", step, res.Evicted, res.Plan, want, plan)
			}
		case r < 96:
			op = "release_expired"
			if n, want := st.ReleaseExpired(now), m.release(now); n != want {
				t.Fatalf("step %d: %s dropped %d writes, model %d", step, op, n, want)
			}
		default:
			op = "snapshot_restore"
			st = roundTrip(t, st)
		}
		m.check(t, st, step, op)
		assertServingTally(t, st, fmt.Sprintf("step %d: %s", step, op))
	}
}
