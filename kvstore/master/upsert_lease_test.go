package master

import (
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// A same-size upsert overwrites in place only while no reader holds a
// lease; otherwise the reader's buffers stay untouched until it ends.
func TestSameSizeUpsertLeavesLeasedBuffersAlone(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 16, TEEndpoint: "te-s"}, now)
	cfg := ReplicateConfig{ReplicaNum: 1}
	old := mustPut(t, st, "k", 1024, cfg, now)

	read, code := st.GetReplicaList("k", now)
	if code != kvstore.OK {
		t.Fatalf("GetReplicaList: %v", code)
	}
	if read.Replicas[0].Address != old[0].Address {
		t.Fatalf("reader got %#x, put wrote %#x", read.Replicas[0].Address, old[0].Address)
	}

	// Within the lease: the writer gets other buffers.
	during := now.Add(read.LeaseTTL / 2)
	rs, code := st.UpsertStart("w", "k", 1024, cfg, during)
	if code != kvstore.OK {
		t.Fatalf("UpsertStart during the lease: %v", code)
	}
	if rs[0].Address == old[0].Address {
		t.Fatalf("upsert during a read lease handed out the reader's buffer %#x", old[0].Address)
	}
	if code := st.PutEnd("w", "k", nil, during); code != kvstore.OK {
		t.Fatalf("PutEnd: %v", code)
	}
	// The reader's buffer is quarantined, not reused, until the lease ends.
	for i := range 8 {
		key := "other" + string(rune('0'+i))
		if r := mustPut(t, st, key, 1024, cfg, during); r[0].Address == old[0].Address {
			t.Fatalf("%s was placed in the leased buffer %#x", key, old[0].Address)
		}
	}

	// After every lease: in place again.
	after := during.Add(read.LeaseTTL + time.Second)
	cur, code := st.GetReplicaList("k", during)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	rs, code = st.UpsertStart("w", "k", 1024, cfg, after)
	if code != kvstore.OK {
		t.Fatalf("UpsertStart after the lease: %v", code)
	}
	if rs[0].Address != cur.Replicas[0].Address {
		t.Fatalf("upsert with no lease moved the object: %#x -> %#x", cur.Replicas[0].Address, rs[0].Address)
	}
}

// With no room for new buffers, a same-size upsert under a read lease
// fails OBJECT_REPLICA_BUSY and leaves the old value readable.
func TestSameSizeUpsertUnderLeaseWithoutRoomIsBusy(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 4096, TEEndpoint: "te-s"}, now)
	cfg := ReplicateConfig{ReplicaNum: 1}
	mustPut(t, st, "k", 4096, cfg, now)
	if _, code := st.GetReplicaList("k", now); code != kvstore.OK {
		t.Fatal(code)
	}
	if _, code := st.UpsertStart("w", "k", 4096, cfg, now.Add(time.Millisecond)); code != kvstore.ObjectReplicaBusy {
		t.Fatalf("UpsertStart = %v, want OBJECT_REPLICA_BUSY", code)
	}
	if _, code := st.GetReplicaList("k", now.Add(time.Millisecond)); code != kvstore.OK {
		t.Fatalf("old value unreadable after the refused upsert: %v", code)
	}
}
