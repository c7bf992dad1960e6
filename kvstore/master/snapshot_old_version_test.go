package master

import (
	"os"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// buildEveryHolder returns a state in which every kind of holder of
// segment bytes is present: objects' replicas, a quarantined buffer (the
// source of a finished move), an unfinished copy task's target, and a
// reservation whose block a commit cut in two pieces. It also built
// testdata/snapshot_v6.bin, with the version 6 encoder (the last one to
// write the allocators' table of allocations).
func buildEveryHolder(t *testing.T) *State {
	t.Helper()
	st := newTestState(t, nil)
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 16}, epoch)
	mustMount(t, st, "c2", Segment{ID: "s2", Name: "s2", Base: 1 << 24, Size: 1 << 16}, epoch)
	cfg := ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s1"}}
	for key, size := range map[string]uint64{"a": 100, "b": 3000} {
		if _, code := st.PutStart("c1", key, size, cfg, epoch); code != kvstore.OK {
			t.Fatal(code)
		}
		if code := st.PutEnd("c1", key, nil, epoch); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	move, code := st.CreateMoveTask("a", "s1", "s2", epoch)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	if _, code := st.CreateCopyTask("b", []string{"s2"}, epoch); code != kvstore.OK {
		t.Fatal(code)
	}
	st.FetchTasks("c1", epoch)
	if code := st.CompleteTask("c1", move, true, "", epoch); code != kvstore.OK {
		t.Fatal(code)
	}
	r, code := st.Reserve("c1", DefaultTenant, 8192, nil, epoch)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	if code, _ := st.PutCommit("c1", "r", 100, r.ID, 1024, nil, ReplicateConfig{ReplicaNum: 1}, epoch); code != kvstore.OK {
		t.Fatal(code)
	}
	if len(st.discarded) != 1 || len(st.reservations) != 1 || len(st.reservations[r.ID].pieces) != 2 {
		t.Fatalf("setup: %d quarantined, %d reservations", len(st.discarded), len(st.reservations))
	}
	return st
}

// TestSnapshotVersion6Loads: a file of the last version that carried the
// allocators' table still loads, its quarantined buffers get their
// lengths from the table, and every holder's range then frees exactly:
// once all are released, each segment is one free extent again.
func TestSnapshotVersion6Loads(t *testing.T) {
	b, err := os.ReadFile("testdata/snapshot_v6.bin")
	if err != nil {
		t.Fatal(err)
	}
	if b[len(snapshotMagic)] != 6 {
		t.Fatalf("fixture is version %d, want 6", b[len(snapshotMagic)])
	}
	st, _, err := decodeSnapshot(b, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := buildEveryHolder(t)
	if got, want := st.String(), want.String(); got != want {
		t.Fatalf("decoded state:\n%s\nwant:\n%s", got, want)
	}
	// The same state through the current version.
	if _, _, err := decodeSnapshot(encodeSnapshot(st, 1, 2), DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, 0, len(st.reservations))
	for id := range st.reservations {
		ids = append(ids, id)
	}
	if _, code := st.Reserve("c1", DefaultTenant, 0, ids, epoch); code != kvstore.OK {
		t.Fatal(code)
	}
	for _, id := range st.sortedTaskIDs() {
		st.CompleteTask("c1", id, false, "", epoch)
	}
	for _, key := range st.Keys() {
		if code := st.Remove(key, true, epoch); code != kvstore.OK {
			t.Fatal(key, code)
		}
	}
	st.ReleaseExpired(epoch.Add(24 * time.Hour))
	for _, id := range []string{"s1", "s2"} {
		if a := st.segments[id].alloc; a.Allocated() != 0 || a.FreeExtents() != 1 {
			t.Errorf("segment %s after releasing everything: allocated %d, %d free extents", id, a.Allocated(), a.FreeExtents())
		}
	}
}
