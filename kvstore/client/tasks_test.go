package client

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// waitTask polls a task until it is final.
func waitTask(t *testing.T, c *Client, id TaskID) *pb.QueryTaskResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		q, err := c.QueryTask(id)
		if err != nil {
			t.Fatal(err)
		}
		if q.Status == pb.TaskStatus_TASK_SUCCESS || q.Status == pb.TaskStatus_TASK_FAILED {
			return q
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("task did not finish")
	return nil
}

func TestCopyAndMoveTasks(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	a := newClient(t, rpc, meta, 16<<20, 4<<20)
	b := newClient(t, rpc, meta, 16<<20, 4<<20)
	src := fillPattern(buf(t, 5000), 3)
	cfg := DefaultReplicateConfig()
	cfg.PreferredSegment = a.Hostname()
	if err := a.Put("k", part(src), cfg, PutOptions{ZeroCopy: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCopyTask("missing", []string{b.Hostname()}); !errors.Is(err, kvstore.ObjectNotFound) {
		t.Fatalf("copy of a missing key: %v", err)
	}
	if _, err := a.QueryTask(TaskID{1, 2}); !errors.Is(err, kvstore.TaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	id, err := b.CreateCopyTask("k", []string{b.Hostname()})
	if err != nil {
		t.Fatal(err)
	}
	if q := waitTask(t, b, id); q.Status != pb.TaskStatus_TASK_SUCCESS || q.AssignedClient != a.Hostname() {
		t.Fatalf("copy task: %v", q)
	}
	if n := len(b.ReplicaLists([]string{"k"})[0].Replicas); n != 2 {
		t.Fatalf("replicas after copy: %d", n)
	}
	// Move a's replica to b (which holds one already): a's goes.
	id, err = a.CreateMoveTask("k", a.Hostname(), b.Hostname())
	if err != nil {
		t.Fatal(err)
	}
	waitTask(t, a, id)
	reps := a.ReplicaLists([]string{"k"})[0].Replicas
	if len(reps) != 1 || reps[0].SegmentName != b.Hostname() {
		t.Fatalf("replicas after move: %v", reps)
	}
	a.Close() // the remaining replica is b's copy
	dst := buf(t, 5000)
	if r := b.GetInto("k", part(dst), true); r.Err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("read of the copy: %+v", r)
	}
}
