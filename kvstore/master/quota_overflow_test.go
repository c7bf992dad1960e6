package master

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

const gib = uint64(1) << 30

// TestQuotaWorstCaseDoesNotWrap: a write of 2^63 bytes in 2 replicas is
// 2^64 bytes in the worst case, which wrapped to 0 and was admitted under
// a 1 GiB quota (the one replica the pool could hold then charged the
// tenant 2^63 bytes).
func TestQuotaWorstCaseDoesNotWrap(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.MultiTenant = true })
	now := time.Unix(1000, 0)
	mustMount(t, st, "c1", Segment{ID: "huge", Name: "n1", Base: 1 << 20, Size: 1<<63 + gib}, now)
	if code := st.SetTenantQuota("t", gib); code != kvstore.OK {
		t.Fatal(code)
	}
	key := st.Config().ObjectKey("t", "k")
	if _, code := st.PutStart("w", key, 1<<63, ReplicateConfig{ReplicaNum: 2}, now); code != kvstore.TenantQuotaExceeded {
		t.Fatalf("PutStart 2^63 x 2 under a 1 GiB quota = %v, want TENANT_QUOTA_EXCEEDED", code)
	}
	// A replica count from the wire (uint32) times a large size.
	if _, code := st.PutStart("w", key, math.MaxUint64/2, ReplicateConfig{ReplicaNum: math.MaxUint32}, now); code != kvstore.TenantQuotaExceeded {
		t.Fatalf("PutStart (2^64/2) x (2^32-1) = %v, want TENANT_QUOTA_EXCEEDED", code)
	}
	if info, _ := st.Tenant("t"); info.UsedBytes != 0 || info.Objects != 0 {
		t.Fatalf("refused writes charged the tenant: %+v", info)
	}
}

// TestQuotaMultiGiB: quotas and charges of multi-GiB objects in several
// multi-GiB segments add up exactly, and the worst case counts every
// replica.
func TestQuotaMultiGiB(t *testing.T) {
	st := newTestState(t, func(c *Config) { c.MultiTenant = true })
	now := time.Unix(1000, 0)
	for i, id := range []string{"a", "b", "c"} {
		mustMount(t, st, "c"+id, Segment{ID: id, Name: id, Base: uint64(i+1) << 40, Size: 8 * gib}, now)
	}
	if code := st.SetTenantQuota("t", 10*gib); code != kvstore.OK {
		t.Fatal(code)
	}
	cfg := st.Config()
	if _, code := st.PutStart("w", cfg.ObjectKey("t", "big"), 4*gib, ReplicateConfig{ReplicaNum: 3}, now); code != kvstore.TenantQuotaExceeded {
		t.Fatalf("4 GiB x 3 under 10 GiB = %v, want TENANT_QUOTA_EXCEEDED", code)
	}
	mustPut(t, st, cfg.ObjectKey("t", "k1"), 4*gib, ReplicateConfig{ReplicaNum: 2}, now)
	if info, _ := st.Tenant("t"); info.UsedBytes != 8*gib || info.Objects != 1 {
		t.Fatalf("after 4 GiB x 2: %+v, want 8 GiB in 1 object", info)
	}
	if _, code := st.PutStart("w", cfg.ObjectKey("t", "k2"), 2*gib+1, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.TenantQuotaExceeded {
		t.Fatalf("8 GiB + 2 GiB + 1 under 10 GiB = %v, want TENANT_QUOTA_EXCEEDED", code)
	}
	mustPut(t, st, cfg.ObjectKey("t", "k2"), 2*gib, ReplicateConfig{ReplicaNum: 1}, now)
	if info, _ := st.Tenant("t"); info.UsedBytes != 10*gib {
		t.Fatalf("used = %d, want exactly the 10 GiB quota", info.UsedBytes)
	}
}

// TestMountRefusesWrappingSegments: a segment whose end passes 2^64 (its
// replica addresses would wrap) or that takes the pool past 2^64 bytes
// (capacity and usage sums would wrap) is INVALID_PARAMS; both were
// mounted before, and the pool's capacity then read as a small number.
func TestMountRefusesWrappingSegments(t *testing.T) {
	st := newTestState(t, nil)
	now := time.Unix(1000, 0)
	if code := st.MountSegment("c1", Segment{ID: "end", Name: "n", Base: math.MaxUint64 - gib + 1, Size: 2 * gib}, now); code != kvstore.InvalidParams {
		t.Fatalf("segment ending past 2^64 = %v, want INVALID_PARAMS", code)
	}
	mustMount(t, st, "c1", Segment{ID: "s1", Name: "n1", Base: 1 << 12, Size: 1 << 63}, now)
	if code := st.MountSegment("c2", Segment{ID: "s2", Name: "n2", Base: 1 << 12, Size: 1 << 63}, now); code != kvstore.InvalidParams {
		t.Fatalf("second 2^63-byte segment = %v, want INVALID_PARAMS", code)
	}
	if got := st.Stats().CapacityBytes; got != 1<<63 {
		t.Fatalf("capacity = %d, want 2^63", got)
	}
	mustMount(t, st, "c2", Segment{ID: "s3", Name: "n3", Base: 1 << 12, Size: 64 * gib}, now)
	if got := st.Stats().CapacityBytes; got != 1<<63+64*gib {
		t.Fatalf("capacity = %d, want 2^63 + 64 GiB", got)
	}
}

// TestSegmentWatermarkDoesNotWrap: allocated×100 and percent×size of a
// 2^62-byte segment pass 2^64; compared in 64 bits, a half-full segment
// read as past an 80% high watermark and not below a 60% low one.
func TestSegmentWatermarkDoesNotWrap(t *testing.T) {
	sg := &segment{info: Segment{HighWatermark: 80, LowWatermark: 60}, alloc: NewAllocator(1 << 62)}
	if _, ok := sg.alloc.Allocate(1 << 61); !ok {
		t.Fatal("allocate half the segment")
	}
	if sg.overfull() {
		t.Error("a 50% full segment is past its 80% high watermark")
	}
	if !sg.belowLow() {
		t.Error("a 50% full segment is not below its 60% low watermark")
	}
	sg.info.HighWatermark = 40
	if !sg.overfull() {
		t.Error("a 50% full segment is not past a 40% high watermark")
	}
	sg.info.HighWatermark = math.MaxUint32 // a uint32 percent from the wire
	if sg.overfull() {
		t.Error("a 50% full segment is past a 4294967295% high watermark")
	}
}

// TestMountRefusesControlCharactersInNames: /get_all_segments lists one
// name per line, so a name with a newline would forge a second segment
// there; ids, names and endpoints with control characters or over 1 KiB
// are INVALID_PARAMS, and the plain ones around them still mount.
func TestMountRefusesControlCharactersInNames(t *testing.T) {
	st := newTestState(t, nil)
	now := time.Unix(1000, 0)
	for _, seg := range []Segment{
		{ID: "a\nforged", Name: "n"},
		{ID: "b", Name: "n\nforged"},
		{ID: "c", Name: "n", TEEndpoint: "127.0.0.1:1\r\n"},
		{ID: "d", Name: "tab\there"},
		{ID: "e", Name: "del\x7f"},
		{ID: strings.Repeat("x", maxSegmentName+1), Name: "n"},
	} {
		seg.Base, seg.Size = 1<<12, gib
		if code := st.MountSegment("c1", seg, now); code != kvstore.InvalidParams {
			t.Errorf("mount of %q/%q/%q = %v, want INVALID_PARAMS", seg.ID, seg.Name, seg.TEEndpoint, code)
		}
	}
	mustMount(t, st, "c1", Segment{ID: "plain", Name: "host:1 ünïcode", TEEndpoint: "127.0.0.1:1", Base: 1 << 12, Size: gib}, now)
	if got := st.Stats().CapacityBytes; got != gib {
		t.Fatalf("capacity = %d, want only the plain segment's 1 GiB", got)
	}
}
