package master

import (
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

// TestRestartedMasterDoesNotReuseTaskIds: a master that keeps no log and
// restarts draws the same ids from its seeded source again; the salt of
// the task ids' low half differs, so a report of the last incarnation's
// task (its client may still run it) names no task of the new one.
func TestRestartedMasterDoesNotReuseTaskIds(t *testing.T) {
	firstTask := func(st *State) TaskID {
		t.Helper()
		mustMount(t, st, "c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 20}, epoch)
		mustPut(t, st, "k", 4096, ReplicateConfig{ReplicaNum: 1}, epoch)
		mustMount(t, st, "c2", Segment{ID: "s2", Name: "s2", Base: 4 << 20, Size: 1 << 20}, epoch)
		id, code := st.CreateCopyTask("k", []string{"s2"}, epoch)
		if code != kvstore.OK {
			t.Fatalf("copy task: %v", code)
		}
		return id
	}
	before, after := newTestState(t, nil), newTestState(t, nil)
	old, fresh := firstTask(before), firstTask(after)
	if old == fresh {
		t.Fatalf("both incarnations' first task is %v", old)
	}
	if old.Hi != fresh.Hi {
		t.Errorf("high halves %d and %d: the seeded source should give both the same", old.Hi, fresh.Hi)
	}
	if code := after.CompleteTask("c1", old, true, "", epoch); code != kvstore.TaskNotFound {
		t.Fatalf("report of the last incarnation's task %v = %v, want TASK_NOT_FOUND", old, code)
	}
	if info, code := after.QueryTask(DefaultTenant, fresh); code != kvstore.OK || info.Status != TaskPending {
		t.Fatalf("the new task after the stale report: %+v %v", info, code)
	}
}
