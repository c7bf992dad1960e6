package client

import (
	"fmt"
	"os"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
)

// Latency of the pieces of a small get (go test -bench Latency): one
// master RPC, one Transfer Engine read, and the whole get.
func BenchmarkLatency(b *testing.B) {
	rpc, meta := startMaster(b, nil)
	storage := newClient(b, rpc, meta, 64<<20, 4<<20)
	reader := newClient(b, rpc, meta, 0, 4<<20)
	src := buf(b, 4096)
	if err := reader.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		b.Fatal(err)
	}
	dst := buf(b, 4096)
	b.Run("rpc", func(b *testing.B) {
		for range b.N {
			reader.Size("missing")
		}
	})
	lists, _ := reader.replicaLists([]string{"k"})
	r := lists[0].Replicas[0]
	_ = storage
	if err := reader.RegisterBuffer(gpu.AddrOf(dst), 4096); err != nil {
		b.Fatal(err)
	}
	b.Run("transfer", func(b *testing.B) {
		for range b.N {
			reader.engine.TransferSync(r.TransportEndpoint, []transfer.Request{{Opcode: transfer.OpRead, Source: gpu.AddrOf(dst), TargetOffset: r.BufferAddress, Length: 4096}})
		}
	})
	b.Run("get_into", func(b *testing.B) {
		for range b.N {
			reader.GetInto("k", part(dst), true)
		}
	})
	b.Run("get_staged", func(b *testing.B) {
		for range b.N {
			reader.GetInto("k", part(dst), false)
		}
	})
	b.Run("put", func(b *testing.B) {
		for i := range b.N {
			reader.Put(fmt.Sprint("p", i), part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: true})
		}
	})
	_ = pb.ReplicaStatus_REPLICA_COMPLETE
}

// BenchmarkRemoteRPC measures one master RPC against an external master
// (MC_BENCH_MASTER=host:port, MC_BENCH_METADATA=url); skipped without.
func BenchmarkRemoteRPC(b *testing.B) {
	addr, meta := os.Getenv("MC_BENCH_MASTER"), os.Getenv("MC_BENCH_METADATA")
	if addr == "" {
		b.Skip("MC_BENCH_MASTER not set")
	}
	c := newClient(b, addr, meta, 0, 4<<20)
	b.ResetTimer()
	for range b.N {
		c.Size("missing")
	}
}

// BenchmarkRemoteGet measures a 4 KiB get, and its transfer alone, from a
// pure client against an external master whose pool is another process
// (MC_BENCH_MASTER, MC_BENCH_METADATA); skipped without.
func BenchmarkRemoteGet(b *testing.B) {
	addr, meta := os.Getenv("MC_BENCH_MASTER"), os.Getenv("MC_BENCH_METADATA")
	if addr == "" {
		b.Skip("MC_BENCH_MASTER not set")
	}
	c := newClient(b, addr, meta, 0, 4<<20)
	src, dst := buf(b, 4096), buf(b, 4096)
	key := fmt.Sprint("bench-remote-get-", os.Getpid())
	if err := c.Put(key, part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: true}); err != nil {
		b.Fatal(err)
	}
	if err := c.RegisterBuffer(gpu.AddrOf(dst), 4096); err != nil {
		b.Fatal(err)
	}
	lists, _ := c.replicaLists([]string{key})
	r := lists[0].Replicas[0]
	b.Run("transfer", func(b *testing.B) {
		for range b.N {
			if err := c.engine.TransferSync(r.TransportEndpoint, []transfer.Request{{Opcode: transfer.OpRead, Source: gpu.AddrOf(dst), TargetOffset: r.BufferAddress, Length: 4096}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get_into", func(b *testing.B) {
		for range b.N {
			c.GetInto(key, part(dst), true)
		}
	})
	b.Run("put", func(b *testing.B) {
		for i := range b.N {
			c.Put(fmt.Sprint(key, "-", i), part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: true})
		}
	})
}
