package replication

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// StateMachine is what the log needs of the state it replicates. The
// log calls it under its order lock, one entry at a time, in log order.
type StateMachine interface {
	// Apply applies entry e: one read from the log, or one the log
	// appends on its own as leader (KindPromote, KindReset).
	Apply(e *Entry)
	// Appending is called as the leader appends an entry it applied; it
	// may set e.OnDurable.
	Appending(e *Entry)
	// Snapshot encodes the whole state as the state after batch seq,
	// whose next entry is nextN.
	Snapshot(seq, nextN uint64) []byte
	// DecodeSnapshot parses a snapshot Snapshot wrote, without
	// installing it.
	DecodeSnapshot(data []byte) (Restored, error)
	// Clear stops serving and empties the state.
	Clear()
	// Serving reports whether the state machine answers calls as the
	// leader.
	Serving() bool
	// Serve starts answering calls as the leader of view; StopServing
	// stops.
	Serve(view uint64)
	StopServing()
}

// Restored is a decoded snapshot: where in the log it was taken, and how
// to make it the state.
type Restored struct {
	// Seq is the last batch the snapshot covers; NextN the number of the
	// first entry after it.
	Seq, NextN uint64
	// Install makes the snapshot the state machine's state.
	Install func()
	// Attrs describe the snapshot in the log line of its restore.
	Attrs []any
}

// Log is a state machine's side of the replicated log: the order lock,
// the entry numbering, the batches applied and, while leader, the
// writer. The elector (election.go) runs the standby's tailer and the
// promotions.
type Log struct {
	sm        StateMachine
	clusterID string
	log       *slog.Logger
	clock     func() time.Time

	// mu is the order lock: one entry is applied at a time, in log order.
	mu      sync.Mutex
	nextN   uint64 // number of the next entry
	lastSeq uint64 // last batch applied; a leader's writer counts its own (AppliedSeq)
	w       *oplogWriter
	// snap takes and restores snapshots (snapshot.go); nil without them.
	snap *snapshots
	// stale is why the replica cannot be rebuilt, nil when it can
	// (stale.go); resets counts its restarts from a snapshot after
	// falling behind the log's compaction.
	stale  atomic.Pointer[string]
	resets atomic.Uint64
	// pieces holds the pieces applied so far of entry piecesN, logged
	// in pieces (KindPiece).
	pieces  []byte
	piecesN uint64
}

// New returns the log of sm for cluster clusterID; clock gives the
// times of the entries the log appends on its own.
func New(sm StateMachine, clusterID string, log *slog.Logger, clock func() time.Time) *Log {
	return &Log{sm: sm, clusterID: clusterID, log: log, clock: clock}
}

// Tx is the order lock held by the leader (Do): entries appended
// through it are logged in the order they are applied.
type Tx struct{ l *Log }

// Next is the number the next appended entry gets.
func (tx Tx) Next() uint64 { return tx.l.nextN }

// Append logs entry e, numbered Next and applied already, and returns
// the ticket of its batch.
func (tx Tx) Append(e *Entry) *Ticket { return tx.l.appendLocked(e) }

// Do runs f with the order lock held when this master leads (its writer
// runs and the state machine serves), and reports whether it did.
func (l *Log) Do(f func(tx Tx)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil || !l.sm.Serving() {
		return false
	}
	f(Tx{l})
	return true
}

// appendLocked numbers past e and hands it to the writer (l.mu held).
func (l *Log) appendLocked(e *Entry) *Ticket {
	l.nextN++
	l.sm.Appending(e)
	return l.w.append(e)
}

// logLocked appends an entry of the log's own (a promotion, a reset),
// applying it first (l.mu held, the writer set).
func (l *Log) logLocked(kind Kind, name string) *Ticket {
	e := &Entry{Kind: kind, N: l.nextN, Now: l.clock().Round(0), Name: name}
	l.sm.Apply(e)
	return l.appendLocked(e)
}

// AppliedSeq is the last batch applied (standby) or durable (leader).
func (l *Log) AppliedSeq() uint64 {
	l.mu.Lock()
	w, seq := l.w, l.lastSeq
	l.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.seq
	}
	return seq
}

// Resets counts the times this standby fell behind the log's compaction
// and started again from a snapshot.
func (l *Log) Resets() uint64 { return l.resets.Load() }
