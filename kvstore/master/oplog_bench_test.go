package master

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkOplogPut measures 4 KiB puts (put start + put end) through
// the master's gRPC service from 1, 4 and 16 concurrent clients, with the
// operation log off and on at pipeline depths 1, 2 and 4 (a leader on an
// etcd of its own, data on the local disk): how much durability costs on the master alone, without
// the Python client or data transfer. It reports puts/s and, with the
// log, how many entries one etcd transaction carried on average (group
// commit). Run: go test -run XXX -bench BenchmarkOplogPut ./kvstore/master/
func BenchmarkOplogPut(b *testing.B) {
	for _, depth := range []int{0, 1, 2, 4, 8, 16} { // 0: no log
		for _, clients := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("depth=%d/clients=%d", depth, clients), func(b *testing.B) {
				benchmarkPuts(b, depth, clients)
			})
		}
	}
}

// benchmarkPuts runs b.N puts from clients goroutines, each on a
// connection of its own, against a master with the log off (depth 0) or
// on with that --oplog_pipeline_depth.
func benchmarkPuts(b *testing.B, depth, clients int) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	sc := ServiceConfig{Server: Options{Config: cfg}, Logger: quiet}
	const cluster = "bench"
	var cli *clientv3.Client
	var svc *Service
	if depth > 0 {
		ep := testutil.StartEtcd(b)
		cli = testutil.EtcdClient(b, ep)
		sc.HA = &replication.HAConfig{Endpoints: []string{ep}, ClusterID: cluster, OplogPipelineDepth: depth}
		svc = startOplogService(b, sc)
		testutil.WaitUntil(b, 20*time.Second, "the leader", svc.Server.IsLeader)
	} else {
		sc.RPCAddress = "127.0.0.1:0"
		var err error
		if svc, err = StartService(sc); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(svc.Close)
	}
	ctx := context.Background()
	mc := dialMaster(b, svc)
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 8 << 30, TeEndpoint: "seg0"}
	if r, err := mc.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.ErrorCode != 0 {
		b.Fatalf("remount: %v %v", r, err)
	}
	conns := make([]masterpb.MasterClient, clients)
	for i := range conns {
		conns[i] = dialMaster(b, svc)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(mc masterpb.MasterClient) {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				key := fmt.Sprintf("key%09d", i)
				r, err := mc.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 4096,
					Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
				if err == nil && r.ErrorCode == 0 {
					var e *masterpb.StatusResponse
					if e, err = mc.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key}); err == nil && e.ErrorCode != 0 {
						err = fmt.Errorf("put end %s: code %d", key, e.ErrorCode)
					}
				} else if err == nil {
					err = fmt.Errorf("put start %s: code %d", key, r.ErrorCode)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(conns[c])
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "puts/s")
	if cli != nil {
		resp, err := cli.Get(ctx, replication.OplogPrefix(cluster), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(2*b.N)/float64(max(resp.Count, 1)), "entries/batch")
	}
}
