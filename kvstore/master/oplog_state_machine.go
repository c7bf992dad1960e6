package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// This file is what the replicated log (package replication) needs of a
// Server: the state machine it applies entries to and snapshots
// (replication.StateMachine, implemented by the Server's replicator),
// and the node its election switches between leader and standby
// (replication.Node).

// leaderFence is the HA leadership GET /role confirms (role.go).
type leaderFence = replication.Fence

// Apply applies an entry the log delivers (replication.StateMachine).
func (r *replicator) Apply(e *replication.Entry) { r.replay(e) }

// Appending hands the KV events the entry caused to it, to be published
// once it is durable (replication.StateMachine).
func (r *replicator) Appending(e *replication.Entry) { r.releaseEvents(e) }

// Snapshot encodes the state (replication.StateMachine).
func (r *replicator) Snapshot(seq, nextN uint64) []byte {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return encodeSnapshot(r.s.st, seq, nextN)
}

// DecodeSnapshot parses a snapshot into a state that Install makes the
// server's (replication.StateMachine).
func (r *replicator) DecodeSnapshot(data []byte) (replication.Restored, error) {
	st, h, err := decodeSnapshot(data, r.s.opts.Config)
	if err != nil {
		return replication.Restored{}, err
	}
	return replication.Restored{
		Seq: h.seq, NextN: h.nextN,
		Install: func() {
			r.s.mu.Lock()
			r.s.st = st
			r.s.mu.Unlock()
		},
		Attrs: []any{"keys", st.objects.len(), "segments", len(st.segments)},
	}, nil
}

// Clear stops serving and empties the state (replication.StateMachine).
func (r *replicator) Clear() { r.s.SetLeader(false, 0) }

// Serving reports whether the server answers as the leader
// (replication.StateMachine).
func (r *replicator) Serving() bool { return r.s.leader.Load() }

// Serve makes the server answer as the leader of view
// (replication.StateMachine).
func (r *replicator) Serve(view uint64) {
	r.s.view.Store(view)
	r.s.leader.Store(true)
}

// StopServing stops answering as the leader (replication.StateMachine).
func (r *replicator) StopServing() { r.s.leader.Store(false) }

// staleReason is why the replica cannot be rebuilt, "" when it can.
func (r *replicator) staleReason() string { return r.log.StaleReason() }

// resetState replaces the state by an empty one (a reset entry).
func (s *Server) resetState() {
	st, err := NewState(s.opts.Config)
	if err != nil { // Config was validated by NewServer
		return
	}
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
}

// electionNode is a Server as the election drives it (replication.Node).
type electionNode struct{ *Server }

// SetFence records the leadership GET /role confirms.
func (n electionNode) SetFence(f *replication.Fence) { n.fence.Store(f) }

// runElection campaigns for the master view key until ctx ends, switching
// srv between leader and standby (replication.RunElection).
func runElection(ctx context.Context, cfg replication.HAConfig, srv *Server, log *slog.Logger) error {
	var rep *replication.Log
	if srv.rep != nil {
		rep = srv.rep.log
	}
	return replication.RunElection(ctx, cfg, electionNode{srv}, rep, log)
}

// EnableSnapshots gives an oplog-replicated server snapshots in the
// local store (after EnableOplog). It fails when the store cannot be
// opened.
func (s *Server) EnableSnapshots(cfg replication.SnapshotConfig) error {
	if s.rep == nil {
		return errors.New("snapshot: snapshots need the oplog (--enable_oplog)")
	}
	return s.rep.log.EnableSnapshots(cfg)
}

// CheckSnapshotRestore reports replication.ErrSnapshotNeeded (with the
// reason) when srv could not rebuild the cluster's state: the log was
// compacted and no usable snapshot covers it (nil without the oplog).
// StartService calls it so that such a master fails at startup instead
// of standing by forever.
func CheckSnapshotRestore(ctx context.Context, ha replication.HAConfig, srv *Server) error {
	if srv.rep == nil {
		return nil
	}
	return replication.CheckSnapshotRestore(ctx, ha, srv.rep.log)
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
		"# TYPE master_oplog_snapshot_resets_total counter\nmaster_oplog_snapshot_resets_total %d\n", s.rep.log.Resets())
	fmt.Fprintf(w, "# HELP master_oplog_applied_batch The last oplog batch this master applied (standby) or had durable in etcd (leader); a standby's lag is the leader's value minus its own.\n"+
		"# TYPE master_oplog_applied_batch gauge\nmaster_oplog_applied_batch %d\n", s.rep.log.AppliedSeq())
}
