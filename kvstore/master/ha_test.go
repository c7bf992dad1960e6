package master

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

func TestParseEndpointsAndKey(t *testing.T) {
	got := replication.ParseEndpoints("etcd://h1:2379;h2:2379, h3:2379")
	if len(got) != 3 || got[0] != "h1:2379" || got[2] != "h3:2379" {
		t.Fatalf("replication.ParseEndpoints = %q", got)
	}
	if replication.MasterViewKey("") != "mooncake-store/mooncake_cluster/master_view" || replication.MasterViewKey("x") != "mooncake-store/x/master_view" {
		t.Fatal("replication.MasterViewKey")
	}
}

// TestServiceHAGracefulHandover runs two in-process masters against a
// real etcd: the first to start leads; closing it revokes its lease, so
// the standby takes over at once (no grace configured here) with empty
// metadata, and the master view key holds its address.
func TestServiceHAGracefulHandover(t *testing.T) {
	etcd := testutil.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *Service {
		svc, err := StartService(ServiceConfig{
			RPCAddress: "127.0.0.1:0", Server: Options{Config: DefaultConfig()}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{etcd}, ClusterID: "unit"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Close)
		return svc
	}
	view := func() string {
		resp, err := cli.Get(context.Background(), replication.MasterViewKey("unit"))
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (view %q)", what, view())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	a := start()
	waitFor("a to lead", func() bool { return a.Server.IsLeader() && view() == a.RPCAddr() })
	b := start()
	conn, err := grpc.NewClient(b.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cb := masterpb.NewMasterClient(conn)
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cb.Ping(c, &masterpb.PingRequest{ClientId: "x"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("standby Ping: %v", err)
	}
	a.Close()
	waitFor("b to lead", func() bool { return b.Server.IsLeader() && view() == b.RPCAddr() })
	p, err := cb.Ping(c, &masterpb.PingRequest{ClientId: "x"})
	if err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_NEED_REMOUNT || p.ViewVersion == 0 {
		t.Fatalf("new leader Ping: %v %v", p, err)
	}
}
