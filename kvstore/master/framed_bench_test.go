package master

import (
	"context"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// BenchmarkFramedBatchExist measures one client's batch_is_exist calls
// over the framed transport to an in-process master (go test -bench), with
// an item per key (BatchExistKey) and packed codes (BatchExistCodes).
func BenchmarkFramedBatchExist(b *testing.B) {
	calls := map[string]func(masterpb.MasterClient, *masterpb.BatchKeyRequest) error{
		"items": func(rpc masterpb.MasterClient, req *masterpb.BatchKeyRequest) error {
			_, err := rpc.BatchExistKey(context.Background(), req)
			return err
		},
		"codes": func(rpc masterpb.MasterClient, req *masterpb.BatchKeyRequest) error {
			_, err := rpc.BatchExistCodes(context.Background(), req)
			return err
		},
	}
	for _, name := range []string{"items", "codes"} {
		for _, n := range []int{1, 128} {
			b.Run(fmt.Sprintf("%s/keys=%d", name, n), func(b *testing.B) { benchBatchExist(b, n, calls[name]) })
		}
	}
}

func benchBatchExist(b *testing.B, n int, call func(masterpb.MasterClient, *masterpb.BatchKeyRequest) error) {
	svc, err := StartService(ServiceConfig{RPCAddress: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	c, err := framedrpc.Dial(context.Background(), svc.RPCAddr(), framedrpc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rpc := masterpb.NewMasterClient(c)
	req := &masterpb.BatchKeyRequest{}
	for i := range n {
		req.Keys = append(req.Keys, fmt.Sprintf("pre-4K-%d", i))
	}
	b.ResetTimer()
	for range b.N {
		if err := call(rpc, req); err != nil {
			b.Fatal(err)
		}
	}
}
