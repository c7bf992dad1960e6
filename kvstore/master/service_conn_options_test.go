package master

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// noDelay reads TCP_NODELAY of a connection's socket.
func noDelay(t *testing.T, c net.Conn) bool {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v != 0
}

// TestNagleListenerTurnsNoDelayOff: Go accepts connections with
// TCP_NODELAY set; behind nagleListener (RPCNagle) they have it off.
func TestNagleListenerTurnsNoDelayOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		l    net.Listener
		want bool
	}{{ln, true}, {nagleListener{ln}, false}} {
		d, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := tc.l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got := noDelay(t, c); got != tc.want {
			t.Errorf("%T: TCP_NODELAY = %v, want %v", tc.l, got, tc.want)
		}
		c.Close()
		d.Close()
	}
}

// TestServiceClosesIdleRPCConnections: with RPCIdleTimeout, an idle gRPC
// connection is sent away and an idle framed one closed; both clients'
// next calls work.
func TestServiceClosesIdleRPCConnections(t *testing.T) {
	svc, err := StartService(ServiceConfig{RPCAddress: "127.0.0.1:0", RPCIdleTimeout: 200 * time.Millisecond, RPCNagle: true,
		Server: Options{Config: DefaultConfig()}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fc, err := framedrpc.Dial(context.Background(), svc.RPCAddr(), framedrpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	exist := func(cc grpc.ClientConnInterface, what string) {
		t.Helper()
		if r, err := masterpb.NewMasterClient(cc).ExistKey(ctx(t), &masterpb.KeyRequest{Key: "k"}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("%s ExistKey: %v %v", what, r, err)
		}
	}
	exist(conn, "gRPC")
	exist(fc, "framed")
	deadline := time.Now().Add(10 * time.Second)
	for conn.GetState() != connectivity.Idle {
		if time.Now().After(deadline) {
			t.Fatalf("the idle gRPC connection is still %v", conn.GetState())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if svc.framed.IdleTimeout != 200*time.Millisecond {
		t.Fatalf("framed idle timeout %v", svc.framed.IdleTimeout)
	}
	exist(conn, "gRPC after the idle close")
	exist(fc, "framed after the idle close")
}
