package master

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// mixedCluster starts masters of one cluster on a real etcd, with the
// oplog on or off, and talks to them as a storage client and a writer.
type mixedCluster struct {
	t   *testing.T
	ep  string
	ctx context.Context
}

func newMixedCluster(t *testing.T) *mixedCluster {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &mixedCluster{t: t, ep: testutil.StartEtcd(t), ctx: ctx}
}

// start runs a master at addr ("127.0.0.1:0" for any port).
func (m *mixedCluster) start(addr string, oplog bool) *Service {
	m.t.Helper()
	svc, err := StartService(ServiceConfig{
		RPCAddress: addr, Server: Options{Config: DefaultConfig()},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		HA: &replication.HAConfig{Endpoints: []string{m.ep}, ClusterID: "mixed", Oplog: oplog,
			OplogPollInterval: 200 * time.Millisecond},
	})
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(svc.Close)
	return svc
}

// lead starts a master and waits until it serves.
func (m *mixedCluster) lead(addr string, oplog bool) (*Service, masterpb.MasterClient) {
	m.t.Helper()
	svc := m.start(addr, oplog)
	testutil.WaitUntil(m.t, 30*time.Second, "the master to lead", svc.Server.IsLeader)
	return svc, m.dial(svc)
}

func (m *mixedCluster) dial(svc *Service) masterpb.MasterClient {
	m.t.Helper()
	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { conn.Close() })
	return masterpb.NewMasterClient(conn)
}

// mount has the storage client (re)mount its one segment, as a client
// does when a master answers its Ping with NEED_REMOUNT.
func (m *mixedCluster) mount(c masterpb.MasterClient) {
	m.t.Helper()
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 20, TeEndpoint: "seg0"}
	r, err := c.ReMountSegment(m.ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}})
	if err != nil || r.GetErrorCode() != 0 {
		m.t.Fatalf("remount: code %d err %v", r.GetErrorCode(), err)
	}
}

// putAll puts keys prefix00.. of 4 KiB each and returns their buffers'
// addresses.
func (m *mixedCluster) putAll(c masterpb.MasterClient, prefix string, n int) map[string]uint64 {
	m.t.Helper()
	at := map[string]uint64{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("%s%02d", prefix, i)
		r, err := c.PutStart(m.ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 4096,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil || r.GetErrorCode() != 0 {
			m.t.Fatalf("put start %s: code %d err %v", key, r.GetErrorCode(), err)
		}
		e, err := c.PutEnd(m.ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		if err != nil || e.GetErrorCode() != 0 {
			m.t.Fatalf("put end %s: code %d err %v", key, e.GetErrorCode(), err)
		}
		at[key] = r.Replicas[0].BufferAddress
	}
	return at
}

// gone checks that no key of keys is served any more: a Get must not
// succeed (least of all with another object's buffer).
func (m *mixedCluster) gone(c masterpb.MasterClient, keys map[string]uint64, what string) {
	m.t.Helper()
	for key, addr := range keys {
		g, err := c.GetReplicaList(m.ctx, &masterpb.KeyRequest{Key: key})
		if err != nil {
			m.t.Fatalf("get %s: %v", key, err)
		}
		if code := kvstore.ErrorCode(g.GetErrorCode()); code != kvstore.ObjectNotFound {
			m.t.Fatalf("%s: %s (put at %#x) answers %v %v, want OBJECT_NOT_FOUND", what, key, addr, code, g.GetReplicas())
		}
	}
}

// served checks that every key of keys is served at its buffer.
func (m *mixedCluster) served(c masterpb.MasterClient, keys map[string]uint64) {
	m.t.Helper()
	for key, addr := range keys {
		g, err := c.GetReplicaList(m.ctx, &masterpb.KeyRequest{Key: key})
		if err != nil || g.GetErrorCode() != 0 || g.Replicas[0].BufferAddress != addr {
			m.t.Fatalf("get %s: %v %v, want its buffer at %#x", key, g, err, addr)
		}
	}
}

// needsRemount checks that the leader has forgotten the storage client's
// segment: its Ping answers NEED_REMOUNT, as after any failover without
// the log.
func (m *mixedCluster) needsRemount(c masterpb.MasterClient) {
	m.t.Helper()
	p, err := c.Ping(m.ctx, &masterpb.PingRequest{ClientId: "storage"})
	if err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_NEED_REMOUNT {
		t := m.t
		t.Fatalf("storage client's Ping: %v %v, want NEED_REMOUNT", p, err)
	}
}

// reused checks the test's premise: the master without the log put
// objects where the logged ones were.
func reused(t *testing.T, logged, unlogged map[string]uint64) {
	t.Helper()
	at := map[uint64]bool{}
	for _, a := range logged {
		at[a] = true
	}
	for _, a := range unlogged {
		if at[a] {
			return
		}
	}
	t.Fatalf("premise: the master without the log reused no buffer of the logged objects (%v, %v)", logged, unlogged)
}

// TestOplogIsNotReplayedAfterALeaderWithoutIt: a master with the oplog
// leads and takes puts; it stops; a master without the oplog leads
// (from an empty state, so its puts reuse the same buffers); it stops; a
// master with the oplog leads again. It must not serve the log's objects
// (their buffers hold the other master's objects now): it starts empty,
// its clients remount, and every later master that replays the log
// agrees, including one that replays it from its first batch.
func TestOplogIsNotReplayedAfterALeaderWithoutIt(t *testing.T) {
	t.Run("standby promoted", func(t *testing.T) {
		m := newMixedCluster(t)
		a, ca := m.lead("127.0.0.1:0", true)
		m.mount(ca)
		logged := m.putAll(ca, "a", 20)
		a.Close()

		b, cb := m.lead("127.0.0.1:0", false)
		m.needsRemount(cb)
		m.mount(cb)
		unlogged := m.putAll(cb, "b", 20)
		reused(t, logged, unlogged)
		// A standby with the oplog tails the log behind b: it holds the
		// logged objects until it is promoted.
		c := m.start("127.0.0.1:0", true)
		testutil.WaitUntil(t, 30*time.Second, "the standby to apply the log", func() bool { return c.Server.rep.log.AppliedSeq() > 0 })
		b.Close()

		testutil.WaitUntil(t, 30*time.Second, "the standby to lead", c.Server.IsLeader)
		cc := m.dial(c)
		m.gone(cc, logged, "after a leadership without the log")
		m.gone(cc, unlogged, "objects of the master without the log")
		m.needsRemount(cc)
		m.mount(cc)
		after := m.putAll(cc, "c", 5)

		// A master that replays the whole log, reset entry included,
		// ends in the same state.
		d := m.start("127.0.0.1:0", true)
		testutil.WaitUntil(t, 30*time.Second, "the new standby to apply the log", func() bool {
			return d.Server.rep.log.AppliedSeq() == c.Server.rep.log.AppliedSeq()
		})
		if got, want := dumpState(d.Server), dumpState(c.Server); !reflect.DeepEqual(got, want) {
			t.Fatalf("a master replaying the log from its start differs from the leader:\nleader  %+v\nreplica %+v", want, got)
		}
		c.Close()
		testutil.WaitUntil(t, 30*time.Second, "the new standby to lead", d.Server.IsLeader)
		cd := m.dial(d)
		m.gone(cd, logged, "two leaderships later")
		m.served(cd, after)
	})

	t.Run("one master, oplog off and on again", func(t *testing.T) {
		m := newMixedCluster(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()

		a, ca := m.lead(addr, true)
		m.mount(ca)
		logged := m.putAll(ca, "a", 20)
		a.Close()

		b, cb := m.lead(addr, false) // restarted without --enable_oplog
		m.needsRemount(cb)
		m.mount(cb)
		unlogged := m.putAll(cb, "b", 20)
		reused(t, logged, unlogged)
		b.Close()

		c, cc := m.lead(addr, true) // and with it again
		m.gone(cc, logged, "after a run without the log")
		m.needsRemount(cc)
		m.mount(cc)
		after := m.putAll(cc, "c", 5)
		c.Close()

		// The next restart with the oplog continues the log: the reset is
		// in it, and nothing ran without the log since.
		_, cd := m.lead(addr, true)
		m.gone(cd, logged, "a restart later")
		m.served(cd, after)
		p, err := cd.Ping(m.ctx, &masterpb.PingRequest{ClientId: "storage"})
		if err != nil || p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
			t.Fatalf("storage client after a restart with the log: %v %v, want OK", p, err)
		}
	})
}
