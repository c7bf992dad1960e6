package master

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// The RPC port serves gRPC and framed calls to one table, tenants
// included, and a client that breaks the framed protocol is disconnected
// without disturbing the others.
func TestServiceServesGRPCAndFramedOnOnePort(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MultiTenant = true
	svc, err := StartService(ServiceConfig{RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	svc.Server.WithState(func(st *State, _ time.Time) {
		if code := st.SetTenantQuota("t1", 0); code != kvstore.OK {
			t.Fatal(code)
		}
	})
	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	viaGRPC := masterpb.NewMasterClient(conn)
	fc, err := framedrpc.Dial(context.Background(), svc.RPCAddr(), framedrpc.Options{Metadata: map[string]string{kvstore.TenantMetadataKey: "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	viaFramed := masterpb.NewMasterClient(fc)

	c := ctx(t)
	if r, err := viaFramed.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("framed mount: %v %v", r, err)
	}
	start, err := viaFramed.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || start.ErrorCode != 0 {
		t.Fatalf("framed put start: %v %v", start, err)
	}
	if r, err := viaFramed.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("framed put end: %v %v", r, err)
	}

	// Break the protocol on another connection.
	bad, err := net.Dial("tcp", svc.RPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	bad.Write([]byte(framedrpc.Magic + "\x00\x00\x00\x00" + "\xff\xff\xff\xff\x01\x00\x00\x00"))
	bad.Read(make([]byte, 64))
	bad.Close()

	exists := func(cl masterpb.MasterClient, ctx context.Context) bool {
		t.Helper()
		r, err := cl.BatchExistKey(ctx, &masterpb.BatchKeyRequest{Keys: []string{"k"}})
		if err != nil || len(r.Items) != 1 || r.Items[0].ErrorCode != 0 {
			t.Fatalf("exist: %v %v", r, err)
		}
		return r.Items[0].Exists
	}
	if !exists(viaFramed, c) {
		t.Fatal("the framed client does not see its own object")
	}
	if !exists(viaGRPC, asTenant(c, "t1")) {
		t.Fatal("gRPC in the same tenant does not see the framed client's object")
	}
	if exists(viaGRPC, c) {
		t.Fatal("gRPC in the default tenant sees tenant t1's object")
	}
}
