package master

import (
	"errors"
	"fmt"
	"io"
)

// This file is what a master with the oplog reports about its replica:
// whether it is stale (it cannot rebuild the metadata: the log was
// compacted past what it applied and no usable snapshot covers the
// batches gone) and how often it started again from a snapshot. A stale
// master does not stand for election (ha.go) and cannot be promoted
// (promote's catchUp fails), so it never serves a state it knows is
// incomplete.

// noteStale records the outcome of a catch-up: ErrSnapshotNeeded makes
// the replica stale, success makes it current; other errors (etcd
// unreachable) leave the verdict as it was.
func (r *replication) noteStale(err error) {
	switch {
	case err == nil:
		r.stale.Store(nil)
	case errors.Is(err, ErrSnapshotNeeded):
		msg := err.Error()
		r.stale.Store(&msg)
	}
}

// staleReason is why the replica cannot be rebuilt, "" when it can.
func (r *replication) staleReason() string {
	if p := r.stale.Load(); p != nil {
		return *p
	}
	return ""
}

// mayLead fails while the replica is stale.
func (r *replication) mayLead() error {
	if why := r.staleReason(); why != "" {
		return fmt.Errorf("this master cannot rebuild the metadata: %s", why)
	}
	return nil
}

// writeOplogMetrics adds the oplog's gauges to /metrics (nothing
// without the oplog).
func (s *Server) writeOplogMetrics(w io.Writer) {
	if s.rep == nil {
		return
	}
	stale := 0
	if s.rep.staleReason() != "" {
		stale = 1
	}
	fmt.Fprintf(w, "# HELP master_oplog_stale Whether this master cannot rebuild the metadata (the oplog was compacted past what it applied and no usable snapshot covers it).\n"+
		"# TYPE master_oplog_stale gauge\nmaster_oplog_stale %d\n", stale)
	fmt.Fprintf(w, "# HELP master_oplog_snapshot_resets_total Times this standby fell behind the oplog's compaction and started again from a snapshot.\n"+
		"# TYPE master_oplog_snapshot_resets_total counter\nmaster_oplog_snapshot_resets_total %d\n", s.rep.resets.Load())
	fmt.Fprintf(w, "# HELP master_oplog_applied_batch The last oplog batch this master applied (standby) or had durable in etcd (leader); a standby's lag is the leader's value minus its own.\n"+
		"# TYPE master_oplog_applied_batch gauge\nmaster_oplog_applied_batch %d\n", s.rep.appliedSeq())
}
