package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// TaskType is what a replica task does, numbered as upstream's TaskType.
type TaskType int

// Task types.
const (
	TaskReplicaCopy TaskType = 0
	TaskReplicaMove TaskType = 1
)

// TaskStatus is a task's place in its lifecycle, numbered as upstream's
// TaskStatus. SUCCESS and FAILED are final.
type TaskStatus int

// Task statuses.
const (
	TaskPending    TaskStatus = 0 // created, not yet handed to its client
	TaskProcessing TaskStatus = 1 // handed to its client in a Ping answer
	TaskSuccess    TaskStatus = 2
	TaskFailed     TaskStatus = 3
)

// String returns the upstream name of the status.
func (s TaskStatus) String() string {
	return [...]string{"PENDING", "PROCESSING", "SUCCESS", "FAILED"}[s]
}

// String returns the upstream name of the type.
func (t TaskType) String() string { return [...]string{"REPLICA_COPY", "REPLICA_MOVE"}[t] }

// TaskID identifies a task: a UUID as two u64 halves, as upstream's.
type TaskID struct{ Hi, Lo uint64 }

// String prints the id as upstream does, "hi-lo".
func (id TaskID) String() string { return fmt.Sprintf("%d-%d", id.Hi, id.Lo) }

// taskRetention is how long a finished task stays queryable.
const taskRetention = 10 * time.Minute

// taskRedeliverAfter is how long a handed-out task may go unreported
// before the next Ping hands it out again (the Ping answer carrying it may
// have been lost; the client ignores a task it is still running).
const taskRedeliverAfter = time.Minute

// task is a copy or move of one object's replica, executed by the client
// that holds the source replica. The master reserves the target buffers
// when the task is created; they join the object only when the client
// reports success.
type task struct {
	id       TaskID
	typ      TaskType
	status   TaskStatus
	key      string // object key (tenant-qualified)
	size     uint64
	source   *replica   // a COMPLETE replica of the object at creation
	targets  []*replica // reserved PROCESSING buffers, outside the object
	client   string     // the source segment's client, which executes it
	assignee string     // what QueryTask reports as assigned_client
	created  time.Time
	updated  time.Time
	version  uint64    // the object's rewrites count when the task started
	sent     time.Time // when it was last handed out
	message  string
	// deliveries counts the hand-outs (a redelivery past
	// TaskLimits.MaxRetryAttempts fails the task instead).
	deliveries int
}

// TaskAssignment is a task as its executing client receives it: copy Size
// bytes from Source (in one of the client's own segments) to every
// target.
type TaskAssignment struct {
	ID      TaskID
	Type    TaskType
	Size    uint64
	Source  Replica
	Targets []Replica
}

// TaskInfo is upstream's QueryTaskResponse.
type TaskInfo struct {
	ID             TaskID
	Type           TaskType
	Status         TaskStatus
	Created        time.Time
	Updated        time.Time
	AssignedClient string // the executing client's segment name (host:port)
	Message        string
}

// final reports whether the task has finished.
func (t *task) final() bool { return t.status == TaskSuccess || t.status == TaskFailed }

// segmentsNamed returns the mounted segments whose name (or id) is name.
func (s *State) segmentsNamed(name string) []*segment {
	var out []*segment
	for _, sg := range s.segOrder {
		if sg.info.Name == name || sg.info.ID == name {
			out = append(out, sg)
		}
	}
	return out
}

// replicaOn returns o's COMPLETE replica on a segment in segs, or nil.
func replicaOn(o *object, segs []*segment) *replica {
	for _, r := range o.readable() {
		if slices.Contains(segs, r.seg) {
			return r
		}
	}
	return nil
}

// CreateCopyTask starts copying key to the segments named in targets (by
// name or id), executed by the client holding the copy's source replica.
// A target that already holds a replica is skipped; when all do, the task
// is created SUCCESS. Errors: INVALID_PARAMS (no targets, a target not
// mounted), OBJECT_NOT_FOUND (no readable replica), NO_AVAILABLE_HANDLE (a
// target has no room, or is draining).
func (s *State) CreateCopyTask(key string, targets []string, now time.Time) (TaskID, kvstore.ErrorCode) {
	id, code := s.createCopyTask(key, targets, now)
	return id, s.m.result("create_copy_task", code)
}

func (s *State) createCopyTask(key string, targets []string, now time.Time) (TaskID, kvstore.ErrorCode) {
	if len(targets) == 0 {
		return TaskID{}, kvstore.InvalidParams
	}
	o, ok := s.objects.lookup(key)
	if !ok || len(o.readable()) == 0 {
		return TaskID{}, kvstore.ObjectNotFound
	}
	var want [][]*segment
	for _, name := range targets {
		segs := s.segmentsNamed(name)
		if len(segs) == 0 {
			return TaskID{}, kvstore.InvalidParams
		}
		if replicaOn(o, segs) == nil {
			want = append(want, segs)
		}
	}
	return s.newTask(TaskReplicaCopy, o, o.readable()[0], want, now)
}

// CreateMoveTask starts moving key's replica on segment source to segment
// target: the target gets a copy, then the source replica is dropped (its
// buffer kept until the object's read lease ends). If the target already
// holds a replica the source one is dropped at once and the task is
// created SUCCESS. Errors: INVALID_PARAMS (source or target not mounted,
// equal, or no replica on source), OBJECT_NOT_FOUND, NO_AVAILABLE_HANDLE.
func (s *State) CreateMoveTask(key, source, target string, now time.Time) (TaskID, kvstore.ErrorCode) {
	id, code := s.createMoveTask(key, source, target, now)
	return id, s.m.result("create_move_task", code)
}

func (s *State) createMoveTask(key, source, target string, now time.Time) (TaskID, kvstore.ErrorCode) {
	o, ok := s.objects.lookup(key)
	if !ok || len(o.readable()) == 0 {
		return TaskID{}, kvstore.ObjectNotFound
	}
	src, dst := s.segmentsNamed(source), s.segmentsNamed(target)
	if len(src) == 0 || len(dst) == 0 || source == target {
		return TaskID{}, kvstore.InvalidParams
	}
	from := replicaOn(o, src)
	if from == nil || slices.Contains(dst, from.seg) {
		return TaskID{}, kvstore.InvalidParams
	}
	var want [][]*segment
	if replicaOn(o, dst) == nil {
		want = append(want, dst)
	}
	return s.newTask(TaskReplicaMove, o, from, want, now)
}

// newTask reserves one buffer of o's size in each group of segments and
// records the task; with nothing to reserve it finishes it at once.
func (s *State) newTask(typ TaskType, o *object, source *replica, want [][]*segment, now time.Time) (TaskID, kvstore.ErrorCode) {
	if len(want) > 0 && s.countTasks(TaskPending) >= s.cfg.Tasks.MaxPending {
		return TaskID{}, kvstore.TaskPendingLimitExceeded
	}
	t := &task{typ: typ, key: o.key, size: o.size, source: source, client: source.seg.client,
		assignee: source.seg.info.Name, created: now, updated: now, version: o.md().rewrites}
	for _, segs := range want {
		r := s.reserveOn(segs, o.size)
		if r == nil {
			for _, got := range t.targets {
				s.freeReplica(got)
			}
			return TaskID{}, kvstore.NoAvailableHandle
		}
		t.targets = append(t.targets, r)
	}
	t.id = s.newTaskID()
	if s.tasks == nil {
		s.tasks = make(map[TaskID]*task)
	}
	s.tasks[t.id] = t
	if len(t.targets) == 0 {
		s.finishTask(t, true, "nothing to copy: the targets hold a replica already", now)
	}
	return t.id, kvstore.OK
}

// reserveOn allocates size bytes on the first of segs with room that is
// open to new replicas (not draining).
func (s *State) reserveOn(segs []*segment, size uint64) *replica {
	for _, sg := range segs {
		if !sg.open() {
			continue
		}
		if off, ok := s.allocateIn(sg, size); ok {
			s.nextReplica++
			return &replica{id: s.nextReplica, status: ReplicaProcessing, seg: sg, off: off, size: size}
		}
	}
	return nil
}

// newTaskID draws an unused, non-zero id from the state's random source,
// its low half salted per incarnation (taskSalt).
func (s *State) newTaskID() TaskID {
	for s.taskSalt == 0 {
		s.taskSalt = s.ids.Uint64()
	}
	for {
		id := TaskID{s.rng.Uint64(), s.rng.Uint64() ^ s.taskSalt}
		if _, used := s.tasks[id]; !used && id != (TaskID{}) {
			return id
		}
	}
}

// FetchTasks hands clientID the tasks assigned to it that it has not
// received yet (while fewer than TaskLimits.MaxProcessing tasks are out),
// or received more than a minute ago without reporting (at most
// TaskLimits.MaxRetryAttempts times: then the periodic pass fails it);
// they become PROCESSING. The Ping handler calls it. It changes nothing
// but what it hands out: a Ping answer without tasks is not logged.
func (s *State) FetchTasks(clientID string, now time.Time) []TaskAssignment {
	var ids []TaskID
	for id, t := range s.tasks {
		due := t.status == TaskPending || (t.status == TaskProcessing && now.Sub(t.sent) >= taskRedeliverAfter)
		if t.client == clientID && due {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b TaskID) int {
		return cmp.Or(s.tasks[a].created.Compare(s.tasks[b].created), cmp.Compare(a.Hi, b.Hi), cmp.Compare(a.Lo, b.Lo))
	})
	out := make([]TaskAssignment, 0, len(ids))
	processing := s.countTasks(TaskProcessing)
	for _, id := range ids {
		t := s.tasks[id]
		switch {
		case t.status == TaskPending && processing >= s.cfg.Tasks.MaxProcessing:
			continue
		case t.status == TaskPending:
			t.status, t.updated = TaskProcessing, now
			processing++
		case t.deliveries > s.cfg.Tasks.MaxRetryAttempts:
			continue // out of retries: the next periodic pass fails it
		}
		t.sent = now
		t.deliveries++
		out = append(out, TaskAssignment{ID: id, Type: t.typ, Size: t.size, Source: t.source.describe(), Targets: describeAll(t.targets)})
	}
	return out
}

// CompleteTask records the executing client's report. On success the
// target buffers become COMPLETE replicas of the object (and a move drops
// its source replica), provided the object is still the one copied;
// otherwise the task fails and the buffers are freed. Errors:
// TASK_NOT_FOUND, ILLEGAL_CLIENT (not the assigned client),
// UNAVAILABLE_IN_CURRENT_STATUS (the task is final already, e.g. failed
// because a participant died).
func (s *State) CompleteTask(clientID string, id TaskID, ok bool, message string, now time.Time) kvstore.ErrorCode {
	return s.m.result("mark_task_complete", s.completeTask(clientID, id, ok, message, now))
}

func (s *State) completeTask(clientID string, id TaskID, ok bool, message string, now time.Time) kvstore.ErrorCode {
	t, found := s.tasks[id]
	if !found {
		return kvstore.TaskNotFound
	}
	if t.client != clientID {
		return kvstore.IllegalClient
	}
	if t.final() {
		return kvstore.UnavailableInCurrentStatus
	}
	if ok {
		o, live := s.objects.lookup(t.key)
		switch {
		case !live || !slices.Contains(o.replicas, t.source):
			ok, message = false, "the object or its source replica was removed during the task"
		case o.writing || o.md().rewrites != t.version:
			ok, message = false, "the object was rewritten during the task"
		}
	}
	s.finishTask(t, ok, message, now)
	return kvstore.OK
}

// finishTask makes t final. Success publishes its targets (and for a move
// drops the source replica); failure frees them.
func (s *State) finishTask(t *task, ok bool, message string, now time.Time) {
	defer t.detachSource()
	t.updated, t.message = now, message
	if !ok {
		t.status = TaskFailed
		for _, r := range t.targets {
			s.freeReplica(r)
		}
		t.targets = nil
		return
	}
	t.status = TaskSuccess
	o := s.objects.get(t.key)
	for _, r := range t.targets {
		r.status = ReplicaComplete
		o.replicas = append(o.replicas, r)
	}
	t.targets = nil
	if t.typ == TaskReplicaMove {
		if i := slices.Index(o.replicas, t.source); i >= 0 {
			o.replicas = slices.Delete(o.replicas, i, i+1)
			release := now
			if l := o.lease.time(); l.After(now) {
				release = l
			}
			s.discard(t.source, release)
		}
	}
	s.charge(o)
}

// detachSource replaces a finished task's source by a copy of its own:
// the source may be the replica kept inside its object's record, and a
// finished task is kept for a while (MaxFinished), which would keep a
// removed object's whole record alive.
func (t *task) detachSource() {
	if t.source != nil {
		c := *t.source
		t.source = &c
	}
}

// failTasks fails every unfinished task for which drop returns true.
func (s *State) failTasks(drop func(*task) bool, message string, now time.Time) {
	for _, t := range s.tasks {
		if !t.final() && drop(t) {
			s.finishTask(t, false, message, now)
		}
	}
}

// failTasksOnSegment fails unfinished tasks whose source or a target is
// on sg, before sg goes away. Targets on sg are forgotten with it.
func (s *State) failTasksOnSegment(sg *segment, now time.Time) {
	s.failTasks(func(t *task) bool {
		hit := t.source.seg == sg
		kept := t.targets[:0]
		for _, r := range t.targets {
			if r.seg == sg {
				hit = true
			} else {
				kept = append(kept, r)
			}
		}
		t.targets = kept
		return hit
	}, fmt.Sprintf("segment %s was unmounted during the task", sg.info.Name), now)
}

// pruneTasks fails the tasks past their timeouts (TaskLimits), and
// forgets tasks final for longer than taskRetention and the oldest
// finished ones beyond TaskLimits.MaxFinished.
func (s *State) pruneTasks(now time.Time) {
	s.expireTasks(now)
	for id, t := range s.tasks {
		if t.final() && now.Sub(t.updated) > taskRetention {
			delete(s.tasks, id)
		}
	}
	s.capFinishedTasks()
}

// QueryTask returns task id as seen from tenant: a task on another
// tenant's object is TASK_NOT_FOUND, as is an unknown id.
func (s *State) QueryTask(tenant string, id TaskID) (TaskInfo, kvstore.ErrorCode) {
	t, ok := s.tasks[id]
	if ok {
		owner, _ := s.splitKey(t.key)
		ok = owner == tenant
	}
	if !ok {
		return TaskInfo{}, s.m.result("query_task", kvstore.TaskNotFound)
	}
	s.m.result("query_task", kvstore.OK)
	return TaskInfo{ID: t.id, Type: t.typ, Status: t.status, Created: t.created, Updated: t.updated,
		AssignedClient: t.assignee, Message: t.message}, kvstore.OK
}
