package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
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

// TestOplogBatchNeverLandsBeforeItsPredecessor: with several batches in
// flight etcd may take them in any order; a batch whose predecessor is
// not in etcd yet is refused, waits for it and lands after it, and fails
// if the predecessor fails, so the log never has a gap.
func TestOplogBatchNeverLandsBeforeItsPredecessor(t *testing.T) {
	cli := etcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	w := &oplogWriter{cli: cli, prefix: "log/", headKey: HeadKey("log/"), viewKey: "view",
		viewRev: view.Header.Revision, retry: 5 * time.Second}
	exists := func(seq uint64) bool {
		t.Helper()
		r, err := cli.Get(ctx, oplogKey("log/", seq))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Kvs) > 0
	}
	val := func(seq uint64) []byte { return encodeBatch(seq, 0, nil) }

	// Batch 2 goes first; batch 1 is still on its way.
	prev := &commitTicket{done: make(chan struct{})}
	second := make(chan error, 1)
	go func() { second <- w.commit(2, val(2), prev) }()
	time.Sleep(100 * time.Millisecond) // let batch 2's transaction reach etcd first
	if exists(2) {
		t.Fatal("batch 2 landed before batch 1")
	}
	if err := w.commit(1, val(1), nil); err != nil {
		t.Fatalf("batch 1: %v", err)
	}
	close(prev.done)
	if err := <-second; err != nil {
		t.Fatalf("batch 2 after batch 1 landed: %v", err)
	}
	if !exists(1) || !exists(2) {
		t.Fatal("batches 1 and 2 are not both in etcd")
	}
	if r, err := cli.Get(ctx, HeadKey("log/")); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("head key: %v %v, want 2", r, err)
	}

	// Batch 4 goes while batch 3 fails: batch 4 fails too, and is not in
	// etcd.
	prev = &commitTicket{done: make(chan struct{})}
	fourth := make(chan error, 1)
	go func() { fourth <- w.commit(4, val(4), prev) }()
	prev.err = errFenced
	close(prev.done)
	if err := <-fourth; !errors.Is(err, errFenced) {
		t.Fatalf("batch 4 after batch 3 failed: %v, want errFenced", err)
	}
	if exists(4) {
		t.Fatal("batch 4 landed though batch 3 never did")
	}
}

// TestOplogPipelinedWriterFencedMidStream runs many appenders against a
// writer with batches in flight and takes the election key away in the
// middle, as a successor does after the leader's kill -9: the log in
// etcd has no gap, holds every entry at most once and in order, holds
// every acknowledged entry, and the acknowledged entries are a prefix
// of the log whose onDurable ran in log order.
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

	resp, err := cli.Get(ctx, "log/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var logged []uint64
	for i, kv := range resp.Kvs {
		seq, ok := oplogSeq("log/", string(kv.Key))
		if !ok || seq != uint64(i+1) {
			t.Fatalf("key %q at position %d: the log has a gap", kv.Key, i)
		}
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
				t.Fatalf("entry %d was acknowledged but is not in the log (%d entries)", n, len(logged))
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
	if want := logged[:nAcked]; !reflect.DeepEqual(durable, want) && !(len(durable) == 0 && len(want) == 0) {
		t.Fatalf("onDurable ran for %v, want the acknowledged entries %v in order", durable, want)
	}
	if r, err := cli.Get(ctx, HeadKey("log/")); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != strconv.Itoa(len(resp.Kvs)) {
		t.Fatalf("head key %v %v, want %d", r, err, len(resp.Kvs))
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
