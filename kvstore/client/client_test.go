package client

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// startMaster runs an in-process master with its embedded HTTP metadata
// store on free loopback ports.
func startMaster(t testing.TB, mutate func(*master.Config)) (rpc, metadata string) {
	t.Helper()
	svc := startMasterService(t, mutate)
	return svc.RPCAddr(), "http://" + svc.MetadataAddr() + "/metadata"
}

// startMasterService starts a master on loopback, closed at cleanup.
func startMasterService(t testing.TB, mutate func(*master.Config)) *master.Service {
	t.Helper()
	cfg := master.DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := master.StartService(master.ServiceConfig{
		RPCAddress:          "127.0.0.1:0",
		HTTPMetadataAddress: "127.0.0.1:0",
		Server:              master.Options{Config: cfg},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

func newClient(t testing.TB, rpc, meta string, segment, local uint64) *Client {
	t.Helper()
	c, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: meta, GlobalSegmentSize: segment, LocalBufferSize: local, MasterServerAddr: rpc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// buf returns n bytes of mmap'd memory (not Go heap: peers write into it
// over the network, which the race detector cannot see as ordering).
func buf(t testing.TB, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, max(n, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m[:n]
}

func fillPattern(b []byte, seed byte) []byte {
	for i := range b {
		b[i] = byte(i*31) + seed
	}
	return b
}

func part(b []byte) []Part { return []Part{{gpu.AddrOf(b), uint64(len(b))}} }

func TestPutGetCopyAndZeroCopy(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	a := newClient(t, rpc, meta, 64<<20, 8<<20)
	b := newClient(t, rpc, meta, 64<<20, 8<<20)
	for _, size := range []int{1, 4096, 5<<20 + 7} { // the last spans staging chunks
		for _, zc := range []bool{false, true} {
			key := "k" + time.Now().Format("150405.000000000")
			src := fillPattern(buf(t, size), byte(size))
			if err := a.Put(key, part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: zc}); err != nil {
				t.Fatalf("put %d zc=%v: %v", size, zc, err)
			}
			dst := buf(t, size)
			r := b.GetInto(key, part(dst), zc)
			if r.Err != nil || r.Size != uint64(size) || !bytes.Equal(src, dst) {
				t.Fatalf("get %d zc=%v: %+v equal=%v", size, zc, r, bytes.Equal(src, dst))
			}
		}
	}
}

func TestPutExistingKeyDoesNotOverwrite(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 4<<20)
	one, two := fillPattern(buf(t, 100), 1), fillPattern(buf(t, 100), 2)
	if err := c.Put("x", part(one), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("x", part(two), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatalf("second put: %v (want silent success)", err)
	}
	dst := buf(t, 100)
	c.GetInto("x", part(dst), true)
	if !bytes.Equal(dst, one) {
		t.Fatal("put overwrote an existing key")
	}
	if err := c.Put("x", part(two), DefaultReplicateConfig(), PutOptions{Upsert: true}); err != nil {
		t.Fatal(err)
	}
	c.GetInto("x", part(dst), true)
	if !bytes.Equal(dst, two) {
		t.Fatal("upsert did not overwrite")
	}
}

func TestReplicasSurviveClientDeath(t *testing.T) {
	rpc, meta := startMaster(t, func(c *master.Config) { c.DefaultLeaseTTL = 50 * time.Millisecond })
	a := newClient(t, rpc, meta, 16<<20, 4<<20)
	b := newClient(t, rpc, meta, 16<<20, 4<<20)
	reader := newClient(t, rpc, meta, 0, 4<<20)
	src := fillPattern(buf(t, 3000), 9)
	cfg := DefaultReplicateConfig()
	cfg.ReplicaNum = 2
	if err := reader.Put("r", part(src), cfg, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Close() // unmounts its segment: one replica is gone
	dst := buf(t, 3000)
	if r := reader.GetInto("r", part(dst), false); r.Err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("read after one replica's owner left: %+v", r)
	}
	b.Close()
	if r := reader.GetInto("r", part(dst), false); !errors.Is(r.Err, kvstore.ObjectNotFound) {
		t.Fatalf("read with no replica left: %v", r.Err)
	}
}

func TestGetErrors(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 4<<20)
	if r := c.GetInto("missing", part(buf(t, 10)), true); !errors.Is(r.Err, kvstore.ObjectNotFound) {
		t.Fatalf("missing key: %v", r.Err)
	}
	c.Put("big", part(fillPattern(buf(t, 100), 0)), DefaultReplicateConfig(), PutOptions{})
	if r := c.GetInto("big", part(buf(t, 99)), true); !errors.Is(r.Err, kvstore.InvalidParams) {
		t.Fatalf("undersized buffer: %v", r.Err)
	}
	if err := c.Put("", part(buf(t, 1)), DefaultReplicateConfig(), PutOptions{}); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("empty key: %v", err)
	}
	if n, err := c.Size("big"); err != nil || n != 100 {
		t.Fatalf("size: %d %v", n, err)
	}
	got := c.GetRanges([]Range{{Key: "big", Dst: gpu.AddrOf(buf(t, 10)), SrcOffset: 95, Size: 10}})
	if !errors.Is(got[0].Err, kvstore.InvalidParams) {
		t.Fatalf("range past the end: %v", got[0].Err)
	}
}

func TestNoLocalBufferZeroCopyOnly(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 0)
	src := fillPattern(buf(t, 64), 3)
	if err := c.Put("a", part(src), DefaultReplicateConfig(), PutOptions{}); !errors.Is(err, kvstore.InvalidParams) {
		t.Fatalf("copying put without a local buffer: %v", err)
	}
	if err := c.Put("a", part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
}

func TestChecksumMismatch(t *testing.T) {
	t.Setenv("MOONCAKE_STORE_CHECKSUM", "1")
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 4<<20)
	src := fillPattern(buf(t, 1000), 5)
	if err := c.Put("c", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := buf(t, 1000)
	if r := c.GetInto("c", part(dst), true); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Corrupt the stored replica in place, through the owner's memory.
	lists, _ := c.replicaLists([]string{"c"})
	mem(uintptr(lists[0].Replicas[0].BufferAddress), 1)[0] ^= 0xff
	if r := c.GetInto("c", part(dst), true); !errors.Is(r.Err, kvstore.ChecksumMismatch) {
		t.Fatalf("corrupted read: %v", r.Err)
	}
}

// A zero-copy get into a buffer larger than the object must read only the
// object's bytes: the rest of the caller's buffer stays untouched (before
// the fix the whole capacity was read from the replica's segment, leaking
// whatever followed the object there).
func TestGetIntoLargerBufferReadsOnlyObject(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	a := newClient(t, rpc, meta, 16<<20, 1<<20)
	for i, size := range []int{1, 4096, 100000} {
		key := "big-cap-" + string(rune('a'+i))
		src := fillPattern(buf(t, size), 7)
		if err := a.Put(key, part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
			t.Fatal(err)
		}
		// a neighbour object right after it in the segment
		other := fillPattern(buf(t, 4096), 99)
		if err := a.Put(key+"-next", part(other), DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
			t.Fatal(err)
		}
		dst := buf(t, size+4096)
		r := a.GetInto(key, part(dst), true)
		if r.Err != nil || r.Size != uint64(size) || !bytes.Equal(dst[:size], src) {
			t.Fatalf("size %d: %+v", size, r)
		}
		if !bytes.Equal(dst[size:], make([]byte, 4096)) {
			t.Fatalf("size %d: bytes past the object were written into the caller's buffer", size)
		}
	}
}

// When the owner of the first replica is dead (its Transfer Engine gone,
// the master not aware yet), a get falls back to the next replica instead
// of failing with TRANSFER_FAIL (found by tests/test_store_cluster.py:
// SIGKILL of a storage process made reads of 2-replica objects fail).
func TestGetFallsBackToNextReplica(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	a := newClient(t, rpc, meta, 16<<20, 1<<20)
	b := newClient(t, rpc, meta, 16<<20, 1<<20)
	reader := newClient(t, rpc, meta, 0, 1<<20)
	cfg := DefaultReplicateConfig()
	cfg.ReplicaNum = 2
	cfg.PreferredSegments = []string{a.Hostname(), b.Hostname()} // a's replica is listed first
	src := fillPattern(buf(t, 10000), 3)
	if err := reader.Put("two", part(src), cfg, PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
	a.engine.Close() // a "dies": its replica cannot be read any more
	for _, zc := range []bool{true, false} {
		dst := buf(t, len(src))
		if r := reader.GetInto("two", part(dst), zc); r.Err != nil || !bytes.Equal(dst, src) {
			t.Fatalf("zero-copy=%v: %+v", zc, r)
		}
	}
	dst := buf(t, 100)
	if r := reader.GetRanges([]Range{{Key: "two", Dst: gpu.AddrOf(dst), SrcOffset: 50, Size: 100}}); r[0].Err != nil || !bytes.Equal(dst, src[50:150]) {
		t.Fatalf("ranged read: %+v", r[0])
	}
}

// A NULL address with a non-zero size is INVALID_PARAMS, not a crash.
func TestNullAddressIsInvalid(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 16<<20, 1<<20)
	null := []Part{{Addr: 0, Size: 100}}
	for _, zc := range []bool{true, false} {
		if err := c.Put("n", null, DefaultReplicateConfig(), PutOptions{ZeroCopy: zc}); !errors.Is(err, kvstore.InvalidParams) {
			t.Fatalf("put zero-copy=%v: %v", zc, err)
		}
	}
	src := fillPattern(buf(t, 100), 1)
	if err := c.Put("n", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, zc := range []bool{true, false} {
		if r := c.GetInto("n", null, zc); !errors.Is(r.Err, kvstore.InvalidParams) {
			t.Fatalf("get zero-copy=%v: %+v", zc, r)
		}
	}
	if r := c.GetRanges([]Range{{Key: "n", Dst: 0, Size: 10}}); !errors.Is(r[0].Err, kvstore.InvalidParams) {
		t.Fatalf("ranged read into NULL: %+v", r[0])
	}
}

// TestTakenNamePicksAnotherPort: a port effectiveHostname found free may
// be the name another client registered (and let go); the client picks
// another one instead of failing setup.
func TestTakenNamePicksAnotherPort(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	first := newClient(t, rpc, meta, 16<<20, 4<<20)
	_, taken, _ := net.SplitHostPort(first.hostname)
	port, _ := strconv.Atoi(taken)
	old := pickPort
	t.Cleanup(func() { pickPort = old })
	draws := []int{port, port, port + 1}
	pickPort = func(lo, hi int) int {
		p := draws[0]
		if len(draws) > 1 {
			draws = draws[1:]
		}
		return p
	}
	second := newClient(t, rpc, meta, 16<<20, 4<<20)
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)); second.hostname != want {
		t.Fatalf("second client is %s; want %s", second.hostname, want)
	}
	src := fillPattern(buf(t, 4096), 1)
	if err := second.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	mustReadBack(t, first, "k", src)
}
