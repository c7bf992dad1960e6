package replication

import (
	"errors"
	"fmt"
)

// This file is what a master with the oplog reports about its replica:
// whether it is stale (it cannot rebuild the metadata: the log was
// compacted past what it applied and no usable snapshot covers the
// batches gone) and how often it started again from a snapshot. A stale
// master does not stand for election (election.go) and cannot be promoted
// (promote's catchUp fails), so it never serves a state it knows is
// incomplete.

// noteStale records the outcome of a catch-up: ErrSnapshotNeeded makes
// the replica stale, success makes it current; other errors (etcd
// unreachable) leave the verdict as it was.
func (l *Log) noteStale(err error) {
	switch {
	case err == nil:
		l.stale.Store(nil)
	case errors.Is(err, ErrSnapshotNeeded):
		msg := err.Error()
		l.stale.Store(&msg)
	}
}

// StaleReason is why the replica cannot be rebuilt, "" when it can.
func (l *Log) StaleReason() string {
	if p := l.stale.Load(); p != nil {
		return *p
	}
	return ""
}

// mayLead fails while the replica is stale.
func (l *Log) mayLead() error {
	if why := l.StaleReason(); why != "" {
		return fmt.Errorf("this master cannot rebuild the metadata: %s", why)
	}
	return nil
}
