package client

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
)

// A put session writes an object in ranges (out of order), a get session
// reads it back in other ranges; neither range call asks the master.
func TestSessionsRangedPutAndGet(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	w := newClient(t, rpc, meta, 16<<20, 4<<20)
	r := newClient(t, rpc, meta, 0, 4<<20)
	const n = 3000
	src := fillPattern(buf(t, n), 7)
	cfg := DefaultReplicateConfig()
	cfg.ReplicaNum = 2
	if errs := w.PutSessionStart([]string{"s", "s"}, []uint64{n, n}, cfg); errs[0] != nil || !errors.Is(errs[1], kvstore.InvalidParams) {
		t.Fatalf("start (duplicate key in the call): %v", errs)
	}
	if errs := w.PutSessionStart([]string{"s"}, []uint64{n}, cfg); !errors.Is(errs[0], kvstore.InvalidParams) {
		t.Fatalf("second session on the key: %v", errs)
	}
	// Not readable while the session is open.
	if res := r.GetSessionStart([]string{"s"}); !errors.Is(res[0], kvstore.ReplicaIsNotReady) {
		t.Fatalf("get session on an open write: %v", res)
	}
	spans := []Span{{gpu.AddrOf(src[2000:]), 1000, 2000}, {gpu.AddrOf(src), 2000, 0}}
	if res := w.PutSessionRanges([]string{"s", "none"}, [][]Span{spans, spans}); res[0].Err != nil || res[0].Size != n || !errors.Is(res[1].Err, kvstore.InvalidParams) {
		t.Fatalf("put ranges: %+v", res)
	}
	if res := w.PutSessionRanges([]string{"s"}, [][]Span{{{gpu.AddrOf(src), 10, n - 5}}}); !errors.Is(res[0].Err, kvstore.InvalidParams) {
		t.Fatalf("overflowing range: %+v", res)
	}
	if errs := w.PutSessionEnd([]string{"s", "none"}); errs[0] != nil || !errors.Is(errs[1], kvstore.InvalidParams) {
		t.Fatalf("end: %v", errs)
	}
	if res := r.GetSessionStart([]string{"s", "missing"}); res[0] != nil || !errors.Is(res[1], kvstore.ObjectNotFound) {
		t.Fatalf("get session start: %v", res)
	}
	dst := buf(t, n)
	got := r.GetSessionRanges([]string{"s"}, [][]Span{{{gpu.AddrOf(dst), 100, 0}, {gpu.AddrOf(dst[100:]), n - 100, 100}}})
	if got[0].Err != nil || got[0].Size != n || !bytes.Equal(dst, src) {
		t.Fatalf("get ranges: %+v equal=%v", got, bytes.Equal(dst, src))
	}
	if got := r.GetSessionRanges([]string{"s"}, [][]Span{{{gpu.AddrOf(dst), 2, n - 1}}}); !errors.Is(got[0].Err, kvstore.InvalidParams) {
		t.Fatalf("range past the end: %+v", got)
	}
	r.GetSessionEnd([]string{"s"})
	if got := r.GetSessionRanges([]string{"s"}, [][]Span{{{gpu.AddrOf(dst), 1, 0}}}); !errors.Is(got[0].Err, kvstore.InvalidParams) {
		t.Fatalf("read after session end: %+v", got)
	}
}

func TestPutSessionRevoke(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 4<<20)
	if errs := c.PutSessionStart([]string{"v"}, []uint64{100}, DefaultReplicateConfig()); errs[0] != nil {
		t.Fatal(errs)
	}
	if errs := c.PutSessionRevoke([]string{"v", "v"}); errs[0] != nil || !errors.Is(errs[1], kvstore.InvalidParams) {
		t.Fatalf("revoke: %v", errs)
	}
	if res := c.GetSessionStart([]string{"v"}); !errors.Is(res[0], kvstore.ObjectNotFound) {
		t.Fatalf("revoked object: %v", res)
	}
	// The key is free again.
	if errs := c.PutSessionStart([]string{"v"}, []uint64{100}, DefaultReplicateConfig()); errs[0] != nil {
		t.Fatal(errs)
	}
}
