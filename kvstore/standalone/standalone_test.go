package standalone

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

var nextPort = 40000 + os.Getpid()%10000

// daemon runs a master, a real client and a Server in this process; it
// returns the server and the address dummies connect to.
func daemon(t *testing.T, hot hotcache.Config) (*Server, string) {
	t.Helper()
	return daemonWith(t, ServerConfig{HotCache: hot})
}

// daemonWith is daemon with cfg's other settings (Client, Socket and
// Keyspace are filled in).
func daemonWith(t *testing.T, cfg ServerConfig) (*Server, string) {
	t.Helper()
	svc, err := master.StartService(master.ServiceConfig{RPCAddress: "127.0.0.1:0", HTTPMetadataAddress: "127.0.0.1:0",
		Server: master.Options{Config: master.DefaultConfig()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	c, err := client.New(client.Config{LocalHostname: "127.0.0.1", MetadataServer: "http://" + svc.MetadataAddr() + "/metadata",
		GlobalSegmentSize: 32 << 20, MasterServerAddr: svc.RPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	nextPort++
	cfg.Client, cfg.Socket, cfg.Keyspace = c, ipc.SocketName(nextPort), "default"
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, fmt.Sprintf("127.0.0.1:%d", nextPort)
}

func dummy(t *testing.T, addr, scope string) *Dummy {
	t.Helper()
	d, err := NewDummy(DummyConfig{ServerAddress: addr, LocalBufferSize: 1 << 20, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestZeroCopyAndStagedCalls(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{})
	a, b := dummy(t, addr, "s"), dummy(t, addr, "s")
	p := a.AllocFromMemPool(1 << 16)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	if err := a.RegisterBuffer(p, 1<<16); err != nil {
		t.Fatal(err)
	}
	src := gpu.HostBytes(p, 5000)
	copy(src, bytes.Repeat([]byte("region"), 1000))
	if errs := a.BatchPut([]string{"zc"}, [][]client.Part{{{Addr: p, Size: 5000}}}, client.DefaultReplicateConfig(),
		client.PutOptions{ZeroCopy: true}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// b reads into private memory: staged through its local buffer.
	dst := make([]byte, 8192)
	r := b.BatchGetInto([]string{"zc", "missing"}, [][]client.Part{{{Addr: gpu.AddrOf(dst), Size: 8192}}, {{Addr: gpu.AddrOf(dst), Size: 8}}}, true)
	if r[0].Err != nil || r[0].Size != 5000 || !bytes.Equal(dst[:5000], src) {
		t.Fatalf("get %+v", r[0])
	}
	if !errors.Is(r[1].Err, kvstore.ObjectNotFound) {
		t.Fatalf("missing key: %v", r[1].Err)
	}
	if err := a.UnregisterBuffer(p); err != nil {
		t.Fatal(err)
	}
	if err := a.UnregisterBuffer(p); !errors.Is(err, kvstore.InternalError) {
		t.Fatalf("second unregister: %v", err)
	}
}

func TestTranslateStaysInsideTheDummysRegions(t *testing.T) {
	mem := make([]byte, 4096)
	s := &session{regions: []*installed{{base: 0x10000, size: 4096, m: &ipc.Region{FD: -1, Mem: mem}}}}
	ok := func(addr, n uint64) bool { _, ok := s.translate([]span{{Addr: addr, Size: n}}); return ok }
	if !ok(0x10000, 4096) || !ok(0x10800, 2048) || !ok(0x20000, 0) {
		t.Fatal("a span inside the region was refused")
	}
	for _, c := range [][2]uint64{{0xffff, 2}, {0x10001, 4096}, {0x11000, 1}, {0x10000, 1 << 62}} {
		if ok(c[0], c[1]) {
			t.Fatalf("span [%#x,+%d) outside the region was accepted", c[0], c[1])
		}
	}
	p, _ := s.translate([]span{{Addr: 0x10010, Size: 16}})
	if p[0].Addr != gpu.AddrOf(mem)+0x10 {
		t.Fatal("translated to the wrong address")
	}
}

func TestDummyLeavingReleasesItsSession(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{})
	a := dummy(t, addr, "s")
	b := dummy(t, addr, "s")
	p := a.AllocFromMemPool(4096)
	if err := a.RegisterBuffer(p, 4096); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return srv.Sessions() == 2 }, "two sessions")
	a.Close()
	eventually(t, func() bool { return srv.Sessions() == 1 }, "the closed dummy's session ends")
	if errs := b.BatchPut([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf([]byte("v")), Size: 1}}}, client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got := a.BatchExist([]string{"k"}); got[0] != int(kvstore.InvalidParams) {
		t.Fatalf("call on a closed dummy: %v", got)
	}
}

func TestServerCloseEndsDummyCalls(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{})
	a := dummy(t, addr, "s")
	if a.Health() != client.Healthy {
		t.Fatal("unhealthy before shutdown")
	}
	srv.Close()
	if got := a.BatchExist([]string{"k"}); got[0] != int(kvstore.RPCFail) {
		t.Fatalf("call after the daemon closed: %v", got)
	}
	if a.Health() != client.MasterUnreachable {
		t.Fatal("healthy after the daemon closed")
	}
}

func TestKeyspaceMustMatch(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{})
	if _, err := NewDummy(DummyConfig{ServerAddress: addr, Scope: "s", Keyspace: "other"}); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("keyspace mismatch: %v", err)
	}
	if _, err := NewDummy(DummyConfig{ServerAddress: "10.255.255.1:5", Scope: "s"}); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("a remote host: %v", err)
	}
}

func TestHotCacheFillHitInvalidate(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{Size: 1 << 20, BlockSize: 4096})
	a := dummy(t, addr, "s")
	val := []byte("hot value")
	put := func(v []byte, upsert bool) {
		if errs := a.BatchPut([]string{"h"}, [][]client.Part{{{Addr: gpu.AddrOf(v), Size: uint64(len(v))}}}, client.DefaultReplicateConfig(), client.PutOptions{Upsert: upsert}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	get := func() []byte {
		dst := make([]byte, 64)
		r := a.BatchGetInto([]string{"h"}, [][]client.Part{{{Addr: gpu.AddrOf(dst), Size: 64}}}, true)
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
		return dst[:r[0].Size]
	}
	put(val, false)
	if !bytes.Equal(get(), val) || !bytes.Equal(get(), val) {
		t.Fatal("wrong bytes")
	}
	srv.mu.Lock()
	st := srv.scopes["s"].counters()
	srv.mu.Unlock()
	if st.Fills != 1 || st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("counters %+v", st)
	}
	put([]byte("new"), true)
	if got := get(); string(got) != "new" {
		t.Fatalf("read %q after an upsert", got)
	}
}

func TestLastSessionOfAScopeFreesItsCache(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	a, b := dummy(t, addr, "s"), dummy(t, addr, "s")
	scopes := func() int { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.scopes) }
	if scopes() != 1 {
		t.Fatalf("%d scopes for one scope name", scopes())
	}
	a.Close()
	eventually(t, func() bool { return srv.Sessions() == 1 }, "a's session ends")
	if scopes() != 1 {
		t.Fatal("the scope went away while b still uses it")
	}
	b.Close()
	eventually(t, func() bool { return scopes() == 0 }, "the scope is freed with its last session")
}

func TestRegisterFDOfCallerMemory(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{})
	// No local buffer: a put from the range below works only in place.
	a, err := NewDummy(DummyConfig{ServerAddress: addr, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r, err := ipc.NewRegion("caller", 3*4096)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sub := r.Addr() + 4096
	copy(r.Mem[4096:], "page two")
	if err := a.RegisterFD(sub, 4096, r.FD, 4096); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterFD(sub, 4096, r.FD, 4096); err != nil {
		t.Fatalf("registering again: %v", err)
	}
	if err := a.RegisterFD(r.Addr(), 8192, r.FD, 0); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("overlapping range: %v", err)
	}
	if errs := a.BatchPut([]string{"fd"}, [][]client.Part{{{Addr: sub, Size: 8}}}, client.DefaultReplicateConfig(),
		client.PutOptions{ZeroCopy: true}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	dst := make([]byte, 16)
	res := dummy(t, addr, "s").BatchGetInto([]string{"fd"}, [][]client.Part{{{Addr: gpu.AddrOf(dst), Size: 16}}}, true)
	if res[0].Err != nil || string(dst[:res[0].Size]) != "page two" {
		t.Fatalf("read back %q %v", dst, res[0].Err)
	}
}
