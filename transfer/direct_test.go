package transfer

import (
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/handshake"
	"github.com/mooncake-go/mooncake/transfer/tcp"
)

// silentPeer is a P2P segment whose data port reads one request of n
// bytes, closes got, and never answers. It returns the segment's name.
func silentPeer(t *testing.T, n int, got chan<- struct{}) string {
	t.Helper()
	data, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	go func() {
		c, err := data.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, n)); err == nil {
			close(got)
		}
		io.Copy(io.Discard, c)
	}()
	rpc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	name := rpc.Addr().String()
	desc := func() ([]byte, error) {
		return json.Marshal(SegmentDesc{Name: name, Protocol: "tcp", TCPDataPort: data.Addr().(*net.TCPAddr).Port,
			TCPProtoVersion: tcp.ProtoVersion, Buffers: []BufferDesc{{Name: "cpu@0", Addr: 1 << 20, Length: 1 << 20}}})
	}
	srv := handshake.NewServer(rpc, 1<<20, desc, func(Notify) {})
	go srv.Serve()
	t.Cleanup(srv.Close)
	return name
}

// A synchronous TCP transfer waiting for a peer that never answers (on the
// caller's thread) ends FAILED when the engine closes, not TIMEOUT at its
// deadline: Close cuts it instead of waiting for it.
func TestCloseEndsASyncTransferWaitingForItsPeer(t *testing.T) {
	got := make(chan struct{})
	peer := silentPeer(t, 24+4096, got)
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: true, TransferTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	local := anonMemory(t, 4096)
	if err := e.RegisterLocalMemory(gpu.AddrOf(local), 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.TransferSync(peer, []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: 1 << 20, Length: 4096}})
	}()
	<-got // the request is on the wire; the reply will never come
	e.Close()
	if err := <-done; CodeOf(err) != CodeSocket {
		t.Fatalf("TransferSync cut by Close: %v (code %d), want a failure (%d), not a timeout", err, CodeOf(err), CodeSocket)
	}
}
