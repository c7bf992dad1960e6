package master

import (
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// A read after an object was indexed moves it back in the eviction order:
// the round finds its entry outdated and takes the object with the
// older lease first.
func TestLeaseIndexFollowsReads(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.EvictionHighWatermarkRatio, c.EvictionRatio = 0, 0.4 })
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 20, TEEndpoint: "te-s"}, now)
	mustPut(t, st, "a", 64, ReplicateConfig{ReplicaNum: 1}, now)
	mustPut(t, st, "b", 64, ReplicateConfig{ReplicaNum: 1}, now.Add(time.Second))
	if _, code := st.GetReplicaList("a", now.Add(2*time.Second)); code != kvstore.OK {
		t.Fatal(code)
	}
	res := st.Evict(now.Add(time.Hour))
	if len(res.Evicted) != 1 || res.Evicted[0] != "b" {
		t.Fatalf("evicted %v, want [b] (a was read after b was written)", res.Evicted)
	}
	if o := st.objects.get("a"); !o.indexed || len(st.leases.es) != 1 || st.leases.es[0].lease != o.lease {
		t.Fatalf("a after the round: indexed %v, entries %+v, lease %d", o.indexed, st.leases.es, o.lease)
	}
}

// Entries of objects that left the table do not pile up while no round
// runs: the index is compacted at twice the table.
func TestLeaseIndexIsCompacted(t *testing.T) {
	st := newTestState(t, nil)
	now := epoch
	mustMount(t, st, "c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 20, TEEndpoint: "te-s"}, now)
	for range 5000 {
		mustPut(t, st, "churn", 64, ReplicateConfig{ReplicaNum: 1}, now)
		if code := st.Remove("churn", true, now); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	if n := len(st.leases.es); n > 1024+2 {
		t.Fatalf("%d entries in the lease index of an empty table after 5000 puts and removes", n)
	}
}
