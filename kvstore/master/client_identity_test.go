package master

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

const (
	secretA = "secret-of-client-a-0123456789abcdef"
	secretB = "secret-of-client-b-0123456789abcdef"
)

// withSecret is ctx carrying a client secret ("" carries none).
func withSecret(ctx context.Context, secret string) context.Context {
	if secret == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kvstore.ClientSecretMetadataKey, secret)
}

// identityRefused reads master_client_identity_refused_total.
func identityRefused(s *Server) uint64 { return s.Stats().IdentityRefused }

// impostorCalls makes every call that acts for client "a" in c's
// context, and returns each one's error code by name.
func impostorCalls(t *testing.T, c masterpb.MasterClient, d masterpb.DiskTierClient, ctx context.Context) map[string]int32 {
	t.Helper()
	codes := map[string]int32{}
	must := func(name string, code int32, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		codes[name] = code
	}
	u, err := c.UnmountSegment(ctx, &masterpb.UnmountSegmentRequest{ClientId: "a", SegmentId: "a1"})
	must("unmount", u.GetErrorCode(), err)
	dr, err := c.DrainSegment(ctx, &masterpb.UnmountSegmentRequest{ClientId: "a", SegmentId: "a1"})
	must("drain", dr.GetErrorCode(), err)
	p, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: "a"})
	must("ping", p.GetErrorCode(), err)
	rm, err := c.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "a"})
	must("remount", rm.GetErrorCode(), err)
	m, err := c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: "a", Segment: seg("a2", 1<<20)})
	must("mount", m.GetErrorCode(), err)
	rv, err := c.Reserve(ctx, &masterpb.ReserveRequest{ClientId: "a", Size: 4096})
	must("reserve", rv.GetErrorCode(), err)
	sm, err := c.SetSegmentMode(ctx, &masterpb.SetSegmentModeRequest{ClientId: "a", SegmentId: "a1", Mode: masterpb.SegmentMode_SEGMENT_DRAINING})
	must("set_segment_mode", sm.GetErrorCode(), err)
	pe, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "a", Key: "k"})
	must("put_end", pe.GetErrorCode(), err)
	bp, err := c.BatchPutRevoke(ctx, &masterpb.BatchPutRevokeRequest{Items: []*masterpb.PutRevokeRequest{{ClientId: "a", Key: "k"}}})
	if err != nil || len(bp.GetErrorCodes()) != 1 {
		t.Fatalf("batch revoke: %v %v", bp, err)
	}
	codes["batch_put_revoke"] = bp.GetErrorCodes()[0]
	ld, err := d.UnmountLocalDiskSegment(ctx, &masterpb.UnmountLocalDiskSegmentRequest{ClientId: "a"})
	must("unmount_local_disk", ld.GetErrorCode(), err)
	return codes
}

// TestAnotherClientsIdIsRefused: once client a registered with its
// secret, a call that names a's id with another secret, a short one or
// none is refused with ILLEGAL_CLIENT and counted, and changes nothing:
// a's segment stays mounted and a's put stays open; a's own calls work,
// and a client that sends no secret at all works as upstream's.
func TestAnotherClientsIdIsRefused(t *testing.T) {
	srv := newTestServer(t, nil)
	cc := bufconnConn(t, srv)
	c, conn := masterpb.NewMasterClient(cc), masterpb.NewDiskTierClient(cc)
	bg := ctx(t)
	asA := withSecret(bg, secretA)
	if r, err := c.MountSegment(asA, &masterpb.MountSegmentRequest{ClientId: "a", Segment: seg("a1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	if r, err := c.PutStart(asA, &masterpb.PutStartRequest{ClientId: "a", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("put start: %v %v", r, err)
	}
	want := uint64(0)
	for name, ctx := range map[string]context.Context{
		"another secret": withSecret(bg, secretB), "no secret": bg, "a short secret": withSecret(bg, "short"),
	} {
		for call, code := range impostorCalls(t, c, conn, ctx) {
			if kvstore.ErrorCode(code) != kvstore.IllegalClient {
				t.Errorf("%s as a with %s: code %d, want ILLEGAL_CLIENT", call, name, code)
			}
			want++
		}
	}
	if got := identityRefused(srv); got != want {
		t.Fatalf("identity refusals counted: %d, want %d", got, want)
	}
	srv.WithState(func(st *State, _ time.Time) {
		segs := st.Segments()
		if len(segs) != 1 || segs[0].ID != "a1" || segs[0].Draining {
			t.Fatalf("a's segments after the impostor: %+v", segs)
		}
	})
	// a's own calls work.
	if r, err := c.PutEnd(asA, &masterpb.PutEndRequest{ClientId: "a", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("a's put end: %v %v", r, err)
	}
	if r, err := c.Ping(asA, &masterpb.PingRequest{ClientId: "a"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("a's ping: %v %v", r, err)
	}
	if r, err := c.UnmountSegment(asA, &masterpb.UnmountSegmentRequest{ClientId: "a", SegmentId: "a1"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("a's unmount: %v %v", r, err)
	}
	// A client without a secret (upstream's) registers and acts as before.
	if r, err := c.MountSegment(bg, &masterpb.MountSegmentRequest{ClientId: "u", Segment: seg("u1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("upstream client's mount: %v %v", r, err)
	}
	if r, err := c.UnmountSegment(bg, &masterpb.UnmountSegmentRequest{ClientId: "u", SegmentId: "u1"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("upstream client's unmount: %v %v", r, err)
	}
	if got := identityRefused(srv); got != want {
		t.Fatalf("identity refusals counted: %d, want %d", got, want)
	}
}

// TestRequireClientSecretLeavesNoIdUnbound: with RequireClientSecret a
// call that names a client id without a secret is refused even before
// the id is registered; one with a secret registers it.
func TestRequireClientSecretLeavesNoIdUnbound(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.RequireClientSecret = true })
	c := startBufconn(t, srv)
	bg := ctx(t)
	if r, err := c.MountSegment(bg, &masterpb.MountSegmentRequest{ClientId: "n", Segment: seg("n1", 1<<20)}); err != nil || kvstore.ErrorCode(r.ErrorCode) != kvstore.IllegalClient {
		t.Fatalf("mount without a secret: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	if r, err := c.PutStart(bg, &masterpb.PutStartRequest{ClientId: "n", Key: "k", Size: 10}); err != nil || kvstore.ErrorCode(r.ErrorCode) != kvstore.IllegalClient {
		t.Fatalf("put without a secret: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	if r, err := c.MountSegment(withSecret(bg, secretA), &masterpb.MountSegmentRequest{ClientId: "n", Segment: seg("n1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount with a secret: %v %v", r, err)
	}
	if r, err := c.Ping(withSecret(bg, secretB), &masterpb.PingRequest{ClientId: "n"}); err != nil || kvstore.ErrorCode(r.ErrorCode) != kvstore.IllegalClient {
		t.Fatalf("ping with another secret: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	if got := identityRefused(srv); got != 3 {
		t.Fatalf("identity refusals counted: %d, want 3", got)
	}
}

// TestSnapshotKeepsClientKeys: a client's key survives a snapshot, so a
// master restored from one refuses an impostor and admits the client.
func TestSnapshotKeepsClientKeys(t *testing.T) {
	st, err := NewState(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	a := caller{key: keyOfSecret(secretA), has: true}
	b := caller{key: keyOfSecret(secretB), has: true}
	if code := st.MountSegment("a", toSegment(seg("a1", 1<<20)), now); code != kvstore.OK {
		t.Fatal(code)
	}
	st.bind("a", a)
	st.touch("u", now) // a client without a key
	got := roundTrip(t, st)
	if code := got.admit("a", b); code != kvstore.IllegalClient {
		t.Fatalf("restored state admits another secret for a: %v", code)
	}
	if code := got.admit("a", a); code != kvstore.OK {
		t.Fatalf("restored state refuses a's own secret: %v", code)
	}
	if code := got.admit("u", caller{}); code != kvstore.OK {
		t.Fatalf("restored state refuses the client without a key: %v", code)
	}
	if got.m.identityRefused != 1 {
		t.Fatalf("refusals after restore: %d, want 1", got.m.identityRefused)
	}
}

// TestOplogStandbyKnowsClientKeys: a client registered on the leader
// keeps its identity on the standby that takes over: the new leader
// refuses an impostor and serves the client without a re-registration.
// The log carries the key, never the secret.
func TestOplogStandbyKnowsClientKeys(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: DefaultConfig()}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: "ident"}})
	}
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	b := start()
	bg := ctx(t)
	asA := withSecret(bg, secretA)
	ca := dialMaster(t, a)
	if r, err := ca.ReMountSegment(asA, &masterpb.ReMountSegmentRequest{ClientId: "a", Segments: []*masterpb.Segment{seg("a1", 1<<20)}}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	// Refused on the leader, so refused on the replay too: the log marks
	// a short secret rather than leaving it out.
	if r, err := ca.MountSegment(withSecret(bg, "short"), &masterpb.MountSegmentRequest{ClientId: "x", Segment: seg("x1", 1<<20)}); err != nil || kvstore.ErrorCode(r.ErrorCode) != kvstore.IllegalClient {
		t.Fatalf("mount with a short secret: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	testutil.WaitUntil(t, 20*time.Second, "the standby to apply the log", func() bool { return b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq() })
	log, err := cli.Get(bg, replication.OplogPrefix("ident"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range log.Kvs {
		if bytes.Contains(kv.Value, []byte(secretA)) {
			t.Fatalf("the client secret is in the log at %s", kv.Key)
		}
	}
	b.Server.WithState(func(st *State, _ time.Time) {
		if segs := st.Segments(); len(segs) != 1 || segs[0].ID != "a1" {
			t.Fatalf("the standby's segments: %+v, want a1 alone", segs)
		}
	})
	a.Close()
	testutil.WaitUntil(t, 20*time.Second, "b to lead", b.Server.IsLeader)
	cb := dialMaster(t, b)
	if r, err := cb.UnmountSegment(withSecret(bg, secretB), &masterpb.UnmountSegmentRequest{ClientId: "a", SegmentId: "a1"}); err != nil || kvstore.ErrorCode(r.ErrorCode) != kvstore.IllegalClient {
		t.Fatalf("impostor's unmount on the new leader: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	p, err := cb.Ping(asA, &masterpb.PingRequest{ClientId: "a"})
	if err != nil || p.ErrorCode != 0 || p.ClientStatus != masterpb.ClientStatus_CLIENT_OK {
		t.Fatalf("a's ping on the new leader: %v %v (want OK without a remount)", p, err)
	}
	if r, err := cb.UnmountSegment(asA, &masterpb.UnmountSegmentRequest{ClientId: "a", SegmentId: "a1"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("a's unmount on the new leader: %v %v", r, err)
	}
}
