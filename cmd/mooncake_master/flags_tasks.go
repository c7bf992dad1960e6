package main

import (
	"flag"
	"fmt"
)

// declareTaskFlags declares upstream's task manager flags into fs: the
// limits of the copy and move task queue (o.cfg.Tasks).
func declareTaskFlags(fs *flag.FlagSet, o *options) {
	l := &o.cfg.Tasks
	fs.IntVar(&l.MaxPending, "max_total_pending_tasks", l.MaxPending, "copy and move tasks waiting for their client at most; a task created beyond is refused with TASK_PENDING_LIMIT_EXCEEDED (-1401)")
	fs.IntVar(&l.MaxProcessing, "max_total_processing_tasks", l.MaxProcessing, "tasks out with their clients at most; past it pings hand out no pending task")
	fs.IntVar(&l.MaxFinished, "max_total_finished_tasks", l.MaxFinished, "finished tasks kept queryable; the oldest beyond are forgotten")
	fs.Var(secDuration{&l.PendingTimeout}, "pending_task_timeout_sec", "seconds a task may wait for its client before it fails (0: never)")
	fs.Var(secDuration{&l.ProcessingTimeout}, "processing_task_timeout_sec", "seconds a task handed out may go unreported before it fails (0: never)")
	fs.IntVar(&l.MaxRetryAttempts, "max_retry_attempts", l.MaxRetryAttempts, "times a task handed out and unreported for a minute is handed out again; then it fails")
}

// checkTaskFlags refuses negative task limits (upstream's are unsigned).
func checkTaskFlags(o *options) error {
	l := o.cfg.Tasks
	for _, f := range []struct {
		name string
		v    int
	}{{"max_total_pending_tasks", l.MaxPending}, {"max_total_processing_tasks", l.MaxProcessing},
		{"max_total_finished_tasks", l.MaxFinished}, {"max_retry_attempts", l.MaxRetryAttempts}} {
		if f.v < 0 {
			return fmt.Errorf("--%s=%d: want 0 or a positive number", f.name, f.v)
		}
	}
	return nil
}
