package master

import (
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

// TestReserveRefusedWithSharedFS: a master that also writes every object
// to a shared file system hands out no block (a commit cannot write the
// file); releasing still works.
func TestReserveRefusedWithSharedFS(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.FS.RootDir = "/shared" })
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 20}, epoch)
	if _, code := st.Reserve("c1", DefaultTenant, 4096, nil, epoch); code != kvstore.NotSupported {
		t.Fatalf("Reserve = %v; want NOT_SUPPORTED", code)
	}
	if _, code := st.Reserve("c1", DefaultTenant, 0, []uint64{1}, epoch); code != kvstore.OK {
		t.Fatalf("release-only Reserve = %v; want OK", code)
	}
}

// TestCommitChargesTheTenant: a commit is admitted against the tenant's
// quota like a put start; refused, its range goes back to the segment.
func TestCommitChargesTheTenant(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.MultiTenant = true })
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 20}, epoch)
	if code := st.SetTenantQuota("t", 1000); code != kvstore.OK {
		t.Fatal(code)
	}
	// A tenant with a quota gets no block (its unused bytes would be
	// charged to nobody); a caller of another tenant does, and its
	// commits of t's keys are admitted against t's quota.
	if _, code := st.Reserve("c1", "t", 8192, nil, epoch); code != kvstore.NotSupported {
		t.Fatalf("Reserve for a tenant with a quota = %v; want NOT_SUPPORTED", code)
	}
	if _, code := st.Reserve("c1", "nobody", 8192, nil, epoch); code != kvstore.TenantNotRegistered {
		t.Fatalf("Reserve for an unregistered tenant = %v; want TENANT_NOT_REGISTERED", code)
	}
	r, code := st.Reserve("c1", DefaultTenant, 8192, nil, epoch)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	key := st.cfg.ObjectKey("t", "k")
	cfg := ReplicateConfig{ReplicaNum: 1}
	if code, gone := st.PutCommit("c1", key, 800, r.ID, 0, nil, cfg, epoch); code != kvstore.OK || gone {
		t.Fatalf("first commit = %v gone=%v", code, gone)
	}
	before := st.Stats().AllocatedBytes
	if code, _ := st.PutCommit("c1", st.cfg.ObjectKey("t", "k2"), 800, r.ID, 1024, nil, cfg, epoch); code != kvstore.TenantQuotaExceeded {
		t.Fatalf("second commit = %v; want TENANT_QUOTA_EXCEEDED", code)
	}
	if after := st.Stats().AllocatedBytes; after != before-800 {
		t.Fatalf("allocated %d -> %d; want the refused commit's 800 bytes freed", before, after)
	}
	if _, unused := st.Reserved(); unused != 8192-800-800 {
		t.Fatalf("unused = %d; want %d", unused, 8192-800-800)
	}
}

// TestRestartedMasterDoesNotReuseIds: a master that restarts without the
// operation log remembers no block, and its ids start elsewhere (drawn at
// random, whatever Config.Seed): a commit with an id the client kept from
// the last incarnation is gone, not placed in the new incarnation's block.
func TestRestartedMasterDoesNotReuseIds(t *testing.T) {
	seg := Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 20}
	before := newTestState(t, nil)
	mustMount(t, before, "c1", seg, epoch)
	old, code := before.Reserve("c1", DefaultTenant, 8192, nil, epoch)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	after := newTestState(t, nil)
	mustMount(t, after, "c1", seg, epoch)
	if _, code := after.Reserve("c1", DefaultTenant, 8192, nil, epoch); code != kvstore.OK {
		t.Fatal(code)
	}
	cfg := ReplicateConfig{ReplicaNum: 1}
	if code, gone := after.PutCommit("c1", "k", 100, old.ID, 4096, nil, cfg, epoch); !gone {
		t.Fatalf("commit with the last incarnation's id %d = %v, not gone", old.ID, code)
	}
}
