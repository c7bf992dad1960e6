package replication

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// recorder is a StateMachine for the log's own tests: its state is the
// entries applied, in order; a snapshot is their count.
type recorder struct {
	mu      sync.Mutex
	applied []Entry
	serving atomic.Bool
}

func (r *recorder) Apply(e *Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, *e)
}

func (r *recorder) Appending(*Entry) {}

func (r *recorder) Snapshot(seq, nextN uint64) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := binary.AppendUvarint(nil, seq)
	b = binary.AppendUvarint(b, nextN)
	return binary.AppendUvarint(b, uint64(len(r.applied)))
}

func (r *recorder) DecodeSnapshot(data []byte) (Restored, error) {
	d := &Decoder{B: data}
	seq, nextN, n := d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err != nil {
		return Restored{}, errors.New("recorder: bad snapshot")
	}
	return Restored{Seq: seq, NextN: nextN, Install: func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.applied = make([]Entry, n)
	}}, nil
}

func (r *recorder) Clear() {
	r.serving.Store(false)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = nil
}

func (r *recorder) Serving() bool { return r.serving.Load() }
func (r *recorder) Serve(uint64)  { r.serving.Store(true) }
func (r *recorder) StopServing()  { r.serving.Store(false) }
func (r *recorder) entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Entry(nil), r.applied...)
}

// newTestLog is the log of a fresh recorder.
func newTestLog() (*Log, *recorder) {
	sm := &recorder{}
	return New(sm, "test", slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now), sm
}

// position is the last batch applied and the next entry's number.
func (l *Log) position() (uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq, l.nextN
}
