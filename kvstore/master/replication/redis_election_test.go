package replication

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/testutil"
)

// recordingNode is a Node that remembers what the election told it.
type recordingNode struct {
	mu      sync.Mutex
	leader  bool
	version uint64
	fence   *Fence
}

func (n *recordingNode) SetLeader(leader bool, version uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leader, n.version = leader, version
}

func (n *recordingNode) SetFence(f *Fence) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fence = f
}

func (n *recordingNode) state() (bool, uint64, *Fence) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leader, n.version, n.fence
}

// redisCandidate runs one master's Redis election until stop is called.
type redisCandidate struct {
	node *recordingNode
	addr string
	stop func()
}

func startRedisCandidate(t *testing.T, redisAddr, advertise string, lease int) *redisCandidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c := &redisCandidate{node: &recordingNode{}, addr: advertise}
	cfg := HAConfig{Redis: &redis.Options{Addr: redisAddr}, ClusterID: "redis{unit}", Advertise: advertise, LeaseTTL: lease}
	go func() {
		defer close(done)
		if err := RunElection(ctx, cfg, c.node, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			t.Errorf("RunElection: %v", err)
		}
	}()
	var once sync.Once
	c.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(c.stop)
	return c
}

// TestRedisElection runs two candidates on a real redis-server: one
// leads and publishes upstream's view (hash with leader_address,
// view_version, owner_token; the version from the counter), the other
// stands by; a leader that stops deletes the view and the standby takes
// over with the next version; a leader whose view is taken over steps
// down; GET /role's fence follows the ownership.
func TestRedisElection(t *testing.T) {
	addr := testutil.StartRedis(t)
	cli := redis.New(redis.Options{Addr: addr})
	defer cli.Close()
	ctx := context.Background()
	view := func() MasterView {
		v, _, err := ReadRedisMasterView(ctx, cli, "redis{unit}")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	key, counter := RedisMasterViewKeys("redis{unit}")
	if key != "mooncake-store/{redis_unit_}/master_view" || counter != "mooncake-store/{redis_unit_}/master_view_version" {
		t.Fatalf("keys %q %q", key, counter)
	}

	a := startRedisCandidate(t, addr, "10.0.0.1:50051", 2)
	testutil.WaitUntil(t, 5*time.Second, "a to lead", func() bool { l, _, _ := a.node.state(); return l })
	if v := view(); v.Leader != a.addr || v.Version != 1 {
		t.Fatalf("view %+v", v)
	}
	if r, err := cli.Do(ctx, "PTTL", key); err != nil || r.Int <= 0 || r.Int > 2000 {
		t.Fatalf("the view's expiry is %+v %v, want within the 2 s lease", r, err)
	}
	b := startRedisCandidate(t, addr, "10.0.0.2:50051", 2)
	// The leader renews: after three lease periods it still leads, and b
	// still stands by.
	time.Sleep(3 * time.Second)
	if l, _, _ := a.node.state(); !l {
		t.Fatal("a lost its leadership while renewing")
	}
	if l, _, _ := b.node.state(); l {
		t.Fatal("b leads beside a")
	}
	_, _, fa := a.node.state()
	if held, err := fa.Held(ctx); err != nil || !held {
		t.Fatalf("a's fence: %v %v", held, err)
	}

	a.stop()
	stopped := time.Now()
	testutil.WaitUntil(t, 3*time.Second, "b to lead after a stopped", func() bool { l, _, _ := b.node.state(); return l })
	t.Logf("b took over %v after a stopped and released the view", time.Since(stopped).Round(10*time.Millisecond))
	if _, v, _ := b.node.state(); v != 2 || view().Leader != b.addr {
		t.Fatalf("b leads version %d, view %+v", v, view())
	}
	if held, _ := fa.Held(ctx); held {
		t.Fatal("a's fence still holds after it stopped")
	}

	// Another owner overwrites the view: b's next renewal finds out.
	if _, err := cli.Do(ctx, "HSET", key, "owner_token", "someone-else"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitUntil(t, 3*time.Second, "b to step down", func() bool { l, _, _ := b.node.state(); return !l })
}

// TestRedisLeaderStepsDownWhenRedisStops pauses every Redis client
// (CLIENT PAUSE, which also holds back expiry): the leader's renewals
// time out and it stops serving once the lease counted from its last
// good renewal has run out, before a successor could serve.
func TestRedisLeaderStepsDownWhenRedisStops(t *testing.T) {
	addr := testutil.StartRedis(t)
	a := startRedisCandidate(t, addr, "10.0.0.1:50051", 1)
	testutil.WaitUntil(t, 5*time.Second, "a to lead", func() bool { l, _, _ := a.node.state(); return l })
	cli := redis.New(redis.Options{Addr: addr})
	defer cli.Close()
	paused := time.Now()
	if _, err := cli.Do(context.Background(), "CLIENT", "PAUSE", "4000", "ALL"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitUntil(t, 3*time.Second, "a to step down", func() bool { l, _, _ := a.node.state(); return !l })
	took := time.Since(paused)
	t.Logf("a stopped serving %v after Redis paused (lease 1 s)", took.Round(10*time.Millisecond))
	// Safety, not speed: the view expires one lease after a's last good
	// renewal (before the pause) and a successor serves one lease (the
	// grace) after that, so a must have stopped within two leases.
	if took >= 2*time.Second {
		t.Fatalf("a served %v into a 1 s lease that it could not renew", took)
	}
}

// TestRedisConfigCheck refuses the oplog on Redis, naming it as not
// implemented.
func TestRedisConfigCheck(t *testing.T) {
	err := HAConfig{Redis: &redis.Options{Addr: "h:1"}, Oplog: true}.Check()
	if err == nil || !strings.Contains(err.Error(), "not implemented") {
		t.Fatalf("oplog on Redis: %v", err)
	}
	if err := (HAConfig{Redis: &redis.Options{Addr: "h:1"}}).Check(); err != nil {
		t.Fatal(err)
	}
}
