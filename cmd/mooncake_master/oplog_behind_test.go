package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// TestBinaryStandbyBehindCompactionTakesOver is issue 44's fault on real
// processes: a standby is stopped (SIGSTOP) and cut off from etcd while
// the leader, taking a snapshot every 2 s and keeping 2, compacts the log
// past everything the standby applied (and etcd compacts its history).
// Resumed, the standby starts again from the newest snapshot; after a
// kill -9 of the leader it takes over and serves every object.
func TestBinaryStandbyBehindCompactionTakesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("a fail-over after snapshots takes ~20 s")
	}
	etcd := testutil.StartEtcd(t)
	part := testutil.StartPartition(t, etcd)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", t.TempDir())
	const cluster = "behind"
	ports := testutil.FreePorts(t, 4)
	rpc := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	admin := []string{fmt.Sprintf("http://127.0.0.1:%d", ports[2]), fmt.Sprintf("http://127.0.0.1:%d", ports[3])}
	start := func(i int, etcdURL string) *proc {
		return startMaster(t, "--enable_ha", "--enable_oplog", "--etcd_endpoints", etcdURL, "--cluster_id="+cluster,
			"--enable_snapshot", "--snapshot_interval_seconds=2", "--snapshot_retention_count=2", "--enable_snapshot_restore",
			"--client_ttl=3600", "--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", ports[i]),
			"--metrics_host=127.0.0.1", fmt.Sprintf("--metrics_port=%d", ports[2+i]))
	}
	get := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	leader := start(0, etcd)
	waitHTTP(t, leader, admin[0]+"/health")
	testutil.WaitUntil(t, 20*time.Second, "the first master to lead", func() bool { return get(admin[0]+"/role") == "leader" })
	standby := start(1, part.URL())
	waitHTTP(t, standby, admin[1]+"/health")
	testutil.WaitUntil(t, 20*time.Second, "the second master to stand by", func() bool { return get(admin[1]+"/role") == "standby" })

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dial := func(addr string) masterpb.MasterClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return masterpb.NewMasterClient(conn)
	}
	c := dial(rpc[0])
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 24, TeEndpoint: "seg0"}
	if r, err := c.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	keys := 0
	put := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			key := fmt.Sprintf("obj%04d", keys)
			r, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 4096,
				Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
			if err != nil || r.GetErrorCode() != 0 {
				t.Fatalf("put start %s: %v %v", key, r, err)
			}
			if e, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key}); err != nil || e.GetErrorCode() != 0 {
				t.Fatalf("put end %s: %v %v", key, e, err)
			}
			keys++
		}
	}
	put(100)

	prefix := replication.OplogPrefix(cluster)
	batchAt := func(opts ...clientv3.OpOption) (uint64, int64) {
		t.Helper()
		resp, err := cli.Get(ctx, prefix, append(opts, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())...)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("oplog: %v %v", resp, err)
		}
		var seq uint64
		if _, err := fmt.Sscanf(strings.TrimPrefix(string(resp.Kvs[0].Key), prefix), "%d", &seq); err != nil {
			t.Fatalf("batch key %s: %v", resp.Kvs[0].Key, err)
		}
		return seq, resp.Header.Revision
	}
	if err := standby.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	part.Cut()
	// The standby applied at most the last batch there is now.
	last, _ := batchAt(clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	// Keep writing until compaction has deleted the batch after it.
	for {
		put(20)
		if first, rev := batchAt(); first > last+1 {
			if _, err := cli.Compact(ctx, rev); err != nil {
				t.Fatal(err)
			}
			t.Logf("the log starts at batch %d; the standby applied at most %d", first, last)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the log was never compacted past the stopped standby")
		case <-time.After(200 * time.Millisecond):
		}
	}
	part.Heal()
	if err := standby.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-leader.exited
	testutil.WaitUntil(t, 30*time.Second, "the standby to take over", func() bool { return get(admin[1]+"/role") == "leader" })
	c = dial(rpc[1])
	for i := 0; i < keys; i++ {
		key := fmt.Sprintf("obj%04d", i)
		r, err := c.GetReplicaList(ctx, &masterpb.KeyRequest{Key: key})
		if err != nil || r.GetErrorCode() != 0 || len(r.Replicas) != 1 {
			t.Fatalf("%s on the new leader: %v %v", key, r, err)
		}
	}
	if m := get(admin[1] + "/metrics"); !strings.Contains(m, "master_oplog_snapshot_resets_total ") ||
		strings.Contains(m, "master_oplog_snapshot_resets_total 0\n") {
		t.Fatal("the new leader never started again from a snapshot: it did not fall behind")
	}
	t.Logf("%d objects served by the new leader", keys)
}
