package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// TestOplogOrphansAfterAGapAreNeverApplied: a leader with several batches
// in flight can die with a later batch in etcd and an earlier one not (a
// gap). A replica applies the log up to the gap only, whether it reads
// it or watches it; the next leader's first batch fills the gap and
// deletes the orphans after it, and the replica goes on with the new
// batches, never the orphans.
func TestOplogOrphansAfterAGapAreNeverApplied(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := etcdClient(t, ep)
	ctx := context.Background()
	const prefix = "log/"
	put := func(seq uint64, ns ...uint64) {
		t.Helper()
		var enc []byte
		for _, n := range ns {
			enc = appendEntry(enc, &entry{kind: entryEvictTick, n: n, now: time.Now()})
		}
		if _, err := cli.Put(ctx, oplogKey(prefix, seq), string(encodeBatch(seq, len(ns), enc))); err != nil {
			t.Fatal(err)
		}
	}
	// The dead leader's log: batches 1 and 2 acknowledged, 3 lost, 4 and
	// 5 orphans.
	put(1, 0, 1)
	put(2, 2)
	put(4, 10)
	put(5, 11)
	replica := func() *replication {
		s, err := NewServer(Options{Config: DefaultConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.EnableOplog()
		return s.rep
	}
	position := func(r *replication) (uint64, uint64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.lastSeq, r.nextN
	}
	// A replica that reads the log (a promotion does) stops at the gap.
	next := replica()
	if _, err := next.catchUp(ctx, cli, prefix); err != nil {
		t.Fatalf("catch up over a gap: %v", err)
	}
	if seq, n := position(next); seq != 2 || n != 3 {
		t.Fatalf("after reading the log: batch %d, entry %d; want 2, 3 (nothing past the gap)", seq, n)
	}
	if next.resets.Load() != 0 {
		t.Fatal("a gap was taken for the log's compaction")
	}
	// A standby that follows the log stops there too.
	standby := replica()
	stop := standby.startTail(cli, prefix, time.Hour)
	defer stop()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batch 2", func() bool {
		seq, _ := position(standby)
		return seq == 2
	})

	// The next leader writes at the gap; the orphans go.
	view, err := cli.Put(ctx, "view", "next")
	if err != nil {
		t.Fatal(err)
	}
	w := newOplogWriter(cli, prefix, "view", view.Header.Revision, 2, 100, 4, 5*time.Second, func(error) {})
	defer w.close()
	for n := uint64(3); n < 6; n++ {
		if err := w.append(&entry{kind: entryEvictTick, n: n, now: time.Now()}).wait(ctx); err != nil {
			t.Fatalf("entry %d: %v", n, err)
		}
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for i, kv := range resp.Kvs {
		b, err := decodeBatch(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.entries {
			if e.n >= 10 {
				t.Fatalf("orphan entry %d still in batch %s", e.n, kv.Key)
			}
		}
		if seq, _ := oplogSeq(prefix, string(kv.Key)); seq != uint64(i+1) {
			t.Fatalf("batch %d at position %d", seq, i)
		}
	}
	wantSeq := w.appliedSeqForTest()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply the new leader's batches", func() bool {
		seq, _ := position(standby)
		return seq == wantSeq
	})
	if _, n := position(standby); n != 6 {
		t.Fatalf("standby at entry %d, want 6: it applied an orphan or missed a batch", n)
	}
}

// TestOplogPipelinedWriterFencedMidStream runs many appenders against a
// writer with batches in flight and takes the election key away in the
// middle, as a successor does after the leader's kill -9: the log in
// etcd up to its first gap holds every entry at most once and in order
// and every acknowledged entry; the acknowledged entries are a prefix of
// it whose onDurable ran in log order; and the successor's first batch
// removes the orphans after the gap.
func TestOplogPipelinedWriterFencedMidStream(t *testing.T) {
	cli := etcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 3, 8, 5*time.Second, func(err error) { failed <- err })
	defer w.close()

	const appenders, each = 16, 60
	var order sync.Mutex // the replication order lock: numbers go in log order
	var next uint64
	var durableMu sync.Mutex
	var durable []uint64 // entry numbers in the order onDurable ran
	acked := make([]atomic.Bool, appenders*each)
	var wg sync.WaitGroup
	var fenceOnce sync.Once
	var appended atomic.Int64
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				order.Lock()
				n := next
				next++
				e := &entry{kind: entryClientTick, n: n, now: time.Now(), onDurable: func() {
					durableMu.Lock()
					durable = append(durable, n)
					durableMu.Unlock()
				}}
				t := w.append(e)
				order.Unlock()
				if appended.Add(1) == appenders*each/2 {
					// A successor takes the key while batches are in flight.
					fenceOnce.Do(func() {
						if _, err := cli.Delete(ctx, "view"); err == nil {
							_, _ = cli.Put(ctx, "view", "b")
						}
					})
				}
				if t.wait(ctx) == nil {
					acked[n].Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if err := <-failed; !errors.Is(err, errFenced) {
		t.Fatalf("onFail: %v", err)
	}

	// What a successor applies: the log up to its first gap.
	resp, err := cli.Get(ctx, "log/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var logged []uint64
	var prefixEnd uint64
	for i, kv := range resp.Kvs {
		seq, ok := oplogSeq("log/", string(kv.Key))
		if !ok || seq != uint64(i+1) {
			break // a gap: the batches after it are orphans
		}
		prefixEnd = seq
		b, err := decodeBatch(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.entries {
			logged = append(logged, e.n)
		}
	}
	for i, n := range logged {
		if n != uint64(i) {
			t.Fatalf("entry %d of the log is number %d: out of order or twice", i, n)
		}
	}
	nAcked := 0
	for n := range acked {
		if acked[n].Load() {
			nAcked++
			if n >= len(logged) {
				t.Fatalf("entry %d was acknowledged but is not in the log up to its first gap (%d entries)", n, len(logged))
			}
		}
	}
	for n := 0; n < nAcked; n++ {
		if !acked[n].Load() {
			t.Fatalf("entry %d not acknowledged but a later one was: acknowledged out of order", n)
		}
	}
	if nAcked == 0 || nAcked == appenders*each {
		t.Fatalf("%d of %d entries acknowledged: the key never changed hands mid-stream", nAcked, appenders*each)
	}
	durableMu.Lock()
	defer durableMu.Unlock()
	if want := logged[:nAcked]; !reflect.DeepEqual(durable, want) {
		t.Fatalf("onDurable ran for %v, want the acknowledged entries %v in order", durable, want)
	}
	// The successor's first batch lands at the gap and clears the rest.
	view2, err := cli.Get(ctx, "view")
	if err != nil || len(view2.Kvs) != 1 {
		t.Fatalf("view key: %v %v", view2, err)
	}
	w2 := newOplogWriter(cli, "log/", "view", view2.Kvs[0].CreateRevision, prefixEnd, 10, 8, 5*time.Second, func(error) {})
	defer w2.close()
	if err := w2.append(&entry{kind: entryClientTick, n: uint64(len(logged)), now: time.Now()}).wait(ctx); err != nil {
		t.Fatalf("the successor's first batch: %v", err)
	}
	after, err := cli.Get(ctx, "log/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got := uint64(len(after.Kvs)); got != prefixEnd+1 {
		t.Fatalf("%d batches after the successor's first, want %d: orphans left", got, prefixEnd+1)
	}
}

// TestOplogStandbyRestoredWhileTheLeaderWrites starts a standby from a
// snapshot while the leader keeps taking puts: the standby catches up to
// the same state, and after the leader's death serves every acknowledged
// object.
func TestOplogStandbyRestoredWhileTheLeaderWrites(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := etcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const cluster = "restore-busy"
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	snapCfg := &SnapshotConfig{Enable: true, Interval: time.Hour, Retention: 1, Restore: true, Dir: t.TempDir()}
	start := func() *Service {
		svc, err := StartService(ServiceConfig{
			RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg}, Logger: quiet,
			HA: &HAConfig{Endpoints: []string{ep}, ClusterID: cluster, Oplog: true,
				OplogPollInterval: 200 * time.Millisecond, Snapshot: snapCfg},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Close)
		return svc
	}
	dial := func(svc *Service) masterpb.MasterClient {
		conn, err := grpc.NewClient(svc.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return masterpb.NewMasterClient(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	ca := dial(a)
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 64 << 20, TeEndpoint: "seg0"}
	if r, err := ca.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	var mu sync.Mutex
	var acked []string
	put := func(key string) error {
		r, err := ca.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 256,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil || r.ErrorCode != 0 {
			return fmt.Errorf("put start %s: %v %v", key, r, err)
		}
		e, err := ca.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		if err != nil || e.ErrorCode != 0 {
			return fmt.Errorf("put end %s: %v %v", key, e, err)
		}
		mu.Lock()
		acked = append(acked, key)
		mu.Unlock()
		return nil
	}
	for i := 0; i < 100; i++ {
		if err := put(fmt.Sprintf("before%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if seq, err := a.Server.rep.takeSnapshot(ctx, cli, OplogPrefix(cluster)); err != nil || seq == 0 {
		t.Fatalf("snapshot: %d %v", seq, err)
	}
	// Writers keep going while the standby restores and catches up.
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for wr := 0; wr < 4; wr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := put(fmt.Sprintf("during%d-%04d", wr, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	b := start()
	testutil.WaitUntil(t, 30*time.Second, "the standby to restore and follow the log", func() bool {
		return b.Server.rep.appliedSeq() > a.Server.rep.snap.last+20
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testutil.WaitUntil(t, 20*time.Second, "the standby to apply the whole log", func() bool {
		return b.Server.rep.appliedSeq() == a.Server.rep.appliedSeq()
	})
	if r, err := cli.Get(ctx, oplogKey(OplogPrefix(cluster), 1)); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("batch 1 still in etcd (%v %v): the standby need not have started from the snapshot", r, err)
	}
	if m, want := adminGet(t, b.Server, "/metrics"), fmt.Sprintf("\nmaster_oplog_applied_batch %d\n", a.Server.rep.appliedSeq()); !strings.Contains(m, want) {
		t.Fatalf("/metrics of the standby lacks %q", want)
	}
	if want, got := dumpState(a.Server), dumpState(b.Server); !reflect.DeepEqual(got, want) {
		t.Fatalf("standby state differs from the leader's:\nleader  %+v\nstandby %+v", want, got)
	}
	a.Close()
	testutil.WaitUntil(t, 20*time.Second, "b to lead", b.Server.IsLeader)
	cb := dial(b)
	for _, k := range acked {
		r, err := cb.ExistKey(ctx, &masterpb.KeyRequest{Key: k})
		if err != nil || !r.GetExists() {
			t.Fatalf("acknowledged %s missing on the new leader: %v %v", k, r, err)
		}
	}
}

// TestOplogStandbyClosesAGapWhoseBatchesLandedOutOfOrder: a standby that
// starts while batch 2 is missing and batch 4 landed before batch 3
// applies 2, 3 and 4 once 2 lands, without waiting for its periodic read
// of the log.
func TestOplogStandbyClosesAGapWhoseBatchesLandedOutOfOrder(t *testing.T) {
	cli := etcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	const prefix = "log/"
	put := func(seq uint64) {
		t.Helper()
		enc := appendEntry(nil, &entry{kind: entryEvictTick, n: seq - 1, now: time.Now()})
		if _, err := cli.Put(ctx, oplogKey(prefix, seq), string(encodeBatch(seq, 1, enc))); err != nil {
			t.Fatal(err)
		}
	}
	put(1)
	put(4)
	put(3)
	s, err := NewServer(Options{Config: DefaultConfig(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.EnableOplog()
	stop := s.rep.startTail(cli, prefix, time.Hour)
	defer stop()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batch 1", func() bool { return s.rep.appliedSeq() == 1 })
	put(2)
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batches 2 to 4", func() bool { return s.rep.appliedSeq() == 4 })
}
