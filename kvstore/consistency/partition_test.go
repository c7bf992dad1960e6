package consistency

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// The partition nemeses cut one process off from one service on loopback:
// the cluster puts a forwarder (testutil.Partition) on each master's way to
// etcd and, with setup.partitionable, on each client's way to the master.
// A cut closes the connections through the forwarder and holds new ones
// unanswered until it heals, as a partition between two hosts would.

// partitionSetup is the cluster of the client partitions: clients reach
// the leader through forwarders, and a client silent for 2 s is suspect
// (its segments take no new replicas) but forgotten only after 60 s.
var partitionSetup = setup{masterFlags: []string{"--client_ttl=2", "--client_dead_ttl=60"}, partitionable: true}

// readMostly is the workload of the storage partitions: one write in
// sixteen operations, so that objects stay where they were placed for
// seconds. Under fullWorkload every key is written many times a second:
// once its segment is suspect, new writes empty it before the partition
// could cost it anything, and a storage client forgotten in a partition
// (--client_dead_ttl as short as --client_ttl) went unseen in the
// history; under this one it shows as gets of acknowledged keys answering
// -704.
var readMostly = workload{workers: 3, env: []string{envOps + "=put,upsert,get,get,get,get,get,get,get,get,get,get,get,get,batch_get,exist"}}

// partitionLeaderEtcd cuts the elected master off from etcd (its election
// lease, its oplog appends and its watches) until a standby has taken
// over, which takes the 5 s lease, and for a second after; then it heals.
// The clients reach etcd and follow the leader through it; the deposed
// leader, still serving them until it notices, must answer nothing that
// contradicts the new leader.
func partitionLeaderEtcd(c *cluster, _ *rand.Rand) string {
	l := c.waitLeader(-1)
	start := time.Now()
	conns := c.etcdParts[l].Cut()
	n := c.waitLeader(l)
	took := time.Since(start)
	time.Sleep(time.Second)
	c.etcdParts[l].Heal()
	return fmt.Sprintf("cut master%d (leader) from etcd (%d connections); master%d took over after %.1f s; healed 1 s later",
		l, conns, n, took.Seconds())
}

// partitionStorage cuts a storage client off from the master (its
// connections to the transfer engines of the other clients stay) until
// the master counts its segment suspect (silent past --client_ttl), and
// for a second after; then it heals and waits until the client is heard
// from again. Its objects must stay readable throughout.
func partitionStorage(c *cluster, rng *rand.Rand) string {
	i := rng.IntN(len(c.storageParts))
	start := time.Now()
	conns := c.storageParts[i].Cut()
	suspect := waitSuspectSegments(c, func(n int) bool { return n >= 1 })
	time.Sleep(time.Second)
	c.storageParts[i].Heal()
	healed := time.Now()
	waitSuspectSegments(c, func(n int) bool { return n == 0 })
	return fmt.Sprintf("cut storage%d from the master (%d connections); suspect after %.1f s; healed 1 s later; heard from %.1f s after",
		i, conns, suspect.Sub(start).Seconds(), time.Since(healed).Seconds())
}

// waitSuspectSegments waits until the leader's count of suspect segments
// satisfies ok and returns when it did; 30 s without fails the test.
func waitSuspectSegments(c *cluster, ok func(int) bool) time.Time {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n := c.suspectSegments(); n >= 0 && ok(n) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("suspect segments: %d for 30 s", c.suspectSegments())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionWorker cuts a worker off from the master for 3 s: its calls
// fail or wait (writes that failed stay open), the others go on.
func partitionWorker(c *cluster, rng *rand.Rand) string {
	i := rng.IntN(len(c.workerParts))
	conns := c.workerParts[i].Cut()
	time.Sleep(3 * time.Second)
	c.workerParts[i].Heal()
	return fmt.Sprintf("cut worker%d from the master for 3 s (%d connections)", i+1, conns)
}

// killLeaderPartitionStorage is killLeader, then partitionStorage against
// the new leader.
func killLeaderPartitionStorage(c *cluster, rng *rand.Rand) string {
	return killLeader(c, rng) + "; " + partitionStorage(c, rng)
}

func TestConsistencyPartitionLeaderEtcd(t *testing.T) {
	checkUnder(t, "part-leader-etcd", partitionLeaderEtcd, fullWorkload, setup{})
}

func TestConsistencyPartitionStorage(t *testing.T) {
	checkUnder(t, "part-storage", partitionStorage, readMostly, partitionSetup)
}

func TestConsistencyPartitionWorker(t *testing.T) {
	checkUnder(t, "part-worker", partitionWorker, fullWorkload, partitionSetup)
}

// TestConsistencyKillLeaderPartitionStorage runs only in the long runs
// (scripts/faults.sh): each round is a failover and a storage partition.
func TestConsistencyKillLeaderPartitionStorage(t *testing.T) {
	if os.Getenv(longEnv) == "" {
		t.Skipf("a long run only (%s)", longEnv)
	}
	checkUnder(t, "kill-leader+part-storage", killLeaderPartitionStorage, readMostly, partitionSetup)
}
