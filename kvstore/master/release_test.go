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
	if _, ok := st.objects["open"]; ok {
		t.Fatal("the stale write's object is still in the table")
	}
	if n := len(st.openWrites); n != 0 {
		t.Fatalf("%d open writes tracked after the pass, want 0", n)
	}
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
