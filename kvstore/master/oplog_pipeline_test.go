package master

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// TestOplogStandbyRestoredWhileTheLeaderWrites starts a standby from a
// snapshot while the leader keeps taking puts: the standby catches up to
// the same state, and after the leader's death serves every acknowledged
// object.
func TestOplogStandbyRestoredWhileTheLeaderWrites(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const cluster = "restore-busy"
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	snapCfg := &replication.SnapshotConfig{Enable: true, Interval: time.Hour, Retention: 1, Restore: true, Dir: t.TempDir()}
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: cluster, Snapshot: snapCfg}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	ca := dialMaster(t, a)
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
	snapSeq, err := a.Server.rep.log.TakeSnapshot(ctx, cli, replication.OplogPrefix(cluster))
	if err != nil || snapSeq == 0 {
		t.Fatalf("snapshot: %d %v", snapSeq, err)
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
		return b.Server.rep.log.AppliedSeq() > snapSeq+20
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testutil.WaitUntil(t, 20*time.Second, "the standby to apply the whole log", func() bool {
		return b.Server.rep.log.AppliedSeq() == a.Server.rep.log.AppliedSeq()
	})
	if r, err := cli.Get(ctx, replication.BatchKey(replication.OplogPrefix(cluster), 1)); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("batch 1 still in etcd (%v %v): the standby need not have started from the snapshot", r, err)
	}
	if m, want := adminGet(t, b.Server, "/metrics"), fmt.Sprintf("\nmaster_oplog_applied_batch %d\n", a.Server.rep.log.AppliedSeq()); !strings.Contains(m, want) {
		t.Fatalf("/metrics of the standby lacks %q", want)
	}
	if want, got := dumpState(a.Server), dumpState(b.Server); !reflect.DeepEqual(got, want) {
		t.Fatalf("standby state differs from the leader's:\nleader  %+v\nstandby %+v", want, got)
	}
	a.Close()
	testutil.WaitUntil(t, 20*time.Second, "b to lead", b.Server.IsLeader)
	cb := dialMaster(t, b)
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
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	const prefix = "log/"
	put := func(seq uint64) {
		t.Helper()
		enc := replication.AppendEntry(nil, &replication.Entry{Kind: replication.KindEvictTick, N: seq - 1, Now: time.Now()})
		if _, err := cli.Put(ctx, replication.BatchKey(prefix, seq), string(replication.EncodeBatch(seq, 1, enc))); err != nil {
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
	stop := s.rep.log.StartTail(cli, prefix, time.Hour)
	defer stop()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batch 1", func() bool { return s.rep.log.AppliedSeq() == 1 })
	put(2)
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batches 2 to 4", func() bool { return s.rep.log.AppliedSeq() == 4 })
}
