package master

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// TaskLimits bound the copy and move task queue, with upstream's task
// manager flags and defaults.
type TaskLimits struct {
	// MaxPending is how many tasks may wait for their client at once; a
	// task created beyond it is refused with TASK_PENDING_LIMIT_EXCEEDED
	// (--max_total_pending_tasks, 10000).
	MaxPending int
	// MaxProcessing is how many tasks may be out with their clients at
	// once; past it a Ping hands out no further pending task
	// (--max_total_processing_tasks, 10000).
	MaxProcessing int
	// MaxFinished is how many finished tasks stay queryable; the oldest
	// beyond it are forgotten (--max_total_finished_tasks, 10000).
	MaxFinished int
	// PendingTimeout fails a task still pending this long after its
	// creation, 0 never (--pending_task_timeout_sec, 300 s).
	PendingTimeout time.Duration
	// ProcessingTimeout fails a task still unreported this long after it
	// was first handed out, 0 never (--processing_task_timeout_sec, 300 s).
	ProcessingTimeout time.Duration
	// MaxRetryAttempts is how many times a task handed out and left
	// unreported for a minute is handed out again; at the next due
	// hand-out after that it fails (--max_retry_attempts, 10).
	MaxRetryAttempts int
}

// DefaultTaskLimits returns upstream's defaults.
func DefaultTaskLimits() TaskLimits {
	return TaskLimits{MaxPending: 10000, MaxProcessing: 10000, MaxFinished: 10000,
		PendingTimeout: 300 * time.Second, ProcessingTimeout: 300 * time.Second, MaxRetryAttempts: 10}
}

func (l TaskLimits) validate() error {
	switch {
	case l.MaxPending < 0 || l.MaxProcessing < 0 || l.MaxFinished < 0 || l.MaxRetryAttempts < 0:
		return fmt.Errorf("task limits (max_total_*_tasks, max_retry_attempts) must not be negative")
	case l.PendingTimeout < 0 || l.ProcessingTimeout < 0:
		return fmt.Errorf("task timeouts must not be negative")
	}
	return nil
}

// countTasks counts the tasks in status st.
func (s *State) countTasks(st TaskStatus) int {
	n := 0
	for _, t := range s.tasks {
		if t.status == st {
			n++
		}
	}
	return n
}

// expireTasks fails the pending tasks older than PendingTimeout, the
// processing ones handed out longer than ProcessingTimeout ago, and those
// due to be handed out again that are out of retries (MaxRetryAttempts).
func (s *State) expireTasks(now time.Time) {
	l := s.cfg.Tasks
	for _, id := range s.sortedTaskIDs() {
		t := s.tasks[id]
		switch {
		case t.status == TaskPending && l.PendingTimeout > 0 && now.Sub(t.created) > l.PendingTimeout:
			s.finishTask(t, false, "pending timeout", now)
		case t.status == TaskProcessing && l.ProcessingTimeout > 0 && now.Sub(t.updated) > l.ProcessingTimeout:
			s.finishTask(t, false, "processing timeout", now)
		case t.status == TaskProcessing && now.Sub(t.sent) >= taskRedeliverAfter && t.deliveries > l.MaxRetryAttempts:
			s.finishTask(t, false, fmt.Sprintf("handed out %d times without a report (max retries reached: %d)", t.deliveries, l.MaxRetryAttempts), now)
		}
	}
}

// capFinishedTasks forgets the finished tasks beyond MaxFinished, those
// finished first.
func (s *State) capFinishedTasks() {
	var done []*task
	for _, t := range s.tasks {
		if t.final() {
			done = append(done, t)
		}
	}
	if len(done) <= s.cfg.Tasks.MaxFinished {
		return
	}
	slices.SortFunc(done, func(a, b *task) int {
		return cmp.Or(a.updated.Compare(b.updated), cmp.Compare(a.id.Hi, b.id.Hi), cmp.Compare(a.id.Lo, b.id.Lo))
	})
	for _, t := range done[:len(done)-s.cfg.Tasks.MaxFinished] {
		delete(s.tasks, t.id)
	}
}

// sortedTaskIDs returns the task ids in order, so that every replica of
// the log changes tasks in the same order.
func (s *State) sortedTaskIDs() []TaskID {
	ids := make([]TaskID, 0, len(s.tasks))
	for id := range s.tasks {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b TaskID) int { return cmp.Or(cmp.Compare(a.Hi, b.Hi), cmp.Compare(a.Lo, b.Lo)) })
	return ids
}
