package master

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

func newTestState(t *testing.T, mut func(*Config)) *State {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	st, err := NewState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustMount(t *testing.T, st *State, client string, seg Segment, now time.Time) {
	t.Helper()
	if code := st.MountSegment(client, seg, now); code != kvstore.OK {
		t.Fatalf("mount %s: %v", seg.ID, code)
	}
}

func mustPut(t *testing.T, st *State, key string, size uint64, cfg ReplicateConfig, now time.Time) []Replica {
	t.Helper()
	rs, code := st.PutStart("w", key, size, cfg, now)
	if code != kvstore.OK {
		t.Fatalf("PutStart %s: %v", key, code)
	}
	if code := st.PutEnd("w", key, nil, now); code != kvstore.OK {
		t.Fatalf("PutEnd %s: %v", key, code)
	}
	return rs
}

func TestPlanEvictionFormulas(t *testing.T) {
	for _, tc := range []struct {
		used, hw, r float64
		need        bool
		trig        bool
		target, lb  float64
	}{
		{0.80, 0.90, 0.05, false, false, 0, 0},
		{0.90, 0.90, 0.05, false, false, 0, 0}, // not strictly above
		{0.95, 0.90, 0.05, false, true, 0.10, 0.05},
		{0.99, 0.90, 0.05, false, true, 0.14, 0.09},
		{0.50, 0.90, 0.05, true, true, 0.05, 0.025},
		{0.50, 0.90, 0.00, true, false, 0, 0}, // ratio 0 disables failure-triggered runs
		{1.00, 0.50, 0.05, false, true, 0.55, 0.50},
	} {
		p := PlanEviction(tc.used, tc.hw, tc.r, tc.need)
		if p.Triggered != tc.trig || math.Abs(p.Target-tc.target) > 1e-9 || math.Abs(p.LowerBound-tc.lb) > 1e-9 {
			t.Errorf("PlanEviction(%v,%v,%v,%v) = %+v, want trig=%v target=%v lb=%v",
				tc.used, tc.hw, tc.r, tc.need, p, tc.trig, tc.target, tc.lb)
		}
	}
	if ceilCount(20, 0.05) != 1 || ceilCount(21, 0.05) != 2 || ceilCount(5, 0) != 0 {
		t.Error("ceilCount")
	}
}

func TestReplicasOnDistinctSegments(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	for _, id := range []string{"a", "b", "c", "d"} {
		mustMount(t, st, "c1", Segment{ID: id, Name: "host-" + id, Base: 1 << 20, Size: 4096, TEEndpoint: "te-" + id}, now)
	}
	for i := range 20 {
		rs := mustPut(t, st, "k"+string(rune('a'+i)), 64, ReplicateConfig{ReplicaNum: 3}, now)
		if len(rs) != 3 {
			t.Fatalf("got %d replicas, want 3", len(rs))
		}
		seen := map[string]bool{}
		for _, r := range rs {
			if seen[r.SegmentID] {
				t.Fatalf("two replicas on segment %s", r.SegmentID)
			}
			seen[r.SegmentID] = true
			if r.Endpoint != "te-"+r.SegmentID || r.Address < 1<<20 || r.Size != 64 {
				t.Fatalf("bad descriptor %+v", r)
			}
		}
	}
}

func TestPreferredSegmentsAndSameNode(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s1", Base: 1 << 30, Name: "h1:1", Size: 4096, HostID: "n1"}, now)
	mustMount(t, st, "c2", Segment{ID: "s2", Base: 1 << 30, Name: "h2:1", Size: 4096, HostID: "n2"}, now)
	mustMount(t, st, "c3", Segment{ID: "s3", Base: 1 << 30, Name: "h3:1", Size: 4096, HostID: "n3"}, now)
	for i := range 10 {
		key := "p" + string(rune('0'+i))
		rs := mustPut(t, st, key, 8, ReplicateConfig{ReplicaNum: 2, PreferredSegments: []string{"h3:1", "h2:1"}}, now)
		if rs[0].SegmentID != "s3" || rs[1].SegmentID != "s2" {
			t.Fatalf("preferred order not followed: %s,%s", rs[0].SegmentID, rs[1].SegmentID)
		}
		rs = mustPut(t, st, "n"+key, 8, ReplicateConfig{ReplicaNum: 1, PreferSameNode: true, HostID: "n2"}, now)
		if rs[0].SegmentID != "s2" {
			t.Fatalf("same-node preference not followed: %s", rs[0].SegmentID)
		}
	}
	// A full preferred segment falls back to the others.
	mustPut(t, st, "fill", 4096-20*8, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"h2:1"}}, now)
	rs := mustPut(t, st, "spill", 8, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"h2:1"}}, now)
	if rs[0].SegmentID == "s2" {
		t.Fatal("allocated on a full segment")
	}
}

func TestBatchRemoveAndRegex(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Base: 1 << 30, Size: 1 << 16}, now)
	for _, k := range []string{"model/a", "model/b", "other/a", "leased/a"} {
		mustPut(t, st, k, 16, ReplicateConfig{ReplicaNum: 1}, now)
	}
	if _, code := st.GetReplicaList("leased/a", now); code != kvstore.OK {
		t.Fatal(code)
	}
	if _, code := st.PutStart("w", "model/writing", 16, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	got := st.BatchRemove([]string{"other/a", "missing", "leased/a", "model/writing"}, false, now)
	want := []kvstore.ErrorCode{kvstore.OK, kvstore.ObjectNotFound, kvstore.ObjectHasLease, kvstore.ReplicaIsNotReady}
	if !slices.Equal(got, want) {
		t.Fatalf("BatchRemove = %v, want %v", got, want)
	}
	// Search semantics: "a$" matches anywhere-ending keys, not a full match.
	n, code := st.RemoveByRegex(DefaultTenant, "", "el/", false, now)
	if code != kvstore.OK || n != 2 {
		t.Fatalf("RemoveByRegex(el/) = %d,%v want 2 (model/a, model/b; model/writing skipped)", n, code)
	}
	if _, code := st.RemoveByRegex(DefaultTenant, "", "(", false, now); code != kvstore.InvalidParams {
		t.Fatalf("bad regex: %v", code)
	}
	if n, _ := st.RemoveByRegex(DefaultTenant, "", "^leased", false, now); n != 0 {
		t.Fatal("leased object removed without force")
	}
	if n, _ := st.RemoveByRegex(DefaultTenant, "", "^leased", true, now); n != 1 {
		t.Fatal("leased object not removed with force")
	}
	if got := st.Keys(); !slices.Equal(got, []string{"model/writing"}) {
		t.Fatalf("keys = %v", got)
	}
	if n := st.RemoveAll(DefaultTenant, "", true, now); n != 0 {
		t.Fatalf("RemoveAll removed an incomplete object: %d", n)
	}
}

func TestRemountReplacesSegments(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s1", Base: 1 << 30, Size: 1024}, now)
	mustMount(t, st, "c1", Segment{ID: "s2", Base: 1 << 30, Size: 1024}, now)
	mustPut(t, st, "on1", 8, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s1"}}, now)
	mustPut(t, st, "on2", 8, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s2"}}, now)
	// Remount with s1 (kept with its objects) and s3 (new); s2 goes.
	if code := st.ReMountSegment("c1", []Segment{{ID: "s1", Base: 1 << 30, Size: 1024}, {ID: "s3", Base: 1 << 30, Size: 512}}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	// Idempotent.
	if code := st.ReMountSegment("c1", []Segment{{ID: "s1", Base: 1 << 30, Size: 1024}, {ID: "s3", Base: 1 << 30, Size: 512}}, now); code != kvstore.OK {
		t.Fatal(code)
	}
	var ids []string
	for _, s := range st.Segments() {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"s1", "s3"}) || !slices.Equal(st.Keys(), []string{"on1"}) {
		t.Fatalf("segments %v keys %v", ids, st.Keys())
	}
	if st.Stats().CapacityBytes != 1536 {
		t.Fatalf("capacity %d", st.Stats().CapacityBytes)
	}
	// Another client cannot take s1; unknown segments cannot be unmounted.
	if code := st.MountSegment("c2", Segment{ID: "s1", Base: 1 << 30, Size: 1024}, now); code != kvstore.SegmentAlreadyExists {
		t.Fatalf("mount of a taken id: %v", code)
	}
	if code := st.UnmountSegment("c2", "s1", now); code != kvstore.SegmentNotFound {
		t.Fatalf("unmount of another client's segment: %v", code)
	}
	if code := st.MountSegment("c1", Segment{ID: "z", Base: 1 << 30, Size: 0}, now); code != kvstore.InvalidParams {
		t.Fatalf("zero-size mount: %v", code)
	}
	if code := st.MountSegment("c1", Segment{ID: "z", Size: 1024}, now); code != kvstore.InvalidParams {
		t.Fatalf("zero-base mount: %v", code)
	}
}

func TestHardPinNeverEvicted(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.EvictionHighWatermarkRatio = 0.1; c.EvictionRatio = 1 })
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Base: 1 << 30, Size: 1024}, now)
	mustPut(t, st, "hard", 512, ReplicateConfig{ReplicaNum: 1, HardPin: true}, now)
	mustPut(t, st, "soft", 256, ReplicateConfig{ReplicaNum: 1}, now)
	res := st.Evict(now.Add(time.Hour))
	if !slices.Equal(res.Evicted, []string{"soft"}) || !slices.Equal(st.Keys(), []string{"hard"}) {
		t.Fatalf("evicted %v, left %v", res.Evicted, st.Keys())
	}
	// Still above the watermark, but nothing evictable.
	if res := st.Evict(now.Add(2 * time.Hour)); !res.Plan.Triggered || len(res.Evicted) != 0 {
		t.Fatalf("second run %+v", res)
	}
	if st.Stats().EvictedKeys != 1 {
		t.Fatal("evicted counter")
	}
}

func TestMetricsText(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Base: 1 << 30, Size: 1 << 30}, now)
	mustPut(t, st, "k", 100, ReplicateConfig{ReplicaNum: 1, SoftPin: SoftPinEnable}, now)
	st.Remove("missing", false, now)
	var b strings.Builder
	if err := st.Stats().WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"master_total_capacity_bytes 1073741824\n", "master_allocated_bytes 104\n",
		"master_key_count 1\n", "master_active_clients 1\n", "master_soft_pin_key_count 1\n",
		"master_put_start_requests_total 1\n", "master_remove_failures_total 1\n",
		"master_evicted_key_count 0\n", "master_batch_put_start_requests_total 0\n",
		"# TYPE master_put_end_requests_total counter\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}
