package master

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/kvevents"
)

// recordingSink keeps the events it is given as "kind medium tenant/key".
// It may be fed from the oplog writer's goroutine.
type recordingSink struct {
	mu     sync.Mutex
	events []string
	epochs int
}

func (r *recordingSink) Publish(ev kvevents.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kind := map[kvevents.Kind]string{kvevents.Stored: "stored", kvevents.Removed: "removed", kvevents.Cleared: "cleared"}[ev.Kind]
	r.events = append(r.events, strings.TrimSpace(fmt.Sprintf("%s %s %s/%s", kind, ev.Medium, ev.Tenant, ev.Key)))
}
func (r *recordingSink) NewEpoch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epochs++
}
func (r *recordingSink) WritePrometheus(io.Writer) error { return nil }

// take returns the events recorded since the last take.
func (r *recordingSink) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func expectEvents(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: events %q, want %q", what, got, want)
	}
}

func TestKVEventsFollowEachObjectsAvailability(t *testing.T) {
	sink := &recordingSink{}
	st := newTestState(t, func(c *Config) {
		c.KVEvents = sink
		c.Offload = DefaultOffloadConfig()
		c.Offload.Enable = true
	})
	now := time.Unix(1000, 0)
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "h1", Base: 1 << 20, Size: 4096}, now)

	// A put is announced once it ends, not when it starts.
	if _, code := st.PutStart("c1", "0x10", 100, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "put start", sink.take())
	if code := st.PutEnd("c1", "0x10", nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "put end", sink.take(), "stored cpu default/0x10")

	// An upsert makes the old value unreadable, then the new one readable.
	if _, code := st.UpsertStart("c1", "0x10", 100, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "upsert start", sink.take(), "removed cpu default/0x10")
	if code := st.PutEnd("c1", "0x10", nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "upsert end", sink.take(), "stored cpu default/0x10")

	// A revoked put was never announced.
	if _, code := st.PutStart("c1", "never", 100, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	if code := st.PutRevoke("c1", "never", now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "revoked put", sink.take())

	// Offload: the disk copy is a second medium.
	if _, code := st.MountLocalDisk("c1", "127.0.0.1:7001", 1<<20, nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	mustPut(t, st, "42", 100, ReplicateConfig{ReplicaNum: 1}, now)
	expectEvents(t, "put 42", sink.take(), "stored cpu default/42")
	w, code := st.OffloadHeartbeat("c1", nil, now)
	if code != kvstore.OK || len(w.Offloads) == 0 {
		t.Fatalf("heartbeat: %v %+v", code, w)
	}
	for _, o := range w.Offloads {
		if code := st.NotifyOffload("c1", o.Key, true, now); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	expectEvents(t, "offload", sink.take(), "stored disk default/42") // 0x10 was put before the disk came

	// Remove: every medium the object was readable from.
	if code := st.Remove("42", true, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "remove", sink.take(), "removed cpu default/42", "removed disk default/42")

	// The disk drops its copy of an object: only the disk medium goes.
	mustPut(t, st, "43", 100, ReplicateConfig{ReplicaNum: 1}, now)
	w, _ = st.OffloadHeartbeat("c1", nil, now)
	for _, o := range w.Offloads {
		st.NotifyOffload("c1", o.Key, true, now)
	}
	expectEvents(t, "put and offload 43", sink.take(), "stored cpu default/43", "stored disk default/43")
	if _, code := st.OffloadHeartbeat("c1", []string{"43"}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "disk drop", sink.take(), "removed disk default/43")

	// Eviction of an object with no disk copy.
	evicted := false
	for i := 0; !evicted && i < 40; i++ {
		st.PutStart("c1", fmt.Sprintf("fill%d", i), 200, ReplicateConfig{ReplicaNum: 1}, now)
		st.PutEnd("c1", fmt.Sprintf("fill%d", i), nil, now)
		if st.AboveHighWatermark() || st.NeedEviction() {
			res := st.Evict(now.Add(time.Second))
			evicted = len(res.Evicted) > 0
		}
	}
	if !evicted {
		t.Fatal("nothing was evicted")
	}
	got := sink.take()
	stored, removed := map[string]bool{}, map[string]bool{}
	for _, e := range got {
		f := strings.Fields(e)
		switch f[0] {
		case "stored":
			stored[f[2]] = true
		case "removed":
			if !stored[f[2]] && f[2] != "default/0x10" && f[2] != "default/43" {
				t.Fatalf("removed %s before it was stored: %q", f[2], got)
			}
			removed[f[2]] = true
		}
	}
	if len(removed) == 0 {
		t.Fatalf("eviction published no removal: %q", got)
	}

	// remove_all: a removal per object, then cleared.
	left := len(st.Keys())
	st.RemoveAll(DefaultTenant, "", true, now.Add(time.Minute))
	got = sink.take()
	if len(got) < left || got[len(got)-1] != "cleared  default/" {
		t.Fatalf("remove_all of %d objects: %q", left, got)
	}
}

func TestKVEventsOfAnExpiredClientsObjects(t *testing.T) {
	sink := &recordingSink{}
	st := newTestState(t, func(c *Config) { c.KVEvents = sink })
	now := time.Unix(1000, 0)
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "h1", Base: 1 << 20, Size: 4096}, now)
	mustPut(t, st, "7", 100, ReplicateConfig{ReplicaNum: 1}, now)
	sink.take()
	st.ExpireClients(now.Add(time.Hour))
	expectEvents(t, "client expiry", sink.take(), "removed cpu default/7")
}

// A --root_fs_dir DISK replica is the disk medium: stored once its file is
// published (PutEnd of the DISK replica), removed with the object, and
// kept by an eviction that frees the memory.
func TestKVEventsOfSharedFSDiskReplicas(t *testing.T) {
	sink := &recordingSink{}
	st := newTestState(t, func(c *Config) {
		c.KVEvents = sink
		c.FS.RootDir = "/shared"
		c.EvictionRatio = 1
	})
	now := time.Unix(1000, 0)
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "h1", Base: 1 << 20, Size: 1 << 20}, now)
	cfg := ReplicateConfig{ReplicaNum: 1}

	rs, code := st.PutStart("c1", "0x20", 100, cfg, now)
	if code != kvstore.OK || len(rs) != 2 {
		t.Fatalf("PutStart: %v %+v", code, rs)
	}
	expectEvents(t, "put start", sink.take())
	if code := st.PutEnd("c1", "0x20", nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "put end (memory)", sink.take(), "stored cpu default/0x20")
	if code := st.PutEndDisk("c1", "0x20", now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "put end (disk)", sink.take(), "stored disk default/0x20")
	if code := st.PutEndDisk("c1", "0x20", now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "repeated put end (disk)", sink.take())
	if code := st.Remove("0x20", true, now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "remove", sink.take(), "removed cpu default/0x20", "removed disk default/0x20")

	// A DISK replica whose file is never written is never announced.
	mustPut(t, st, "0x21", 100, cfg, now)
	expectEvents(t, "put 0x21", sink.take(), "stored cpu default/0x21")
	if code := st.PutRevokeDisk("w", "0x21", now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "revoked disk write", sink.take())

	// Eviction frees the memory; the file keeps the disk medium until the
	// object is removed.
	mustPut(t, st, "0x22", 100, cfg, now)
	if code := st.PutEndDisk("w", "0x22", now); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "put 0x22", sink.take(), "stored cpu default/0x22", "stored disk default/0x22")
	st.needEviction = true
	if res := st.Evict(now.Add(time.Minute)); len(res.Evicted) != 2 {
		t.Fatalf("evicted %v", res.Evicted)
	}
	got := sink.take()
	slices.Sort(got)
	expectEvents(t, "eviction", got, "removed cpu default/0x21", "removed cpu default/0x22")
	if code := st.Remove("0x22", true, now.Add(time.Minute)); code != kvstore.OK {
		t.Fatal(code)
	}
	expectEvents(t, "remove of the disk-only object", sink.take(), "removed disk default/0x22")
}

func TestKVEventGatePublishesOnlyAsLeaderAndStartsAnEpochPerView(t *testing.T) {
	sink := &recordingSink{}
	var leader atomic.Bool
	var view atomic.Uint64
	g := &kvEventGate{sink: sink, leader: &leader, view: &view}
	ev := kvevents.Event{Kind: kvevents.Stored, Medium: kvevents.MediumCPU, Tenant: "default", Key: "1"}
	g.Publish(ev)
	if len(sink.events) != 0 {
		t.Fatal("a standby published")
	}
	leader.Store(true)
	view.Store(3)
	g.Publish(ev)
	g.Publish(ev)
	if len(sink.events) != 2 || sink.epochs != 0 {
		t.Fatalf("first term: %d events, %d epochs", len(sink.events), sink.epochs)
	}
	view.Store(5) // leadership lost and won again
	g.Publish(ev)
	if sink.epochs != 1 {
		t.Fatalf("a new view started %d epochs", sink.epochs)
	}
}

// With the oplog the gate holds every event back: nothing reaches the sink
// until the replication releases what an entry produced.
func TestKVEventGateHoldsEventsUntilReleased(t *testing.T) {
	sink := &recordingSink{}
	var leader atomic.Bool
	var view atomic.Uint64
	leader.Store(true)
	g := &kvEventGate{sink: sink, leader: &leader, view: &view, hold: true}
	g.Publish(kvevents.Event{Kind: kvevents.Stored, Medium: kvevents.MediumCPU, Tenant: "default", Key: "1"})
	g.Publish(kvevents.Event{Kind: kvevents.Removed, Medium: kvevents.MediumCPU, Tenant: "default", Key: "1"})
	expectEvents(t, "held", sink.take())
	evs := g.take()
	if len(evs) != 2 || len(g.take()) != 0 {
		t.Fatalf("take: %d events, then more", len(evs))
	}
	g.emit(evs...)
	expectEvents(t, "released", sink.take(), "stored cpu default/1", "removed cpu default/1")
}
