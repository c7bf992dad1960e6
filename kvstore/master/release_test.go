package master

import (
	"strconv"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// The release pass visits open writes only: finished ones leave the set at
// once, and a stale one is still discarded after PutStartReleaseTimeout.
func TestReleasePassTracksOnlyOpenWrites(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 20, TEEndpoint: "te-s"}, now)
	cfg := ReplicateConfig{ReplicaNum: 1}
	for i := range 100 {
		mustPut(t, st, "done"+strconv.Itoa(i), 64, cfg, now)
	}
	if _, code := st.PutStart("w", "open", 64, cfg, now); code != kvstore.OK {
		t.Fatal(code)
	}
	if _, code := st.UpsertStart("w", "done0", 64, cfg, now); code != kvstore.OK {
		t.Fatal(code)
	}
	if n := len(st.openWrites); n != 2 {
		t.Fatalf("%d open writes tracked, want 2 (100 finished puts, one put and one upsert open)", n)
	}
	if code := st.PutEnd("w", "done0", nil, now); code != kvstore.OK {
		t.Fatal(code)
	}
	if n := st.ReleaseExpired(now.Add(st.cfg.PutStartReleaseTimeout)); n != 0 {
		t.Fatalf("discarded %d writes at the timeout, want 0 (only after it)", n)
	}
	if n := st.ReleaseExpired(now.Add(st.cfg.PutStartReleaseTimeout + time.Second)); n != 1 {
		t.Fatalf("discarded %d writes after the timeout, want 1", n)
	}
	if _, ok := st.objects.lookup("open"); ok {
		t.Fatal("the stale write's object is still in the table")
	}
	if n := len(st.openWrites); n != 0 {
		t.Fatalf("%d open writes tracked after the pass, want 0", n)
	}
}

// The release pass visits the DISK replicas being written only: published
// ones leave the set, and a stale one is still dropped after
// PutStartReleaseTimeout.
func TestReleasePassTracksOnlyPendingDiskWrites(t *testing.T) {
	st := fsState(t)
	now := time.Unix(1, 0)
	cfg := ReplicateConfig{ReplicaNum: 1}
	for i := range 20 {
		key := "done" + strconv.Itoa(i)
		mustPut(t, st, key, 64, cfg, now)
		if code := st.PutEndDisk("w", key, now); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	mustPut(t, st, "pending", 64, cfg, now)
	st.ReleaseExpired(now)
	if n := len(st.fsWrites); n != 1 {
		t.Fatalf("%d DISK writes tracked after a pass, want 1 (20 published, one pending)", n)
	}
	st.ReleaseExpired(now.Add(st.cfg.PutStartReleaseTimeout))
	if o := st.objects.get("pending"); o.md().fs == nil {
		t.Fatal("the DISK replica was dropped at the timeout, want only after it")
	}
	st.ReleaseExpired(now.Add(st.cfg.PutStartReleaseTimeout + time.Second))
	if o := st.objects.get("pending"); o == nil || o.md().fs != nil || len(o.replicas) != 1 {
		t.Fatalf("after the timeout: %+v, want the memory replica alone", o)
	}
	if n := len(st.fsWrites); n != 0 {
		t.Fatalf("%d DISK writes tracked after the pass, want 0", n)
	}
}

// State.softPins, which Stats reports, follows the soft pins of the
// objects in the table through puts, upserts, removes and a restore.
func TestSoftPinCountFollowsTheTable(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 20, TEEndpoint: "te-s"}, now)
	ttl := time.Minute
	pinned := ReplicateConfig{ReplicaNum: 1, SoftPin: SoftPinEnable, SoftPinTTL: &ttl}
	plain := ReplicateConfig{ReplicaNum: 1}
	want := func(n int) {
		t.Helper()
		walked := 0
		for o := range st.objects.all() {
			if o.md().softPinTTL > 0 {
				walked++
			}
		}
		if st.softPins != n || walked != n || st.Stats().SoftPinKeyCount != n {
			t.Fatalf("softPins %d, Stats %d, table %d; want %d", st.softPins, st.Stats().SoftPinKeyCount, walked, n)
		}
	}
	for i := range 5 {
		mustPut(t, st, "p"+strconv.Itoa(i), 64, pinned, now)
		mustPut(t, st, "u"+strconv.Itoa(i), 64, plain, now)
	}
	want(5)
	if _, code := st.UpsertStart("w", "p0", 64, ReplicateConfig{ReplicaNum: 1, SoftPin: SoftPinDisable}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	want(4)
	if _, code := st.UpsertStart("w", "u0", 64, pinned, now); code != kvstore.OK {
		t.Fatal(code)
	}
	want(5)
	for _, k := range []string{"p0", "u0"} {
		if code := st.PutEnd("w", k, nil, now); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	if code := st.Remove("p1", true, now); code != kvstore.OK {
		t.Fatal(code)
	}
	want(4)
	restored, _, err := decodeSnapshot(encodeSnapshot(st, 1, 1), st.cfg)
	if err != nil {
		t.Fatal(err)
	}
	st = restored
	want(4)
	st.RemoveAll(DefaultTenant, "", true, now.Add(time.Hour))
	want(0)
}

// BenchmarkReleaseExpiredIdle is one background release pass over a table
// of 10^6 finished objects with nothing to release: it costs nothing per
// object (it walked every object under the master lock before).
func BenchmarkReleaseExpiredIdle(b *testing.B) {
	cfg := DefaultConfig()
	st, err := NewState(cfg)
	if err != nil {
		b.Fatal(err)
	}
	now := epoch
	if code := st.MountSegment("c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 36, TEEndpoint: "te-s"}, now); code != kvstore.OK {
		b.Fatal(code)
	}
	rc := ReplicateConfig{ReplicaNum: 1}
	for i := range 1_000_000 {
		key := "k" + strconv.Itoa(i)
		if _, code := st.PutStart("w", key, 64, rc, now); code != kvstore.OK {
			b.Fatal(code)
		}
		st.PutEnd("w", key, nil, now)
	}
	b.ResetTimer()
	for i := range b.N {
		st.ReleaseExpired(now.Add(time.Duration(i) * time.Second))
	}
}
