package master

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// startBufconn serves srv over an in-memory listener and returns a client.
func startBufconn(t *testing.T, srv *Server) masterpb.MasterClient {
	t.Helper()
	return masterpb.NewMasterClient(bufconnConn(t, srv))
}

// bufconnConn serves srv over an in-memory listener and returns a
// connection to it (for the Master and DiskTier clients).
func bufconnConn(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	srv.Register(g)
	srv.Start()
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		srv.Close()
	})
	return conn
}

func newTestServer(t *testing.T, mut func(*Options)) *Server {
	t.Helper()
	opts := Options{Config: DefaultConfig(), EvictionInterval: 20 * time.Millisecond, ClientCheckInterval: 20 * time.Millisecond}
	if mut != nil {
		mut(&opts)
	}
	srv, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func seg(id string, size uint64) *masterpb.Segment {
	return &masterpb.Segment{Id: id, Name: "host-" + id, Base: 0x10000, Size: size, TeEndpoint: "host-" + id, Protocol: "tcp"}
}

func TestServerPutGetRemoveOverGRPC(t *testing.T) {
	cl := startBufconn(t, newTestServer(t, nil))
	c := ctx(t)
	if r, err := cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	ps, err := cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 100,
		Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || ps.ErrorCode != 0 || len(ps.Replicas) != 1 {
		t.Fatalf("PutStart: %v %v", ps, err)
	}
	r0 := ps.Replicas[0]
	if r0.Status != masterpb.ReplicaStatus_REPLICA_PROCESSING || r0.TransportEndpoint != "host-s1" ||
		r0.BufferAddress < 0x10000 || r0.Size != 100 || r0.SegmentName != "host-s1" {
		t.Fatalf("descriptor %v", r0)
	}
	g, _ := cl.GetReplicaList(c, &masterpb.KeyRequest{Key: "k"})
	if g.ErrorCode != int32(kvstore.ReplicaIsNotReady) {
		t.Fatalf("get while writing: %d", g.ErrorCode)
	}
	if r, _ := cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "other", Key: "k"}); r.ErrorCode != int32(kvstore.IllegalClient) {
		t.Fatalf("PutEnd by another client: %d", r.ErrorCode)
	}
	sum := uint64(42)
	if r, _ := cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: "k", Checksum: &sum}); r.ErrorCode != 0 {
		t.Fatalf("PutEnd: %d", r.ErrorCode)
	}
	g, _ = cl.GetReplicaList(c, &masterpb.KeyRequest{Key: "k"})
	if g.ErrorCode != 0 || g.LeaseTtlMs != 10000 || g.GetChecksum() != 42 ||
		g.Replicas[0].Status != masterpb.ReplicaStatus_REPLICA_COMPLETE || g.Replicas[0].BufferAddress != r0.BufferAddress {
		t.Fatalf("get: %v", g)
	}
	if r, _ := cl.Remove(c, &masterpb.RemoveRequest{Key: "k"}); r.ErrorCode != int32(kvstore.ObjectHasLease) {
		t.Fatalf("remove leased: %d", r.ErrorCode)
	}
	if r, _ := cl.Remove(c, &masterpb.RemoveRequest{Key: "k", Force: true}); r.ErrorCode != 0 {
		t.Fatalf("force remove: %d", r.ErrorCode)
	}
	if e, _ := cl.ExistKey(c, &masterpb.KeyRequest{Key: "k"}); e.Exists || e.ErrorCode != 0 {
		t.Fatalf("exist after remove: %v", e)
	}
	// Put on an existing key.
	for range 2 {
		cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "dup", Size: 8})
		cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: "dup"})
	}
	if ps, _ := cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "dup", Size: 8}); ps.ErrorCode != int32(kvstore.ObjectAlreadyExists) {
		t.Fatalf("put existing: %d", ps.ErrorCode)
	}
	// Soft pin TTL without ENABLE is invalid.
	ttl := int64(1000)
	if ps, _ := cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "x", Size: 8,
		Config: &masterpb.ReplicateConfig{ReplicaNum: 1, SoftPinTtlMs: &ttl}}); ps.ErrorCode != int32(kvstore.InvalidParams) {
		t.Fatalf("pin ttl without enable: %d", ps.ErrorCode)
	}
}

func TestServerBatchOps(t *testing.T) {
	srv := newTestServer(t, nil)
	cl := startBufconn(t, srv)
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)})
	bs, err := cl.BatchPutStart(c, &masterpb.BatchPutStartRequest{Items: []*masterpb.PutStartRequest{
		{ClientId: "c1", Key: "a", Size: 10}, {ClientId: "c1", Key: "b", Size: 0}, {ClientId: "c1", Key: "c", Size: 30},
	}})
	if err != nil || len(bs.Items) != 3 || bs.Items[0].ErrorCode != 0 || bs.Items[1].ErrorCode != int32(kvstore.InvalidParams) || bs.Items[2].ErrorCode != 0 {
		t.Fatalf("BatchPutStart: %v %v", bs, err)
	}
	be, _ := cl.BatchPutEnd(c, &masterpb.BatchPutEndRequest{Items: []*masterpb.PutEndRequest{{ClientId: "c1", Key: "a"}, {ClientId: "c1", Key: "b"}}})
	br, _ := cl.BatchPutRevoke(c, &masterpb.BatchPutRevokeRequest{Items: []*masterpb.PutRevokeRequest{{ClientId: "c1", Key: "c"}}})
	if want := []int32{0, int32(kvstore.ObjectNotFound)}; be.ErrorCodes[0] != want[0] || be.ErrorCodes[1] != want[1] || br.ErrorCodes[0] != 0 {
		t.Fatalf("BatchPutEnd %v BatchPutRevoke %v", be.ErrorCodes, br.ErrorCodes)
	}
	bx, _ := cl.BatchExistKey(c, &masterpb.BatchKeyRequest{Keys: []string{"a", "b", "c"}})
	if !bx.Items[0].Exists || bx.Items[1].Exists || bx.Items[2].Exists {
		t.Fatalf("BatchExistKey %v", bx)
	}
	if bc, err := cl.BatchExistCodes(c, &masterpb.BatchKeyRequest{Keys: []string{"a", "b", "c"}}); err != nil || len(bc.Codes) != 3 || bc.Codes[0] != 1 || bc.Codes[1] != 0 || bc.Codes[2] != 0 {
		t.Fatalf("BatchExistCodes %v, %v; want [1 0 0]", bc.GetCodes(), err)
	}
	bg, _ := cl.BatchGetReplicaList(c, &masterpb.BatchKeyRequest{Keys: []string{"a", "zz"}})
	if bg.Items[0].ErrorCode != 0 || len(bg.Items[0].Replicas) != 1 || bg.Items[1].ErrorCode != int32(kvstore.ObjectNotFound) {
		t.Fatalf("BatchGetReplicaList %v", bg)
	}
	bu, _ := cl.BatchUpsertStart(c, &masterpb.BatchPutStartRequest{Items: []*masterpb.PutStartRequest{{ClientId: "c2", Key: "a", Size: 10}}})
	// BatchGetReplicaList leased "a": the same-size upsert writes elsewhere.
	if bu.Items[0].ErrorCode != 0 || bu.Items[0].Replicas[0].BufferAddress == bg.Items[0].Replicas[0].BufferAddress {
		t.Fatalf("same-size upsert under a read lease wrote in place: %v", bu)
	}
	cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c2", Key: "a"})
	brm, _ := cl.BatchRemove(c, &masterpb.BatchRemoveRequest{Keys: []string{"a", "nope"}, Force: true})
	if brm.ErrorCodes[0] != 0 || brm.ErrorCodes[1] != int32(kvstore.ObjectNotFound) {
		t.Fatalf("BatchRemove %v", brm.ErrorCodes)
	}
	for _, k := range []string{"x/1", "x/2", "y/1"} {
		cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: k, Size: 8})
		cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: k})
	}
	if r, _ := cl.RemoveByRegex(c, &masterpb.RemoveByRegexRequest{Pattern: "^x/"}); r.Count != 2 || r.ErrorCode != 0 {
		t.Fatalf("RemoveByRegex %v", r)
	}
	if r, _ := cl.RemoveAll(c, &masterpb.RemoveAllRequest{}); r.Count != 1 {
		t.Fatalf("RemoveAll %v", r)
	}
	st := srv.Stats()
	if st.Requests["batch_put_start"] != 1 || st.Requests["put_start"] < 3 {
		t.Fatalf("request counters %v", st.Requests)
	}
}

// newExpiringServer is a server whose silent clients are forgotten after 300 ms
// (no suspect phase) and have their metadata deleted from md.
func newExpiringServer(t *testing.T, md *metaserver.Server) *Server {
	return newTestServer(t, func(o *Options) {
		o.Config.ClientTTL = 300 * time.Millisecond
		o.Config.ClientDeadTTL = 300 * time.Millisecond
		o.Metadata = md
		o.CleanupMetadataOnTimeout = true
	})
}

func TestServerPingRemountAndExpiry(t *testing.T) {
	md := metaserver.New()
	cl := startBufconn(t, newExpiringServer(t, md))
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "dead", Segment: seg("d", 1<<20)})
	p, _ := cl.Ping(c, &masterpb.PingRequest{ClientId: "live"})
	if p.ClientStatus != masterpb.ClientStatus_CLIENT_NEED_REMOUNT {
		t.Fatalf("first ping: %v", p.ClientStatus)
	}
	cl.ReMountSegment(c, &masterpb.ReMountSegmentRequest{ClientId: "live", Segments: []*masterpb.Segment{seg("l", 1<<20)}})
	if p, _ := cl.Ping(c, &masterpb.PingRequest{ClientId: "live"}); p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
		t.Fatalf("ping after remount: %v", p.ClientStatus)
	}
	// One object on both segments, one only on the dead client's.
	cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "live", Key: "both", Size: 8, Config: &masterpb.ReplicateConfig{ReplicaNum: 2}})
	cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "live", Key: "both"})
	cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "live", Key: "dead-only", Size: 8,
		Config: &masterpb.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"host-d"}}})
	cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "live", Key: "dead-only"})
	md.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/metadata?key=mooncake/ram/host-d", strings.NewReader("{}")))
	if _, ok := md.Get("mooncake/ram/host-d"); !ok {
		t.Fatal("metadata not stored")
	}
	// Keep "live" alive while "dead" goes silent.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl.Ping(c, &masterpb.PingRequest{ClientId: "live"})
		g, _ := cl.GetReplicaList(c, &masterpb.KeyRequest{Key: "dead-only"})
		if g.ErrorCode == int32(kvstore.ObjectNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("dead client never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	g, _ := cl.GetReplicaList(c, &masterpb.KeyRequest{Key: "both"})
	if g.ErrorCode != 0 || len(g.Replicas) != 1 || g.Replicas[0].SegmentName != "host-l" {
		t.Fatalf("object with a surviving replica: %v", g)
	}
	if _, ok := md.Get("mooncake/ram/host-d"); ok {
		t.Fatal("metadata of the expired segment not cleaned up")
	}
}

func TestServerEvictionWokenByAllocationFailure(t *testing.T) {
	srv := newTestServer(t, func(o *Options) {
		o.EvictionInterval = time.Hour // only the wake-up can run it
		o.Config.EvictionRatio = 0.5
		o.Config.EvictionHighWatermarkRatio = 1 // only the allocation failure triggers it
	})
	cl := startBufconn(t, srv)
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 1024)})
	for _, k := range []string{"a", "b"} {
		cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: k, Size: 512})
		cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c", Key: k})
	}
	if ps, _ := cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: "new", Size: 512}); ps.ErrorCode != int32(kvstore.NoAvailableHandle) {
		t.Fatalf("full segment: %d", ps.ErrorCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps, _ := cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: "new", Size: 512})
		if ps.ErrorCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("eviction never freed space")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := srv.Stats(); st.EvictedKeys != 1 || st.KeyCount != 2 {
		t.Fatalf("evicted %d keys, %d left", st.EvictedKeys, st.KeyCount)
	}
}

func TestServerStandbyRefuses(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.Standby = true })
	cl := startBufconn(t, srv)
	c := ctx(t)
	_, err := cl.Ping(c, &masterpb.PingRequest{ClientId: "c"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("standby ping: %v", err)
	}
	srv.SetLeader(true, 7)
	p, err := cl.Ping(c, &masterpb.PingRequest{ClientId: "c"})
	if err != nil || p.ViewVersion != 7 {
		t.Fatalf("leader ping: %v %v", p, err)
	}
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 1024)})
	// A new term starts with empty metadata.
	srv.SetLeader(true, 8)
	if st := srv.Stats(); st.Segments != 0 || st.ActiveClients != 0 {
		t.Fatalf("state survived a leadership change: %+v", st)
	}
}

// TestServiceOverTCP starts the whole service on real loopback ports: RPC,
// admin HTTP and the embedded metadata store.
func TestServiceOverTCP(t *testing.T) {
	// The zero Options means upstream defaults.
	svc, err := StartService(ServiceConfig{
		RPCAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0", HTTPMetadataAddress: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := masterpb.NewMasterClient(conn)
	c := ctx(t)
	if r, err := cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 4096)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount over TCP: %v %v", r, err)
	}
	cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 1, SoftPinAction: masterpb.SoftPinAction_SOFT_PIN_ENABLE}})
	cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c", Key: "k"})

	get := func(base, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(svc.MetricsAddr(), "/health"); code != 200 || body != "OK" {
		t.Fatalf("/health = %d %q", code, body)
	}
	_, m := get(svc.MetricsAddr(), "/metrics")
	for _, want := range []string{"master_total_capacity_bytes 4096", "master_allocated_bytes 104", "master_key_count 1",
		"master_active_clients 1", "master_put_start_requests_total 1", "master_soft_pin_key_count 1",
		"master_evicted_key_count 0", "master_is_leader 1"} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, gauge := range []string{"go_goroutines ", "process_open_fds ", "process_resident_memory_bytes "} {
		if !strings.Contains(m, "\n"+gauge) {
			t.Errorf("/metrics lacks the process gauge %q", gauge)
		}
	}
	if code, body := get(svc.MetricsAddr(), "/get_all_segments"); code != 200 || body != "host-s\n" {
		t.Fatalf("/get_all_segments = %d %s", code, body)
	}
	if code, body := get(svc.MetricsAddr(), "/query_key?key=k"); code != 200 || !strings.Contains(body, `"status":"COMPLETE"`) {
		t.Fatalf("/query_key = %d %s", code, body)
	}
	if code, body := get(svc.MetricsAddr(), "/get_all_keys"); code != 200 || strings.TrimSpace(body) != `["k"]` {
		t.Fatalf("/get_all_keys = %d %s", code, body)
	}
	if code, body := get(svc.MetricsAddr(), "/role"); code != 200 || body != "leader" {
		t.Fatalf("/role = %d %s", code, body)
	}
	before := time.Now()
	code, body := get(svc.MetricsAddr(), "/status")
	var st Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("/status = %d %s: %v", code, body, err)
	}
	if st.Version == "" || st.Role != "leader" || st.HA || st.ClusterID != replication.DefaultClusterID || st.Segments != 1 ||
		st.LeaseTTLMs != DefaultConfig().DefaultLeaseTTL.Milliseconds() ||
		st.TimeUnixNano < before.UnixNano() || st.TimeUnixNano > time.Now().UnixNano() {
		t.Fatalf("/status = %+v", st)
	}
	if code, _ := get(svc.MetricsAddr(), "/query_key?key=nope"); code != 404 {
		t.Fatalf("/query_key missing = %d", code)
	}
	if code, body := get(svc.MetadataAddr(), "/health"); code != 200 || body != "OK" {
		t.Fatalf("metadata /health = %d %q", code, body)
	}
	if code, _ := get(svc.MetadataAddr(), "/metadata?key=nope"); code != 404 {
		t.Fatalf("metadata GET missing = %d", code)
	}
}

// A write that leaves the pool above the high watermark wakes the eviction
// loop at once, without waiting for its next tick, so writers faster than
// the tick keep finding room (found by tests/test_store_cluster.py: puts of
// 256 KiB objects into an 8 MiB segment failed with NO_AVAILABLE_HANDLE
// between 100 ms ticks).
func TestServerEvictionWokenByHighWatermark(t *testing.T) {
	srv := newTestServer(t, func(o *Options) {
		o.EvictionInterval = time.Hour // only a wake-up can run it
		o.Config.EvictionRatio = 0.2
		o.Config.EvictionHighWatermarkRatio = 0.5
	})
	cl := startBufconn(t, srv)
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 1000)})
	for _, k := range []string{"a", "b", "c"} { // 3 x 200 = 60% > 50%
		cl.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: k, Size: 200})
		cl.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c", Key: k})
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().EvictedKeys == 0 {
		if time.Now().After(deadline) {
			t.Fatal("eviction did not run although the pool is above the watermark")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := srv.Stats(); st.KeyCount != 2 {
		t.Fatalf("%d keys left, want 2 (the oldest evicted)", st.KeyCount)
	}
}
