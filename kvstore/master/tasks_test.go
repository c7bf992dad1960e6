package master

import (
	"runtime"
	"testing"
	"time"
	"weak"

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

// TestFinishedTaskDoesNotKeepItsRemovedObject: a finished copy task,
// kept for a while after it ends, does not keep the object it copied
// from alive once that object is removed (its source replica may be the
// one kept inside the object's record).
func TestFinishedTaskDoesNotKeepItsRemovedObject(t *testing.T) {
	st := newTestState(t, nil)
	t0 := time.Unix(100, 0)
	mustMount(t, st, "a", Segment{ID: "sa", Name: "na", Base: 1 << 30, Size: 1 << 20}, t0)
	mustMount(t, st, "b", Segment{ID: "sb", Name: "nb", Base: 2 << 30, Size: 1 << 20}, t0)
	mustPut(t, st, "k", 4096, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"sa"}}, t0)
	w := weak.Make(st.objects.get("k"))
	id, code := st.CreateCopyTask("k", []string{"sb"}, t0)
	if code != kvstore.OK {
		t.Fatal(code)
	}
	st.FetchTasks("a", t0)
	if code := st.CompleteTask("a", id, true, "", t0); code != kvstore.OK {
		t.Fatal(code)
	}
	if code := st.Remove("k", true, t0); code != kvstore.OK {
		t.Fatal(code)
	}
	st.leases.es = nil // the lease index lets go of removed objects at its own compaction
	runtime.GC()
	runtime.GC()
	if w.Value() != nil {
		t.Fatalf("the removed object is still reachable: finished task %v holds it", id)
	}
	runtime.KeepAlive(st)
}
