package main

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// haPair is two HA masters on one backend, and how to read the address
// the backend's master view names.
type haPair struct {
	procs []*proc
	addrs []string
	view  func() string
}

// startHAPair starts two masters with flags (the backend's) on free
// loopback ports.
func startHAPair(t *testing.T, view func() string, flags ...string) *haPair {
	ports := testutil.FreePorts(t, 4)
	p := &haPair{addrs: []string{fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])}, view: view}
	for i := range 2 {
		p.procs = append(p.procs, startMaster(t, append([]string{"--enable_ha",
			"--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", ports[i]),
			"--metrics_host=127.0.0.1", fmt.Sprintf("--metrics_port=%d", ports[2+i])}, flags...)...))
	}
	return p
}

// waitLeader waits until the view names one of candidates and that
// master serves; it returns the leader's index.
func (p *haPair) waitLeader(t *testing.T, candidates ...int) int {
	t.Helper()
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) {
		v := p.view()
		for _, i := range candidates {
			if v == p.addrs[i] && ping(p.addrs[i]) == codes.OK {
				return i
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no serving leader among %v; view=%q", candidates, p.view())
	return -1
}

// failover waits for a leader, checks that the standby refuses, kills
// the leader with SIGKILL (no lease released) and waits until the
// standby serves and the view names it. It returns the standby's index
// and how long the takeover took.
func (p *haPair) failover(t *testing.T) (int, time.Duration) {
	t.Helper()
	leader := p.waitLeader(t, 0, 1)
	standby := 1 - leader
	if c := ping(p.addrs[standby]); c != codes.Unavailable {
		t.Fatalf("standby answered Ping with %v, want Unavailable", c)
	}
	killed := time.Now()
	if err := p.procs[leader].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.procs[leader].exited
	if got := p.waitLeader(t, standby); got != standby {
		t.Fatalf("leader %d", got)
	}
	took := time.Since(killed)
	if v := p.view(); v != p.addrs[standby] {
		t.Fatalf("master view = %q, want %q", v, p.addrs[standby])
	}
	return standby, took
}

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
	view := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	p := startHAPair(t, view, "--etcd_endpoints", etcd, "--cluster_id=ha_test")
	_, took := p.failover(t)
	t.Logf("standby took over %v after the leader was killed", took.Round(100*time.Millisecond))
}

// TestHAFailoverRedis is TestHAFailover on Redis (--ha_backend_type=redis,
// a 2 s lease), with a store client that follows the leader through
// master_server_addr="redis://..." and keeps its Transfer Engine metadata
// in the same Redis: after the leader is killed, the client's puts and
// gets work again on the new leader (which starts empty, so the client
// remounts its segment first).
func TestHAFailoverRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("HA fail-over takes ~5 s")
	}
	addr := testutil.StartRedis(t)
	rcli := redis.New(redis.Options{Addr: addr})
	defer rcli.Close()
	view := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		v, _, _ := replication.ReadRedisMasterView(ctx, rcli, "ha_redis")
		return v.Leader
	}
	p := startHAPair(t, view, "--ha_backend_type=redis", "--ha_backend_connstring=redis://"+addr,
		"--cluster_id=ha_redis", "--master_view_lease_ttl_sec=2")
	p.waitLeader(t, 0, 1)

	t.Setenv("MC_STORE_CLUSTER_ID", "ha_redis")
	c, err := client.New(client.Config{LocalHostname: "127.0.0.1", MetadataServer: "redis://" + addr,
		GlobalSegmentSize: 16 << 20, LocalBufferSize: 4 << 20, MasterServerAddr: "redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	putGet := func(key string) error {
		src := mmapped(t, 4096)
		for i := range src {
			src[i] = byte(i) ^ key[0]
		}
		if err := c.Put(key, parts(src), client.DefaultReplicateConfig(), client.PutOptions{}); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		dst := mmapped(t, 4096)
		if r := c.GetInto(key, parts(dst), false); r.Err != nil || !bytes.Equal(src, dst) {
			return fmt.Errorf("get %s: %v (equal %v)", key, r.Err, bytes.Equal(src, dst))
		}
		return nil
	}
	if err := putGet("before"); err != nil {
		t.Fatal(err)
	}

	_, took := p.failover(t)
	t.Logf("standby took over %v after the leader was killed (2 s lease)", took.Round(100*time.Millisecond))
	start := time.Now()
	for {
		err := putGet("after")
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the client does not work on the new leader: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the client put and got through the new leader %v after it took over", time.Since(start).Round(100*time.Millisecond))
}

// mmapped returns n bytes of mmap'd memory (not Go heap: the engine
// moves bytes in and out of it over the network).
func mmapped(t *testing.T, n int) []byte {
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func parts(b []byte) []client.Part { return []client.Part{{Addr: gpu.AddrOf(b), Size: uint64(len(b))}} }
