package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// TestHAFailover runs two masters against a real etcd: one is elected and
// serves, the other refuses RPCs with Unavailable; when the leader is
// killed (no lease revocation), the standby takes over once the 5 s lease
// has expired, and the master view key names it.
func TestHAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("HA fail-over takes ~10 s")
	}
	etcd := testutil.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := replication.MasterViewKey("ha_test")

	ports := testutil.FreePorts(t, 4)
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}
	procs := make([]*proc, 2)
	for i := range procs {
		procs[i] = startMaster(t, "--enable_ha", "--etcd_endpoints", etcd, "--cluster_id=ha_test",
			"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", ports[i]),
			"--metrics_host=127.0.0.1", fmt.Sprintf("--metrics_port=%d", ports[2+i]))
	}

	viewValue := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	// waitLeader waits until the view names one of addrs and that master
	// serves; it returns the leader's index.
	waitLeader := func(candidates ...int) int {
		t.Helper()
		deadline := time.Now().Add(25 * time.Second)
		for time.Now().Before(deadline) {
			v := viewValue()
			for _, i := range candidates {
				if v == addrs[i] && ping(addrs[i]) == codes.OK {
					return i
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("no serving leader among %v; view=%q", candidates, viewValue())
		return -1
	}
	leader := waitLeader(0, 1)
	standby := 1 - leader
	if c := ping(addrs[standby]); c != codes.Unavailable {
		t.Fatalf("standby answered Ping with %v, want Unavailable", c)
	}

	killed := time.Now()
	if err := procs[leader].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-procs[leader].exited
	if got := waitLeader(standby); got != standby {
		t.Fatalf("leader %d", got)
	}
	t.Logf("standby took over %v after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
	if v := viewValue(); v != addrs[standby] {
		t.Fatalf("master view = %q, want %q", v, addrs[standby])
	}
}
