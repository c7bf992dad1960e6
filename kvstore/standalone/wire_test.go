package standalone

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// rawDial connects a plain socket to the daemon at addr, as any local
// process can, bypassing the ipc package.
func rawDial(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	var p int
	for _, c := range port {
		p = p*10 + int(c-'0')
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Connect(sock, &unix.SockaddrUnix{Name: ipc.SocketName(p)}); err != nil {
		t.Fatal(err)
	}
	unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20})
	return sock
}

// rawRequest sends one request frame of the dummy wire (u32 body length,
// u32 id, u8 kind 1, u8 announced descriptors, two zero bytes, body)
// with fds attached, whatever the header announces.
func rawRequest(t *testing.T, sock int, id uint32, body string, announced int, fds []int) {
	t.Helper()
	b := make([]byte, 12, 12+len(body))
	binary.LittleEndian.PutUint32(b, uint32(len(body)))
	binary.LittleEndian.PutUint32(b[4:], id)
	b[8], b[9] = 1, byte(announced)
	b = append(b, body...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(sock, b, oob, nil, unix.MSG_NOSIGNAL); err != nil && err != unix.EPIPE && err != unix.ECONNRESET {
		t.Fatal(err)
	}
}

func openFDCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestStrayDescriptorsAreClosedAndEndTheConnection(t *testing.T) {
	srv, addr := daemon(t, hotcache.Config{})
	memfd, err := unix.MemfdCreate("stale", unix.MFD_CLOEXEC) // 0 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	stray := []int{memfd, memfd, memfd, memfd, memfd, memfd, memfd, memfd}
	before := openFDCount(t)
	sock := rawDial(t, addr)
	ended := 0
	for i := range 500 {
		// More descriptors than announced: 0, or 1 for a register.
		if i%2 == 0 {
			rawRequest(t, sock, uint32(i+1), `{"op":"health"}`, 0, stray)
		} else {
			rawRequest(t, sock, uint32(i+1), `{"op":"register","base":4096,"size":4096}`, 1, stray)
		}
		n, err := unix.Read(sock, make([]byte, 4096))
		if err == unix.ECONNRESET {
			n, err = 0, nil
		}
		if err != nil {
			t.Fatalf("call %d: neither a reply nor the end of the connection: %v", i, err)
		}
		if n == 0 { // ended, as it should be: connect again
			ended++
			unix.Close(sock)
			sock = rawDial(t, addr)
		}
	}
	if ended != 500 {
		t.Errorf("%d of 500 connections with stray descriptors were ended", ended)
	}
	// The last connection is still open: whatever the daemon kept of it
	// is counted.
	eventually(t, func() bool { return srv.Sessions() <= 1 }, "the ended sessions to go")
	deadline := time.Now().Add(20 * time.Second)
	for openFDCount(t) > before+4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := openFDCount(t); after > before+4 {
		t.Fatalf("%d descriptors open in the daemon's process before 500 calls with 8 stray descriptors each, %d after", before, after)
	}
	unix.Close(sock)

	// A correct register on a new connection maps the memfd it sent: a
	// zero-copy put from it stores its bytes, not the stale file's.
	d := dummy(t, addr, "s")
	p := d.AllocFromMemPool(1 << 16)
	if p == 0 {
		t.Fatal("alloc_from_mem_pool failed")
	}
	if err := d.RegisterBuffer(p, 1<<16); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("the region sent"), 100)
	copy(gpu.HostBytes(p, uint64(len(want))), want)
	if errs := d.BatchPut([]string{"k"}, [][]client.Part{{{Addr: p, Size: uint64(len(want))}}}, client.DefaultReplicateConfig(),
		client.PutOptions{ZeroCopy: true}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	got := make([]byte, 4096)
	r := dummy(t, addr, "t").BatchGetInto([]string{"k"}, [][]client.Part{{{Addr: gpu.AddrOf(got), Size: 4096}}}, true)
	if r[0].Err != nil || !bytes.Equal(got[:r[0].Size], want) {
		t.Fatalf("read back %d bytes %q..., %v", r[0].Size, got[:min(r[0].Size, 16)], r[0].Err)
	}
}
