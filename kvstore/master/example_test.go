package master_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/kvstore/master"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// Starting a master in-process, as a client's tests can: free loopback
// ports, the embedded HTTP metadata store, a short read lease.
func ExampleStartService() {
	cfg := master.DefaultConfig()
	cfg.DefaultLeaseTTL = 500 * time.Millisecond
	svc, err := master.StartService(master.ServiceConfig{
		RPCAddress:          "127.0.0.1:0",
		MetricsAddress:      "127.0.0.1:0",
		HTTPMetadataAddress: "127.0.0.1:0", // metadata_server = "http://" + svc.MetadataAddr() + "/metadata"
		Server:              master.Options{Config: cfg},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Close()

	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := masterpb.NewMasterClient(conn).Ping(ctx, &masterpb.PingRequest{ClientId: "client-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.GetClientStatus())
	// Output: CLIENT_NEED_REMOUNT
}
