package master

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// behindCompaction is a leader and a standby that reaches etcd through a
// partition: the tests cut the standby off while the leader writes and
// compacts the log twice, and heal it.
type behindCompaction struct {
	t       *testing.T
	ctx     context.Context
	cli     *clientv3.Client
	cluster string
	leader  *Service
	standby *Service
	part    *testutil.Partition
	client  masterpb.MasterClient
	next    int // keys k000.. put so far
}

// startBehindCompaction starts the leader (snapshots in dir, taken by
// the test) and a standby with snapshot configuration standbySnap and
// logger standbyLog, mounts a segment and puts 20 objects.
func startBehindCompaction(t *testing.T, cluster, dir string, standbySnap *replication.SnapshotConfig, standbyLog *slog.Logger) *behindCompaction {
	ep := testutil.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	h := &behindCompaction{t: t, ctx: ctx, cli: testutil.EtcdClient(t, ep), cluster: cluster, part: testutil.StartPartition(t, ep)}
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour // the storage client never pings
	start := func(endpoint string, snap *replication.SnapshotConfig, log *slog.Logger) *Service {
		svc, err := StartService(ServiceConfig{
			RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg}, Logger: log,
			HA: &replication.HAConfig{Endpoints: []string{endpoint}, ClusterID: cluster, Oplog: true,
				OplogPollInterval: 200 * time.Millisecond, Snapshot: snap},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Close)
		return svc
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h.leader = start(ep, &replication.SnapshotConfig{Enable: true, Interval: time.Hour, Retention: 2, Restore: true, Dir: dir}, quiet)
	testutil.WaitUntil(t, 20*time.Second, "the leader to lead", h.leader.Server.IsLeader)
	h.standby = start(h.part.URL(), standbySnap, standbyLog)
	h.client = dialMaster(t, h.leader)
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 22, TeEndpoint: "seg0"}
	if r, err := h.client.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	h.put(20)
	h.waitSame()
	return h
}

func dialMaster(t testing.TB, svc *Service) masterpb.MasterClient {
	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return masterpb.NewMasterClient(conn)
}

// put writes n more objects through the leader.
func (h *behindCompaction) put(n int) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%03d", h.next)
		h.next++
		r, err := h.client.PutStart(h.ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 100,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil || r.GetErrorCode() != 0 {
			h.t.Fatalf("put start %s: %v %v", key, r, err)
		}
		e, err := h.client.PutEnd(h.ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		if err != nil || e.GetErrorCode() != 0 {
			h.t.Fatalf("put end %s: %v %v", key, e, err)
		}
	}
}

// waitSame waits until the standby has applied the leader's log and
// holds its state.
func (h *behindCompaction) waitSame() {
	h.t.Helper()
	a, b := h.leader.Server, h.standby.Server
	testutil.WaitUntil(h.t, 30*time.Second, "the standby to hold the leader's state", func() bool {
		return b.rep.log.AppliedSeq() == a.rep.log.AppliedSeq() && reflect.DeepEqual(dumpState(a), dumpState(b))
	})
}

// fallBehind cuts the standby off from etcd while the leader writes,
// snapshots twice (with retention 2 the second deletes the batches the
// standby has not applied) and writes more, then has etcd compact its
// history (as --auto-compaction-retention does), so that the standby
// cannot resume its watch where it left off, and heals the partition.
func (h *behindCompaction) fallBehind() {
	h.t.Helper()
	before := h.standby.Server.rep.log.AppliedSeq()
	h.part.Cut()
	prefix := replication.OplogPrefix(h.cluster)
	for i := 0; i < 2; i++ {
		h.put(20)
		if seq, err := h.leader.Server.rep.log.TakeSnapshot(h.ctx, h.cli, prefix); err != nil || seq == 0 {
			h.t.Fatalf("snapshot: %d %v", seq, err)
		}
	}
	h.put(10)
	first, err := h.cli.Get(h.ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil || len(first.Kvs) == 0 {
		h.t.Fatalf("log: %v %v", first, err)
	}
	if seq, _ := replication.BatchSeq(prefix, string(first.Kvs[0].Key)); seq <= before+1 {
		h.t.Fatalf("the log still starts at batch %d, the standby applied up to %d: it did not fall behind", seq, before)
	}
	if _, err := h.cli.Compact(h.ctx, first.Header.Revision); err != nil {
		h.t.Fatal(err)
	}
	h.part.Heal()
}

// TestOplogStandbyBehindCompactionRestartsFromSnapshot: a standby cut
// off from etcd while the log was compacted past what it applied starts
// again from the newest snapshot, holds the leader's state, and serves
// every object once it takes over.
func TestOplogStandbyBehindCompactionRestartsFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := startBehindCompaction(t, "behind", dir,
		&replication.SnapshotConfig{Enable: true, Interval: time.Hour, Retention: 2, Restore: true, Dir: dir}, quiet)
	if _, err := h.client.Remove(h.ctx, &masterpb.RemoveRequest{Key: "k000", Force: true}); err != nil {
		t.Fatal(err)
	}
	h.fallBehind()
	h.waitSame()
	if n := h.standby.Server.rep.log.Resets(); n == 0 {
		t.Fatal("the standby caught up without starting again from a snapshot: it never fell behind")
	}
	if role := adminGet(t, h.standby.Server, "/role"); role != "standby" {
		t.Fatalf("/role of the caught-up standby: %q", role)
	}

	h.leader.Close() // revokes the lease: the standby takes over
	testutil.WaitUntil(t, 20*time.Second, "the standby to lead", h.standby.Server.IsLeader)
	c := dialMaster(t, h.standby)
	for i := 0; i < h.next; i++ {
		key := fmt.Sprintf("k%03d", i)
		r, err := c.GetReplicaList(h.ctx, &masterpb.KeyRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if removed := i == 0; (r.GetErrorCode() == 0) == removed || !removed && len(r.Replicas) != 1 {
			t.Fatalf("%s on the new leader: code %d, %d replicas (removed: %v)", key, r.GetErrorCode(), len(r.Replicas), removed)
		}
	}
}

// TestOplogStaleStandbySaysSoAndDoesNotLead: a standby behind the log's
// compaction that has no usable snapshot (its own, empty, store) cannot
// rebuild the state: /role, /status and /metrics say so, and when the
// leader goes it does not stand for election.
func TestOplogStaleStandbySaysSoAndDoesNotLead(t *testing.T) {
	logs := &lockedLog{}
	h := startBehindCompaction(t, "stale", t.TempDir(),
		&replication.SnapshotConfig{Restore: true, Dir: t.TempDir()}, slog.New(slog.NewTextHandler(logs, nil)))
	h.fallBehind()
	b := h.standby.Server
	testutil.WaitUntil(t, 30*time.Second, "the standby to report itself stale", func() bool {
		return adminGet(t, b, "/role") == "stale"
	})
	if st := adminGet(t, b, "/status"); !strings.Contains(st, `"role":"stale"`) || !strings.Contains(st, "snapshot needed") {
		t.Fatalf("/status of a stale standby: %s", st)
	}
	if m := adminGet(t, b, "/metrics"); !strings.Contains(m, "\nmaster_oplog_stale 1\n") {
		t.Fatalf("/metrics of a stale standby lacks master_oplog_stale 1")
	}
	if dumpState(b).Keys != 0 {
		t.Fatal("a stale standby kept a partial state")
	}

	const refusal = "not standing for election"
	refusals := strings.Count(logs.String(), refusal)
	h.leader.Close() // the master view key goes
	testutil.WaitUntil(t, 30*time.Second, "the stale standby to decline the free leadership", func() bool {
		return strings.Count(logs.String(), refusal) > refusals
	})
	view, err := h.cli.Get(h.ctx, replication.MasterViewKey(h.cluster))
	if err != nil {
		t.Fatal(err)
	}
	if b.IsLeader() || len(view.Kvs) != 0 {
		t.Fatalf("a stale standby took the leadership (leader %v, master view %v)", b.IsLeader(), view.Kvs)
	}
}

// adminGet is the body of GET path on s's admin handler.
func adminGet(t *testing.T, s *Server, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Body.String()
}

// lockedLog is a log sink tests read while the master writes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
