package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// rawSession is a process that speaks the dummy protocol itself, without
// the Dummy type's manners.
func rawSession(t *testing.T, addr string) *ipc.Conn {
	t.Helper()
	var port int
	fmt.Sscanf(addr[strings.LastIndexByte(addr, ':')+1:], "%d", &port)
	uc, err := ipc.Dial(ipc.SocketName(port), dialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ipc.NewConn(uc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func rawCall(t *testing.T, conn *ipc.Conn, req request, fds ...int) (response, []int) {
	t.Helper()
	msg, err := conn.Call(context.Background(), ipc.Message{Body: encode(req), FDs: fds})
	if err != nil {
		t.Fatal(err)
	}
	var resp response
	if err := json.Unmarshal(msg.Body, &resp); err != nil {
		t.Fatal(err)
	}
	return resp, msg.FDs
}

// TestHotCacheDescriptorIsReadOnlyForEveryDummy runs the attack of issue
// 33: a process says hello with the victim's scope name, asks for the hot
// cache and tries every way of writing or shrinking it; then the victim
// must still read its own bytes.
func TestHotCacheDescriptorIsReadOnlyForEveryDummy(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{Size: 1 << 20, BlockSize: 4096, Shared: true})
	victim := dummy(t, addr, "victim-scope")
	genuine := []byte("the victim's bytes")
	if errs := victim.BatchPut([]string{"v"}, [][]client.Part{{{Addr: gpu.AddrOf(genuine), Size: uint64(len(genuine))}}},
		client.DefaultReplicateConfig(), client.PutOptions{}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	get := func() []byte {
		dst := make([]byte, 64)
		r := victim.BatchGetInto([]string{"v"}, [][]client.Part{{{Addr: gpu.AddrOf(dst), Size: 64}}}, true)
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
		return dst[:r[0].Size]
	}
	get() // fills the scope's cache

	conn := rawSession(t, addr)
	if resp, _ := rawCall(t, conn, request{Op: opHello, Scope: "victim-scope"}); resp.Code != 0 {
		t.Fatalf("hello: %+v", resp)
	}
	resp, fds := rawCall(t, conn, request{Op: opHotCache})
	if resp.Code != 0 || len(fds) != 1 {
		t.Fatalf("hot_cache: %+v, %d descriptors", resp, len(fds))
	}
	fd, size := fds[0], int(resp.Count)
	defer unix.Close(fd)
	writable := func(fd int) bool {
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err == nil {
			copy(m[4096:], strings.Repeat("\xff", 4096)) // every record: an odd sequence, a huge size
			unix.Munmap(m)
		}
		return err == nil
	}
	if writable(fd) {
		t.Error("the hot cache memfd maps PROT_WRITE, MAP_SHARED")
	}
	if err := unix.Ftruncate(fd, 0); err == nil {
		t.Error("the hot cache memfd was truncated")
	}
	if _, err := unix.Pwrite(fd, []byte("forged"), 4096); err == nil {
		t.Error("pwrite into the hot cache memfd succeeded")
	}
	re, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(re)
	if _, err := unix.Pwrite(re, []byte("forged"), 4096); err == nil {
		t.Error("pwrite through /proc/self/fd/N opened O_RDWR succeeded")
	}
	if writable(re) {
		t.Error("the hot cache memfd reopened O_RDWR maps PROT_WRITE, MAP_SHARED")
	}
	if got := get(); string(got) != string(genuine) {
		t.Fatalf("the victim read %q", got)
	}
	victim.dropHotCache() // and through the daemon's own lookup
	if got := get(); string(got) != string(genuine) {
		t.Fatalf("the victim read %q through the daemon", got)
	}
}

// unsealedMemfd is a memfd a careless (or hostile) dummy might register.
func unsealedMemfd(t *testing.T, size int) (int, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); unix.Close(fd) })
	return fd, mem
}

func TestRegisterRefusesAMemfdThatCanShrink(t *testing.T) {
	_, addr := daemon(t, hotcache.Config{})
	a, err := NewDummy(DummyConfig{ServerAddress: addr, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	fd, mem := unsealedMemfd(t, 8192)
	err = a.RegisterFD(gpu.AddrOf(mem), 8192, fd, 0)
	if !errors.Is(err, kvstore.InvalidParams) || !strings.Contains(err.Error(), "F_SEAL_SHRINK") {
		t.Fatalf("registering an unsealed memfd: %v", err)
	}
	// The same at the wire, bypassing the Dummy type.
	conn := rawSession(t, addr)
	rawCall(t, conn, request{Op: opHello, Scope: "s"})
	dup, _ := unix.Dup(fd)
	if resp, _ := rawCall(t, conn, request{Op: opRegister, Base: 1 << 40, Size: 8192}, dup); resp.Code != int32(kvstore.InvalidParams) {
		t.Fatalf("raw register of an unsealed memfd: %+v", resp)
	}

	// A sealed region registers, cannot shrink, and serves puts and gets.
	r, err := ipc.NewRegion("sealed", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := a.RegisterFD(r.Addr(), 8192, r.FD, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(r.FD, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("ftruncate of a registered region: %v", err)
	}
	copy(r.Mem, "sealed bytes")
	if errs := a.BatchPut([]string{"sealed"}, [][]client.Part{{{Addr: r.Addr(), Size: 12}}}, client.DefaultReplicateConfig(),
		client.PutOptions{ZeroCopy: true}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	res := a.BatchGetInto([]string{"sealed"}, [][]client.Part{{{Addr: r.Addr() + 4096, Size: 4096}}}, true)
	if res[0].Err != nil || string(r.Mem[4096:4096+res[0].Size]) != "sealed bytes" {
		t.Fatalf("get into the sealed region: %+v %q", res[0], r.Mem[4096:4108])
	}
}
