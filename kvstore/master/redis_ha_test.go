package master

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// TestRoleOnRedis: a master elected on Redis says "leader" at GET /role
// while the master view's owner_token is its own; once another owner
// overwrites it, /role says "standby" at once (long before the leader's
// next renewal, 10 s away with a 30 s lease) and the master steps down.
// The oplog on Redis is refused when the service starts.
func TestRoleOnRedis(t *testing.T) {
	addr := testutil.StartRedis(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := func(oplog bool) ServiceConfig {
		return ServiceConfig{
			RPCAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0",
			Server: Options{Config: DefaultConfig()}, Logger: quiet,
			HA: &replication.HAConfig{Redis: &redis.Options{Addr: addr}, ClusterID: "role", LeaseTTL: 30, Oplog: oplog},
		}
	}
	if _, err := StartService(cfg(true)); err == nil || !strings.Contains(err.Error(), "not implemented") {
		t.Fatalf("the oplog on Redis: %v", err)
	}
	a, err := StartService(cfg(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	hc := &http.Client{Timeout: 10 * time.Second}
	role := func() string {
		t.Helper()
		resp, err := hc.Get("http://" + a.MetricsAddr() + "/role")
		if err != nil {
			t.Fatalf("GET /role: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	testutil.WaitUntil(t, 10*time.Second, "a to lead", func() bool { return role() == "leader" })
	cli := redis.New(redis.Options{Addr: addr})
	defer cli.Close()
	view, ok, err := replication.ReadRedisMasterView(context.Background(), cli, "role")
	if err != nil || !ok || view.Leader != a.RPCAddr() {
		t.Fatalf("master view %+v %v %v, want %s", view, ok, err, a.RPCAddr())
	}
	key, _ := replication.RedisMasterViewKeys("role")
	if _, err := cli.Do(context.Background(), "HSET", key, "owner_token", "another-master"); err != nil {
		t.Fatal(err)
	}
	if r := role(); r != "standby" {
		t.Fatalf("GET /role after the view changed hands: %q", r)
	}
	testutil.WaitUntil(t, 5*time.Second, "a to step down", func() bool { return !a.Server.IsLeader() })
}
