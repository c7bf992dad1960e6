package client

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/kvstore/master"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// olderMaster is a master without BatchExistCodes, as one built before it.
type olderMaster struct{ *master.Server }

func (olderMaster) BatchExistCodes(context.Context, *masterpb.BatchKeyRequest) (*masterpb.ExistCodesResponse, error) {
	return nil, status.Error(grpccodes.Unimplemented, "unknown method BatchExistCodes")
}

// serveOlderMaster serves svc's state as olderMaster on a port of its own,
// framed and gRPC, and returns that port's address.
func serveOlderMaster(t *testing.T, svc *master.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := framedrpc.NewServer(nil)
	gs := grpc.NewServer()
	masterpb.RegisterMasterServer(fs, olderMaster{svc.Server})
	masterpb.RegisterMasterServer(gs, olderMaster{svc.Server})
	rest := fs.Split(ln)
	go gs.Serve(rest)
	t.Cleanup(func() { rest.Close(); gs.Stop(); fs.Close() })
	return ln.Addr().String()
}

// batch_is_exist answers the same from a master with the packed answer
// and, falling back to an item per key, from one without it, over both
// transports.
func TestBatchExistWithAndWithoutPackedCodes(t *testing.T) {
	for _, rpc := range []string{"framed", "grpc"} {
		t.Run(rpc, func(t *testing.T) {
			t.Setenv("MC_STORE_MASTER_RPC", rpc)
			svc, err := master.StartService(master.ServiceConfig{
				RPCAddress:          "127.0.0.1:0",
				HTTPMetadataAddress: "127.0.0.1:0",
				Server:              master.Options{Config: master.DefaultConfig()},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Close)
			meta := "http://" + svc.MetadataAddr() + "/metadata"
			older := serveOlderMaster(t, svc)
			storage := newClient(t, svc.RPCAddr(), meta, 16<<20, 16<<20)
			if err := storage.Put("here", part(fillPattern(buf(t, 64), 1)), DefaultReplicateConfig(), PutOptions{}); err != nil {
				t.Fatal(err)
			}
			keys := []string{"here", "absent", "here"}
			for name, addr := range map[string]string{"packed": svc.RPCAddr(), "older": older} {
				c := newClient(t, addr, meta, 0, 16<<20)
				for range 2 { // the second call goes straight to the fallback
					if got := c.BatchExist(keys); len(got) != 3 || got[0] != 1 || got[1] != 0 || got[2] != 1 {
						t.Fatalf("%s master: BatchExist = %v; want [1 0 1]", name, got)
					}
				}
				if c.master.noExistCodes.Load() != (name == "older") {
					t.Fatalf("%s master: fallback flag %v", name, c.master.noExistCodes.Load())
				}
			}
		})
	}
}
