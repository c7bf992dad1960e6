package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// assertServingTally checks the serving tally against a walk of every
// segment.
func assertServingTally(t *testing.T, st *State, when string) {
	t.Helper()
	var want servingPool
	for _, sg := range st.segOrder {
		if sg.suspect {
			continue
		}
		want.capacity += sg.alloc.Size()
		want.allocated += sg.alloc.Allocated()
		if sg.overfull() {
			want.overfull++
		}
	}
	if st.serving != want {
		t.Fatalf("%s: serving tally %+v, a walk of the segments gives %+v", when, st.serving, want)
	}
}

// TestServingTallyFollowsEveryChange runs the changes the tally must
// follow (allocation, freeing, quarantine and its release, a client made
// suspect and restored, a remount that replaces a segment, an unmount, a
// snapshot round trip) and checks it, and the watermark check built on it,
// after each.
func TestServingTallyFollowsEveryChange(t *testing.T) {
	st := newTestState(t, func(c *Config) {
		c.ClientTTL = 2 * time.Second
		c.ClientDeadTTL = time.Hour
		c.PutStartDiscardTimeout = time.Second
		c.PutStartReleaseTimeout = 2 * time.Second
		c.EvictionHighWatermarkRatio = 0.95
	})
	now := epoch
	mustMount(t, st, "a", Segment{ID: "a0", Name: "na0", Base: 1 << 30, Size: 64 << 10, TEEndpoint: "te-a0",
		HighWatermark: 50, LowWatermark: 20}, now)
	mustMount(t, st, "b", Segment{ID: "b0", Name: "nb0", Base: 2 << 30, Size: 64 << 10, TEEndpoint: "te-b0"}, now)
	assertServingTally(t, st, "mounted")
	if st.AboveHighWatermark() {
		t.Fatal("an empty pool is above its high watermark")
	}

	put := func(key string, size uint64, seg string) {
		t.Helper()
		rc := ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{seg}}
		if _, code := st.PutStart("w", key, size, rc, now); code != kvstore.OK {
			t.Fatalf("put start %s: %v", key, code)
		}
		if code := st.PutEnd("w", key, nil, now); code != kvstore.OK {
			t.Fatalf("put end %s: %v", key, code)
		}
		assertServingTally(t, st, "put "+key)
	}
	for i := range 4 {
		put(fmt.Sprintf("a%d", i), 8<<10, "na0")
	}
	if st.AboveHighWatermark() {
		t.Fatal("32 KiB of 64 KiB (50%) is past a0's 50% watermark")
	}
	put("a4", 8<<10, "na0")
	if !st.AboveHighWatermark() {
		t.Fatal("40 KiB of 64 KiB (62.5%) is not past a0's 50% watermark")
	}
	put("b-one", 4<<10, "nb0")

	// A write preempted by an upsert leaves its buffer quarantined.
	if _, code := st.PutStart("w", "pending", 8<<10, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"nb0"}}, now); code != kvstore.OK {
		t.Fatalf("put start pending: %v", code)
	}
	assertServingTally(t, st, "pending write")
	now = now.Add(1500 * time.Millisecond)
	if _, code := st.PutStart("w2", "pending", 8<<10, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"nb0"}}, now); code != kvstore.OK {
		t.Fatalf("preempting put start: %v", code)
	}
	assertServingTally(t, st, "preempted write")
	now = now.Add(3 * time.Second)
	st.ReleaseExpired(now)
	assertServingTally(t, st, "quarantine released")

	// a's client falls silent: its overfull segment leaves the tally.
	if _, code := st.Ping("b", 0, now); code != kvstore.OK {
		t.Fatalf("ping b: %v", code)
	}
	if _, code := st.Ping("w", 0, now); code != kvstore.OK {
		t.Fatalf("ping w: %v", code)
	}
	if _, code := st.Ping("w2", 0, now); code != kvstore.OK {
		t.Fatalf("ping w2: %v", code)
	}
	if ex := st.ExpireClients(now); len(ex.Suspected) != 1 || ex.Suspected[0] != "a" {
		t.Fatalf("expiry made %v suspect, want [a]", ex.Suspected)
	}
	assertServingTally(t, st, "a suspect")
	if st.AboveHighWatermark() {
		t.Fatal("a suspect segment's fullness still counts")
	}
	if _, code := st.Ping("a", 0, now); code != kvstore.OK {
		t.Fatalf("ping a: %v", code)
	}
	assertServingTally(t, st, "a restored")
	if !st.AboveHighWatermark() {
		t.Fatal("a's restored segment is past its watermark again, and the check misses it")
	}

	st = roundTrip(t, st)
	assertServingTally(t, st, "snapshot round trip")
	if !st.AboveHighWatermark() {
		t.Fatal("the restored state lost a0's fullness")
	}

	// A remount with another incarnation replaces the segment, freeing
	// what it held.
	mustMount(t, st, "a", Segment{ID: "a0", Name: "na0", Base: 3 << 30, Size: 64 << 10, TEEndpoint: "te-a0",
		HighWatermark: 50, LowWatermark: 20, Incarnation: 7}, now)
	assertServingTally(t, st, "a0 replaced")
	if code := st.UnmountSegment("b", "b0", now); code != kvstore.OK {
		t.Fatalf("unmount b0: %v", code)
	}
	assertServingTally(t, st, "b0 unmounted")
	if code := st.UnmountSegment("a", "a0", now); code != kvstore.OK {
		t.Fatalf("unmount a0: %v", code)
	}
	assertServingTally(t, st, "a0 unmounted")
	if st.serving != (servingPool{}) {
		t.Fatalf("no segment left, tally %+v", st.serving)
	}
}
