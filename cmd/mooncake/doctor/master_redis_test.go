package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// The doctor finds an HA master on Redis through its master view: none
// elected is NO_MASTER_ELECTED; a view names the leader and its version.
func TestResolveRedisLeader(t *testing.T) {
	addr := testutil.StartRedis(t)
	ctx := context.Background()
	cfg := Config{Timeout: 2 * time.Second}
	leader, r := resolveRedisLeader(ctx, cfg, "redis://"+addr, "docs")
	if leader != "" || r.Status != Failure || r.Problem != troubleshoot.NoMasterElected.ID {
		t.Fatalf("no view: %q %+v", leader, r)
	}
	cli := redis.New(redis.Options{Addr: addr})
	defer cli.Close()
	key, _ := replication.RedisMasterViewKeys("docs")
	if _, err := cli.Do(ctx, "HSET", key, "leader_address", "10.0.0.1:50051", "view_version", "3", "owner_token", "t"); err != nil {
		t.Fatal(err)
	}
	leader, r = resolveRedisLeader(ctx, cfg, "redis://"+addr, "docs")
	if leader != "10.0.0.1:50051" || r.Status != OK || !strings.Contains(r.Message, "view version 3") {
		t.Fatalf("view: %q %+v", leader, r)
	}
	if _, r := resolveRedisLeader(ctx, cfg, "redis://h1:1,h2:2", "docs"); r.Status != Failure {
		t.Fatalf("a list of servers: %+v", r)
	}
}
