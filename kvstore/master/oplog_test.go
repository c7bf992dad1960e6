package master

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// stateDump is what the replicas must agree on.
type stateDump struct {
	Objects  []ObjectInfo
	Segments []SegmentInfo
	Keys     int
	Alloc    uint64
	Blocks   int
	Unused   uint64 // reserved bytes not yet committed
}

func dumpState(s *Server) stateDump {
	var d stateDump
	s.WithState(func(st *State, _ time.Time) {
		for _, k := range st.Keys() {
			o, _ := st.QueryKey(k)
			d.Objects = append(d.Objects, o)
		}
		d.Segments = st.Segments()
		stats := st.Stats()
		d.Keys, d.Alloc = int(stats.KeyCount), stats.AllocatedBytes
		d.Blocks, d.Unused = st.Reserved()
	})
	return d
}

// TestOplogStandbyTakesOverWithTheObjects runs a leader and a standby
// with the oplog on a real etcd: after mounts, puts, upserts and removes
// the standby holds the same state; when the leader dies the standby
// serves the same objects, without a remount, and the removed ones stay
// removed; a copy task of the old leader keeps its id, is handed out by
// the new one and takes its report there.
func TestOplogStandbyTakesOverWithTheObjects(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: DefaultConfig()}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: "oplog"}})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testutil.WaitUntil(t, 20*time.Second, what, cond)
	}
	a := start()
	waitFor("a to lead", a.Server.IsLeader)
	b := start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca := dialMaster(t, a)
	ok := func(code int32, err error, what string) {
		t.Helper()
		if err != nil || code != 0 {
			t.Fatalf("%s: code %d err %v", what, code, err)
		}
	}
	for i, name := range []string{"seg0", "seg1"} {
		r, err := ca.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: "storage", Segment: &masterpb.Segment{
			Id: fmt.Sprintf("id%d", i), Name: name, Base: uint64(i+1) << 30, Size: 1 << 20, TeEndpoint: name}})
		ok(r.GetErrorCode(), err, "mount")
	}
	// As a client does after its first Ping: the remount puts it in the
	// set of clients the master counts as OK.
	segs := []*masterpb.Segment{}
	for i, name := range []string{"seg0", "seg1"} {
		segs = append(segs, &masterpb.Segment{Id: fmt.Sprintf("id%d", i), Name: name, Base: uint64(i+1) << 30, Size: 1 << 20, TeEndpoint: name})
	}
	rm, err := ca.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: segs})
	ok(rm.GetErrorCode(), err, "remount")
	put := func(c masterpb.MasterClient, key string, size uint64, replicas uint32) {
		t.Helper()
		r, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: size,
			Config: &masterpb.ReplicateConfig{ReplicaNum: replicas}})
		ok(r.GetErrorCode(), err, "put start "+key)
		e, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		ok(e.GetErrorCode(), err, "put end "+key)
	}
	for i := 0; i < 40; i++ {
		put(ca, fmt.Sprintf("k%02d", i), uint64(100+i*37), uint32(1+i%2))
	}
	for i := 0; i < 40; i += 3 {
		r, err := ca.Remove(ctx, &masterpb.RemoveRequest{Key: fmt.Sprintf("k%02d", i), Force: true})
		ok(r.GetErrorCode(), err, "remove")
	}
	// One-round-trip puts: a block and commits into it replicate too.
	rv, err := ca.Reserve(ctx, &masterpb.ReserveRequest{ClientId: "writer", Size: 8192})
	ok(rv.GetErrorCode(), err, "reserve")
	commit := func(c masterpb.MasterClient, key string, off uint64) {
		t.Helper()
		r, err := c.BatchPutCommit(ctx, &masterpb.BatchPutCommitRequest{Items: []*masterpb.PutCommitRequest{{
			Put: &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 1000}, ReservationId: rv.ReservationId, Offset: off}}})
		if err != nil || len(r.ErrorCodes) != 1 || r.ErrorCodes[0] != 0 || r.ReservationGone[0] {
			t.Fatalf("commit %s: %v %v", key, r, err)
		}
	}
	commit(ca, "r0", 0)
	commit(ca, "r1", 4096)
	// A copy task (k02 has one replica: the other segment is the target)
	// replicates with its id, salt included.
	ct, err := ca.CreateCopyTask(ctx, &masterpb.CreateCopyTaskRequest{Key: "k02", Targets: []string{"seg0", "seg1"}})
	ok(ct.GetErrorCode(), err, "copy task")
	g, err := ca.GetReplicaList(ctx, &masterpb.KeyRequest{Key: "k01"})
	ok(g.GetErrorCode(), err, "get on the leader")
	if _, err := dialMaster(t, b).Ping(ctx, &masterpb.PingRequest{ClientId: "storage"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("standby answered a Ping: %v", err)
	}
	waitFor("the standby to apply the log", func() bool { return b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq() })
	want := dumpState(a.Server)
	if got := dumpState(b.Server); !reflect.DeepEqual(got, want) {
		t.Fatalf("standby state differs from the leader's:\nleader  %+v\nstandby %+v", want, got)
	}

	a.Close() // revokes the lease: b takes over at once
	waitFor("b to lead", b.Server.IsLeader)
	cb := dialMaster(t, b)
	p, err := cb.Ping(ctx, &masterpb.PingRequest{ClientId: "storage"})
	if err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
		t.Fatalf("storage client on the new leader: %v %v (want OK: its segments are known)", p, err)
	}
	g2, err := cb.GetReplicaList(ctx, &masterpb.KeyRequest{Key: "k01"})
	ok(g2.GetErrorCode(), err, "get on the new leader")
	if !reflect.DeepEqual(g2.Replicas[0].BufferAddress, g.Replicas[0].BufferAddress) {
		t.Fatalf("k01 moved: %v then %v", g.Replicas, g2.Replicas)
	}
	for i := 0; i < 40; i++ {
		r, err := cb.ExistKey(ctx, &masterpb.KeyRequest{Key: fmt.Sprintf("k%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if removed := i%3 == 0; r.GetExists() == removed {
			t.Fatalf("k%02d: removed %v, ExistKey %v (code %d)", i, removed, r.GetExists(), r.GetErrorCode())
		}
	}
	if len(p.Tasks) != 1 || !proto.Equal(p.Tasks[0].Id, ct.Id) {
		t.Fatalf("the new leader's first Ping answer hands out %v, want the old leader's task %v", p.Tasks, ct.Id)
	}
	q, err := cb.QueryTask(ctx, &masterpb.QueryTaskRequest{Id: ct.Id})
	ok(q.GetErrorCode(), err, "the old leader's task on the new leader")
	if q.Status != masterpb.TaskStatus_TASK_PROCESSING {
		t.Fatalf("task %v on the new leader: %v", ct.Id, q)
	}
	done, err := cb.MarkTaskComplete(ctx, &masterpb.MarkTaskCompleteRequest{ClientId: "storage", Id: ct.Id, Success: true})
	ok(done.GetErrorCode(), err, "report the task to the new leader")
	if q, err := cb.QueryTask(ctx, &masterpb.QueryTaskRequest{Id: ct.Id}); err != nil || q.Status != masterpb.TaskStatus_TASK_SUCCESS {
		t.Fatalf("task %v after its report: %v %v", ct.Id, q, err)
	}
	put(cb, "after", 64, 1) // the new leader allocates around the old objects
	commit(cb, "r2", 2048)  // and knows the old leader's block
	for _, k := range []string{"r0", "r1", "r2"} {
		r, err := cb.GetReplicaList(ctx, &masterpb.KeyRequest{Key: k})
		ok(r.GetErrorCode(), err, "get "+k)
		if r.Replicas[0].BufferAddress < rv.Block.BufferAddress || r.Replicas[0].BufferAddress >= rv.Block.BufferAddress+rv.Block.Size {
			t.Fatalf("%s at %#x, outside the block %v", k, r.Replicas[0].BufferAddress, rv.Block)
		}
	}
	view, err := cli.Get(ctx, replication.MasterViewKey("oplog"))
	if err != nil || len(view.Kvs) == 0 || string(view.Kvs[0].Value) != b.RPCAddr() {
		t.Fatalf("master view: %v %v", view, err)
	}
}

// TestOplogReplicatesExpiryNotHeartbeats: pings of a known client are not
// logged, and a client the leader makes suspect, restores or forgets is
// made suspect, restored or forgotten on the standby too, though the
// standby never saw its heartbeats.
func TestOplogReplicatesExpiryNotHeartbeats(t *testing.T) {
	ep := testutil.StartEtcd(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Second
	cfg.ClientDeadTTL = 3 * time.Second
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: cfg, ClientCheckInterval: 100 * time.Millisecond}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: "expiry"}})
	}
	a := start()
	deadline := time.Now().Add(20 * time.Second)
	for !a.Server.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("a did not lead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := start()
	conn, err := grpc.NewClient(a.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seg := &masterpb.Segment{Id: "s1", Name: "seg", Base: 1 << 30, Size: 1 << 20, TeEndpoint: "seg"}
	if r, err := c.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "soon-gone", Segments: []*masterpb.Segment{seg}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	before := a.Server.rep.log.AppliedSeq()
	const pings = 50
	for i := 0; i < pings; i++ {
		if p, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: "soon-gone"}); err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
			t.Fatalf("ping: %v %v", p, err)
		}
	}
	if grew := a.Server.rep.log.AppliedSeq() - before; grew >= pings {
		t.Fatalf("%d pings of a known client added %d batches: heartbeats are logged", pings, grew)
	}
	// The client falls silent: the leader makes it suspect, and so does the
	// standby; its ping restores it on both; silent past client_dead_ttl,
	// it is forgotten on both. (The leader applies a change before its
	// batch is durable, so equal batch counts alone can be seen just before
	// the standby has it.)
	waitSame := func(what string, each func(), done func(stateDump) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && !(done(dumpState(a.Server)) && done(dumpState(b.Server)) &&
			b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq()) {
			each()
			time.Sleep(50 * time.Millisecond)
		}
		if da, db := dumpState(a.Server), dumpState(b.Server); !done(da) || !reflect.DeepEqual(da, db) {
			t.Fatalf("%s: leader %v, standby %v", what, da.Segments, db.Segments)
		}
	}
	suspect := func(want bool) func(stateDump) bool {
		return func(d stateDump) bool { return len(d.Segments) == 1 && d.Segments[0].Suspect == want }
	}
	ping := func() {
		if p, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: "soon-gone"}); err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
			t.Fatalf("ping: %v %v", p, err)
		}
	}
	waitSame("suspect after client_ttl", func() {}, suspect(true))
	waitSame("restored by a ping", ping, suspect(false))
	waitSame("forgotten after client_dead_ttl", func() {}, func(d stateDump) bool { return len(d.Segments) == 0 })
}

// TestOplogKVEventsFollowDurableChanges: with the oplog a leader publishes
// a change's KV events once its batch is durable, so they have been
// published by the time the change is acknowledged, and a standby applying
// the same log publishes none.
func TestOplogKVEventsFollowDurableChanges(t *testing.T) {
	ep := testutil.StartEtcd(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(sink KVEventSink) *Service {
		cfg := DefaultConfig()
		cfg.KVEvents = sink
		svc, err := StartService(ServiceConfig{
			RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: "oplog-events", Oplog: true, OplogPollInterval: 200 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Close)
		return svc
	}
	leaderSink, standbySink := &recordingSink{}, &recordingSink{}
	a := start(leaderSink)
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	b := start(standbySink)
	conn, err := grpc.NewClient(a.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := masterpb.NewMasterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: "storage", Segment: &masterpb.Segment{
		Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 20, TeEndpoint: "seg0"}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	if r, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: "7", Size: 64,
		Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("put start: %v %v", r, err)
	}
	expectEvents(t, "before put end", leaderSink.take())
	if r, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: "7"}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("put end: %v %v", r, err)
	}
	expectEvents(t, "put end acknowledged", leaderSink.take(), "stored cpu default/7")
	if r, err := c.Remove(ctx, &masterpb.RemoveRequest{Key: "7", Force: true}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("remove: %v %v", r, err)
	}
	expectEvents(t, "remove acknowledged", leaderSink.take(), "removed cpu default/7")
	testutil.WaitUntil(t, 20*time.Second, "the standby to apply the log", func() bool {
		return b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq()
	})
	expectEvents(t, "standby", standbySink.take())
}

// startOplogService starts a master with sc on loopback with the oplog on
// (standbys re-read the log every 200 ms unless sc says otherwise), closed
// when the test ends.
func startOplogService(t testing.TB, sc ServiceConfig) *Service {
	t.Helper()
	sc.RPCAddress = "127.0.0.1:0"
	sc.HA.Oplog = true
	if sc.HA.OplogPollInterval == 0 {
		sc.HA.OplogPollInterval = 200 * time.Millisecond
	}
	svc, err := StartService(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}
