package master

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// TestCallPartsCutBatchCalls: a batch call larger than one entry is cut
// into parts that each fit one and together hold every item in order;
// a small call stays whole, and a call that cannot be cut is refused.
func TestCallPartsCutBatchCalls(t *testing.T) {
	keys := make([]string, 12000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%064d", i)
	}
	md := map[string]string{"mooncake-tenant-id": "t1"}
	method := masterpb.Master_BatchReplicaClear_FullMethodName
	parts, err := callParts(method, md, &masterpb.BatchReplicaClearRequest{ClientId: "c", Keys: keys, SegmentName: "seg"})
	if err != nil || len(parts) < 2 {
		t.Fatalf("%d parts, %v; want several", len(parts), err)
	}
	var got []string
	for i, p := range parts {
		if size := len(replication.AppendEntry(nil, &replication.Entry{Kind: replication.KindRPC, N: 1 << 40, Now: time.Now(), Name: method, MD: md, Payload: p.payload})); size > replication.MaxEntryBytes {
			t.Fatalf("part %d: an entry of %d bytes, more than %d", i, size, replication.MaxEntryBytes)
		}
		r := p.req.(*masterpb.BatchReplicaClearRequest)
		if r.ClientId != "c" || r.SegmentName != "seg" || p.offset != len(got) {
			t.Fatalf("part %d: %q %q at %d, want the call's fields at %d", i, r.ClientId, r.SegmentName, p.offset, len(got))
		}
		var dec masterpb.BatchReplicaClearRequest
		if err := proto.Unmarshal(p.payload, &dec); err != nil || !proto.Equal(&dec, r) {
			t.Fatalf("part %d: payload is not its request: %v", i, err)
		}
		got = append(got, r.Keys...)
	}
	if !reflect.DeepEqual(got, keys) {
		t.Fatal("the parts do not hold the call's keys in order")
	}
	// Answers join in order, indices shifted to the whole call's.
	join := batchSplits[method].join
	whole := join(nil, &masterpb.BatchReplicaClearResponse{Cleared: []uint32{0, 2}}, 0)
	whole = join(whole, &masterpb.BatchReplicaClearResponse{Cleared: []uint32{1}}, 5)
	if c := whole.(*masterpb.BatchReplicaClearResponse).Cleared; !reflect.DeepEqual(c, []uint32{0, 2, 6}) {
		t.Fatalf("joined cleared %v, want [0 2 6]", c)
	}

	if parts, err := callParts(method, md, &masterpb.BatchReplicaClearRequest{Keys: keys[:10]}); err != nil || len(parts) != 1 {
		t.Fatalf("a small call: %d parts, %v", len(parts), err)
	}
	// What cannot be cut stays whole (the writer logs it in pieces).
	huge := strings.Repeat("x", replication.MaxEntryBytes)
	if parts, err := callParts(masterpb.Master_RemoveByRegex_FullMethodName, nil, &masterpb.RemoveByRegexRequest{Pattern: huge}); err != nil ||
		len(parts) != 1 {
		t.Fatalf("an oversized call that cannot be cut: %d parts, %v", len(parts), err)
	}
	parts, err = callParts(masterpb.Master_BatchRemove_FullMethodName, nil, &masterpb.BatchRemoveRequest{Keys: []string{"a", huge, "b"}, Force: true})
	if err != nil || len(parts) != 3 || parts[1].offset != 1 || parts[1].req.(*masterpb.BatchRemoveRequest).Keys[0] != huge ||
		!parts[2].req.(*masterpb.BatchRemoveRequest).Force {
		t.Fatalf("a batch with one oversized item: %d parts, %v", len(parts), err)
	}
}

// TestOplogLargeBatchCalls: with the oplog, batch puts, existence
// checks, gets and removes of 12 000 keys of 64 characters (each request
// far over one entry's 512 KiB) succeed for every key, and the standby,
// which replays the log, holds the leader's state, and serves it after
// a failover.
func TestOplogLargeBatchCalls(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour // the writer never pings
	const cluster = "large"
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: cluster}})
	}
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	b := start()
	ca := dialMaster(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 26, TeEndpoint: "seg0"}
	if r, err := ca.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.GetErrorCode() != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}

	const n = 12000
	keys := make([]string, n)
	starts := make([]*masterpb.PutStartRequest, n)
	ends := make([]*masterpb.PutEndRequest, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("object/%057d", i)
		starts[i] = &masterpb.PutStartRequest{ClientId: "writer", Key: keys[i], Size: 1024, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}
		ends[i] = &masterpb.PutEndRequest{ClientId: "writer", Key: keys[i]}
	}
	if len(keys[0]) != 64 {
		t.Fatalf("key of %d characters", len(keys[0]))
	}
	everyKey := func(what string, got int, code func(i int) int32) {
		t.Helper()
		if got != n {
			t.Fatalf("%s: %d answers for %d keys", what, got, n)
		}
		for i := 0; i < n; i++ {
			if c := code(i); c != 0 {
				t.Fatalf("%s: key %d failed with %d", what, i, c)
			}
		}
	}
	ps, err := ca.BatchPutStart(ctx, &masterpb.BatchPutStartRequest{Items: starts})
	if err != nil {
		t.Fatalf("batch put start: %v", err)
	}
	everyKey("batch put start", len(ps.Items), func(i int) int32 { return ps.Items[i].ErrorCode })
	pe, err := ca.BatchPutEnd(ctx, &masterpb.BatchPutEndRequest{Items: ends})
	if err != nil {
		t.Fatalf("batch put end: %v", err)
	}
	everyKey("batch put end", len(pe.ErrorCodes), func(i int) int32 { return pe.ErrorCodes[i] })
	ex, err := ca.BatchExistKey(ctx, &masterpb.BatchKeyRequest{Keys: keys})
	if err != nil {
		t.Fatalf("batch exist: %v", err)
	}
	everyKey("batch exist", len(ex.Items), func(i int) int32 {
		if !ex.Items[i].Exists {
			return -1
		}
		return ex.Items[i].ErrorCode
	})
	g, err := ca.BatchGetReplicaList(ctx, &masterpb.BatchKeyRequest{Keys: keys})
	if err != nil {
		t.Fatalf("batch get: %v", err)
	}
	everyKey("batch get", len(g.Items), func(i int) int32 {
		if len(g.Items[i].Replicas) != 1 {
			return -1
		}
		return g.Items[i].ErrorCode
	})

	// The log holds the calls in parts: several batches, none too large.
	log, err := cli.Get(ctx, replication.OplogPrefix(cluster), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range log.Kvs {
		if len(kv.Value) > replication.MaxBatchBytes+64 {
			t.Fatalf("batch %s of %d bytes", kv.Key, len(kv.Value))
		}
	}
	same := func(what string) {
		t.Helper()
		testutil.WaitUntil(t, 30*time.Second, "the standby to apply the log "+what, func() bool {
			return b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq() && reflect.DeepEqual(dumpState(a.Server), dumpState(b.Server))
		})
	}
	same("after the puts and reads")

	// Remove the first 9000 (594 KiB of keys); 3000 stay.
	const removed = 9000
	rm, err := ca.BatchRemove(ctx, &masterpb.BatchRemoveRequest{Keys: keys[:removed], Force: true})
	if err != nil {
		t.Fatalf("batch remove: %v", err)
	}
	if len(rm.ErrorCodes) != removed {
		t.Fatalf("batch remove: %d answers for %d keys", len(rm.ErrorCodes), removed)
	}
	for i, c := range rm.ErrorCodes {
		if c != 0 {
			t.Fatalf("batch remove: key %d failed with %d", i, c)
		}
	}
	same("after the remove")

	a.Close() // the standby takes over with what it replayed
	testutil.WaitUntil(t, 20*time.Second, "b to lead", b.Server.IsLeader)
	codes, err := dialMaster(t, b).BatchExistCodes(ctx, &masterpb.BatchKeyRequest{Keys: keys})
	if err != nil || len(codes.Codes) != n {
		t.Fatalf("batch exist on the new leader: %d codes, %v", len(codes.GetCodes()), err)
	}
	for i, c := range codes.Codes {
		if want := int32(1); i < removed && c != 0 || i >= removed && c != want {
			t.Fatalf("key %d on the new leader: exist code %d (removed: %v)", i, c, i < removed)
		}
	}
}

// TestOplogLargeCallThatCannotBeCut: a call larger than one entry that
// cannot be cut (a local disk mounted with 15 000 objects of 64-character
// keys, ~1 MB) succeeds with the oplog, in pieces, and the standby ends in
// the leader's state, byte for byte, and serves the objects once it
// takes over.
func TestOplogLargeCallThatCannotBeCut(t *testing.T) {
	ep := testutil.StartEtcd(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	cfg.Offload.Enable = true
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: "pieces"}})
	}
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	b := start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(a.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 15000
	keys := make([]string, n)
	objs := make([]*masterpb.DiskObject, n)
	for i := range objs {
		keys[i] = fmt.Sprintf("disk/%059d", i)
		objs[i] = &masterpb.DiskObject{Key: keys[i], Size: uint64(1000 + i)}
	}
	req := &masterpb.MountLocalDiskSegmentRequest{ClientId: "storage", Endpoint: "127.0.0.1:1", CapacityBytes: 1 << 40, Objects: objs}
	if size := proto.Size(req); size <= replication.MaxEntryBytes {
		t.Fatalf("the mount takes %d bytes: not larger than one entry", size)
	}
	r, err := masterpb.NewDiskTierClient(conn).MountLocalDiskSegment(ctx, req)
	if err != nil || r.ErrorCode != 0 || len(r.Rejected) != 0 {
		t.Fatalf("mount of a disk with %d objects: %v %v", n, r, err)
	}
	var la, lb []byte
	testutil.WaitUntil(t, 30*time.Second, "the standby to hold the leader's state", func() bool {
		if b.Server.rep.log.AppliedSeq() != a.Server.rep.log.AppliedSeq() {
			return false
		}
		a.Server.WithState(func(st *State, _ time.Time) { la = encodeSnapshot(st, 0, 0) })
		b.Server.WithState(func(st *State, _ time.Time) { lb = encodeSnapshot(st, 0, 0) })
		return bytes.Equal(la, lb) && reflect.DeepEqual(dumpState(a.Server), dumpState(b.Server))
	})
	if dumpState(b.Server).Keys != n {
		t.Fatalf("the standby holds %d keys, want %d", dumpState(b.Server).Keys, n)
	}
	a.Close()
	testutil.WaitUntil(t, 20*time.Second, "b to lead", b.Server.IsLeader)
	codes, err := dialMaster(t, b).BatchExistCodes(ctx, &masterpb.BatchKeyRequest{Keys: keys})
	if err != nil || len(codes.Codes) != n {
		t.Fatalf("exist on the new leader: %v", err)
	}
	for i, c := range codes.Codes {
		if c != 1 {
			t.Fatalf("%s on the new leader: exist code %d", keys[i], c)
		}
	}
}
