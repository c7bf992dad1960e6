package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// TestOplogEtcdFull runs a leader and a standby on an etcd with a small
// --quota-backend-bytes and fills etcd: a put then fails with an error
// that says etcd is out of space and what to do; once an operator frees
// the space (deletes, compaction, defragmentation, alarm disarm) a
// master leads again by itself, serves every acknowledged object and
// takes new puts.
func TestOplogEtcdFull(t *testing.T) {
	ep := testutil.StartEtcd(t, "--quota-backend-bytes=16777216")
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const cluster = "full"
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	start := func() *Service {
		return startOplogService(t, ServiceConfig{Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: cluster, OplogRetryTimeout: 30 * time.Second}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a := start()
	testutil.WaitUntil(t, 20*time.Second, "a to lead", a.Server.IsLeader)
	b := start()
	ca := dialMaster(t, a)
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 64 << 20, TeEndpoint: "seg0"}
	if r, err := ca.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("remount: %v %v", r, err)
	}
	put := func(c masterpb.MasterClient, key string) error {
		r, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 256,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil {
			return err
		}
		if r.ErrorCode != 0 {
			return fmt.Errorf("put start %s: code %d", key, r.ErrorCode)
		}
		e, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		if err != nil {
			return err
		}
		if e.ErrorCode != 0 {
			return fmt.Errorf("put end %s: code %d", key, e.ErrorCode)
		}
		return nil
	}
	var acked []string
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("k%03d", i)
		if err := put(ca, k); err != nil {
			t.Fatal(err)
		}
		acked = append(acked, k)
	}

	// Something else fills etcd up to its quota.
	junk := strings.Repeat("x", 512<<10)
	var filled int
	for ; ; filled++ {
		_, err := cli.Put(ctx, fmt.Sprintf("junk/%04d", filled), junk)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("filling etcd: %v", err)
		}
		if filled > 200 {
			t.Fatal("etcd took 100 MiB under a 16 MiB quota")
		}
	}

	// A put now fails, saying why.
	err := put(ca, "refused")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "etcd is out of space") ||
		!strings.Contains(err.Error(), "alarm disarm") {
		t.Fatalf("put with etcd full: %v, want Unavailable naming etcd's lack of space and the way out", err)
	}
	testutil.WaitUntil(t, 20*time.Second, "the leader to step down", func() bool { return !a.Server.IsLeader() })

	// The operator frees space: drop the junk, compact, defragment,
	// disarm the alarm.
	del, err := cli.Delete(ctx, "junk/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, ep); err != nil {
		t.Fatal(err)
	}
	alarms, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range alarms.Alarms {
		if m.Alarm != etcdserverpb.AlarmType_NOSPACE {
			continue
		}
		if _, err := cli.AlarmDisarm(ctx, (*clientv3.AlarmMember)(m)); err != nil {
			t.Fatal(err)
		}
	}

	var leader *Service
	testutil.WaitUntil(t, 30*time.Second, "a master to lead again", func() bool {
		for _, s := range []*Service{a, b} {
			if s.Server.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	cl := dialMaster(t, leader)
	for _, k := range acked {
		r, err := cl.ExistKey(ctx, &masterpb.KeyRequest{Key: k})
		if err != nil || !r.GetExists() {
			t.Fatalf("acknowledged %s missing after etcd was full: %v %v", k, r, err)
		}
	}
	if err := put(cl, "after"); err != nil {
		t.Fatalf("put once space is back: %v", err)
	}
}
