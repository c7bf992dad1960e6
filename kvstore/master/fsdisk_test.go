package master

import (
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/fsdir"
)

func fsState(t *testing.T) *State {
	t.Helper()
	st := newTestState(t, func(c *Config) {
		c.FS.RootDir = "/shared"
		c.EvictionRatio = 1 // one run evicts everything evictable
	})
	mustMount(t, st, "seg", Segment{ID: "s1", Name: "n1", Base: 1 << 30, Size: 1 << 20}, time.Unix(0, 0))
	return st
}

// diskOf returns the one DISK replica in rs.
func diskOf(t *testing.T, rs []Replica) Replica {
	t.Helper()
	var out []Replica
	for _, r := range rs {
		if r.Type == ReplicaDisk {
			out = append(out, r)
		}
	}
	if len(out) != 1 {
		t.Fatalf("want one DISK replica in %+v", rs)
	}
	return out[0]
}

func TestFSDiskReplicaLifecycle(t *testing.T) {
	st := fsState(t)
	now := time.Unix(1, 0)
	cfg := ReplicateConfig{ReplicaNum: 1}
	rs, code := st.PutStart("w", "a/../b", 100, cfg, now)
	if code != kvstore.OK || len(rs) != 2 {
		t.Fatalf("PutStart: %v %+v", code, rs)
	}
	d := diskOf(t, rs)
	if d.Status != ReplicaProcessing || d.Size != 100 || fsdir.ValidRelPath(d.FilePath) != nil ||
		!strings.HasPrefix(d.FilePath[4:], "a_.._b.") {
		t.Fatalf("DISK replica %+v", d)
	}
	if st.Config().FS.Dir() != "/shared/mooncake_cluster" {
		t.Fatalf("dir %q", st.Config().FS.Dir())
	}
	// Another client cannot publish or revoke it.
	if code := st.PutEndDisk("other", "a/../b", now); code != kvstore.IllegalClient {
		t.Fatalf("PutEndDisk by another client: %v", code)
	}
	if code := st.PutEnd("w", "a/../b", nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	// Memory is read while it exists; the disk replica is not listed yet.
	res, code := st.GetReplicaList("a/../b", now)
	if code != kvstore.OK || len(res.Replicas) != 1 || res.Replicas[0].Type != ReplicaMemory {
		t.Fatalf("get: %v %+v", code, res.Replicas)
	}
	if code := st.PutEndDisk("w", "a/../b", now); code != kvstore.OK {
		t.Fatal(code)
	}
	if code := st.PutRevokeDisk("w", "a/../b", now); code != kvstore.InvalidWrite {
		t.Fatalf("revoking a published DISK replica: %v", code)
	}
	info, _ := st.QueryKey("a/../b")
	if diskOf(t, info.Replicas).Status != ReplicaComplete {
		t.Fatalf("query %+v", info.Replicas)
	}
	// Removing the object queues its file for deletion.
	if code := st.Remove("a/../b", true, now); code != kvstore.OK {
		t.Fatal(code)
	}
	if del := st.TakeFSDeletes(); len(del) != 1 || del[0] != d.FilePath {
		t.Fatalf("deletes %v, want [%s]", del, d.FilePath)
	}
}

func TestFSDiskEvictionKeepsDiskReplica(t *testing.T) {
	st := fsState(t)
	now := time.Unix(1, 0)
	cfg := ReplicateConfig{ReplicaNum: 1}
	for _, k := range []string{"done", "pending", "revoked"} {
		mustPut(t, st, k, 1000, cfg, now)
	}
	st.PutEndDisk("w", "done", now)
	if code := st.PutRevokeDisk("w", "revoked", now); code != kvstore.OK {
		t.Fatal(code)
	}
	later := now.Add(time.Minute)
	st.needEviction = true
	res := st.Evict(later)
	if len(res.Evicted) != 3 {
		t.Fatalf("evicted %v", res.Evicted)
	}
	// The written one is read from its file.
	got, code := st.GetReplicaList("done", later)
	if code != kvstore.OK || len(got.Replicas) != 1 || got.Replicas[0].Type != ReplicaDisk || got.Replicas[0].Size != 1000 {
		t.Fatalf("done: %v %+v", code, got.Replicas)
	}
	// The one whose file is being written is not ready, and becomes
	// readable once published.
	if _, code := st.GetReplicaList("pending", later); code != kvstore.ReplicaIsNotReady {
		t.Fatalf("pending: %v", code)
	}
	if ok, _ := st.ExistKey("pending", later); ok {
		t.Fatal("pending exists")
	}
	st.PutEndDisk("w", "pending", later)
	if _, code := st.GetReplicaList("pending", later); code != kvstore.OK {
		t.Fatalf("pending after PutEndDisk: %v", code)
	}
	// The revoked one is gone with its memory.
	if _, code := st.GetReplicaList("revoked", later); code != kvstore.ObjectNotFound {
		t.Fatalf("revoked: %v", code)
	}
	// A disk-only object blocks a put and is rewritten by an upsert.
	if _, code := st.PutStart("w", "done", 1000, cfg, later); code != kvstore.ObjectAlreadyExists {
		t.Fatalf("put over disk-only: %v", code)
	}
	rs, code := st.UpsertStart("w", "done", 10, cfg, later)
	if code != kvstore.OK || len(rs) != 2 || diskOf(t, rs).Status != ReplicaProcessing {
		t.Fatalf("upsert: %v %+v", code, rs)
	}
}

func TestFSDiskRevokedWriteDropsDiskReplica(t *testing.T) {
	st := fsState(t)
	now := time.Unix(1, 0)
	st.PutStart("w", "k", 10, ReplicateConfig{ReplicaNum: 1}, now)
	if code := st.PutRevoke("w", "k", now); code != kvstore.OK {
		t.Fatal(code)
	}
	if _, ok := st.QueryKey("k"); ok {
		t.Fatal("revoked write left an object")
	}
	// A writer that never publishes its file loses the replica after
	// PutStartReleaseTimeout; the object lives on in memory.
	mustPut(t, st, "k", 10, ReplicateConfig{ReplicaNum: 1}, now)
	st.ReleaseExpired(now.Add(st.Config().PutStartReleaseTimeout + time.Second))
	info, _ := st.QueryKey("k")
	if len(info.Replicas) != 1 || info.Replicas[0].Type != ReplicaMemory || len(st.TakeFSDeletes()) != 2 {
		t.Fatalf("after release: %+v", info.Replicas)
	}
}

func TestFSDiskOffByDefault(t *testing.T) {
	st := newTestState(t, nil)
	mustMount(t, st, "seg", Segment{ID: "s1", Name: "n1", Base: 1 << 30, Size: 1 << 20}, time.Unix(0, 0))
	rs := mustPut(t, st, "k", 10, ReplicateConfig{ReplicaNum: 1}, time.Unix(1, 0))
	if len(rs) != 1 || rs[0].Type != ReplicaMemory || st.Config().FS.Dir() != "" {
		t.Fatalf("%+v", rs)
	}
	if code := st.PutEndDisk("w", "k", time.Unix(1, 0)); code != kvstore.InvalidWrite {
		t.Fatal(code)
	}
}

// With offload on evict, an object that also has a DISK replica on the
// shared file system is offloaded to its holder's local disk before its
// memory goes, as upstream's promotion test (root_fs_dir and
// offload_on_evict together) expects: LOCAL_DISK replicas appear.
func TestFSDiskOffloadOnEvictStillOffloads(t *testing.T) {
	st := newTestState(t, func(c *Config) {
		c.FS.RootDir = "/shared"
		c.EvictionRatio = 1
		c.Offload.Enable = true
		c.Offload.OnEvict = true
	})
	now := time.Unix(0, 0)
	mustMount(t, st, "w", Segment{ID: "s1", Name: "n1", Base: 1 << 30, Size: 1 << 20}, now)
	if _, code := st.MountLocalDisk("w", "w:9000", 1<<20, nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	mustPut(t, st, "k", 1000, ReplicateConfig{ReplicaNum: 1}, now)
	if code := st.PutEndDisk("w", "k", now); code != kvstore.OK {
		t.Fatal(code)
	}
	later := now.Add(time.Minute)
	st.needEviction = true
	if res := st.Evict(later); len(res.Evicted) != 0 {
		t.Fatalf("evicted %v before its offload", res.Evicted)
	}
	work, code := st.OffloadHeartbeat("w", nil, later)
	if code != kvstore.OK || len(work.Offloads) != 1 || work.Offloads[0].Key != st.Config().ObjectKey(DefaultTenant, "k") {
		t.Fatalf("offload work %v %+v", code, work.Offloads)
	}
	got, code := st.GetReplicaList("k", later)
	if code != kvstore.OK || got.Replicas[0].Type != ReplicaMemory {
		t.Fatalf("memory gone before the offload: %v %+v", code, got.Replicas)
	}
}
