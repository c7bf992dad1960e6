package tcp

import (
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// The direct path: a synchronous transfer of one slice runs on the
// caller's thread over an idle connection of its own, and the reply is
// awaited in poll(2) (internal/pollread), not in Go's netpoller. A lane
// would cost the caller's goroutine, the lane's, the netpoller's wake-up
// and the completion's: three or four hand-offs between threads per call.
//
// Before sleeping in poll(2) the caller polls for the reply for syncSpin
// (MC_TCP_SYNC_SPIN_US): on an idle host, waking a thread whose CPU went
// idle costs about as much as a 4 KiB round trip. Measured with
// te_latency_bench on a quiet 2-CPU host: 4 KiB write/read p50 43-49 µs
// with the spin against 76-87 µs without (upstream's engine: 52-55 µs).

// syncSpin is how long a direct transfer polls for its reply before it
// sleeps.
var syncSpin = time.Duration(envvars.TCPSyncSpinUs.Int(60)) * time.Microsecond

// RunSync runs a job of one slice of host memory to its end on the
// caller's thread and reports true. It reports false, doing nothing, for
// any other job, and while every direct connection (at most one per lane)
// is busy: the engine then submits the job to the lanes. It implements
// transport.SyncRunner.
func (p *peer) RunSync(j *transport.Job) bool {
	if j.Length > SliceSize || j.LocalMem.Device {
		return false
	}
	c, st, ok := p.takeDirect(j)
	if !ok {
		return false
	}
	j.Tracker.Start(1)
	for {
		if c == nil {
			j.Tracker.FinishSlice(st, 0)
			return true
		}
		var err error
		st, err = c.do(&slice{j: j, local: j.Local, remote: j.Remote, length: j.Length, trailer: j.Trailer})
		st, keep := p.settle(st)
		p.putDirect(c, keep)
		if keep || !retryable(err, j.Deadline) {
			j.Tracker.FinishSlice(st, j.Length)
			return true
		}
		// The connection stalled (stall.go): again on a fresh one, unless
		// every direct connection is taken meanwhile.
		var free bool
		if c, st, free = p.takeDirect(j); !free {
			j.Tracker.FinishSlice(st, 0)
			return true
		}
	}
}

// takeDirect returns an idle direct connection, or dials one while there
// are fewer than one per lane; ok false when all are busy. A failure is
// nil and the status to report.
func (p *peer) takeDirect(j *transport.Job) (c *wireConn, st transport.Status, ok bool) {
	p.mu.Lock()
	switch n := len(p.idle); {
	case p.directClosed:
		p.mu.Unlock()
		return nil, transport.StatusCanceled, true
	case n > 0:
		c = p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, transport.StatusCompleted, true
	case p.directs >= p.maxLanes:
		p.mu.Unlock()
		return nil, 0, false
	}
	p.directs++ // reserved for the connection being dialled
	p.mu.Unlock()
	if c, st = p.dial(j.Deadline, true); c == nil {
		p.mu.Lock()
		p.directs--
		p.mu.Unlock()
		return nil, st, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.directClosed {
		p.directs--
		c.pr.Stop()
		p.conns.Remove(c.Conn)
		return nil, transport.StatusCanceled, true
	}
	if p.direct == nil {
		p.direct = map[*wireConn]struct{}{}
	}
	p.direct[c] = struct{}{}
	return c, transport.StatusCompleted, true
}

// putDirect keeps a usable connection idle; an unusable one is closed.
func (p *peer) putDirect(c *wireConn, usable bool) {
	p.mu.Lock()
	if usable && !p.directClosed {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	delete(p.direct, c)
	p.directs--
	p.mu.Unlock()
	c.pr.Stop()
	p.conns.Remove(c.Conn)
}

// stopDirect makes every direct connection's read end (Close then closes
// them with the lanes' ones: closing a connection waits for a read in
// poll(2) to return) and refuses new direct transfers.
func (p *peer) stopDirect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.directClosed = true
	for c := range p.direct {
		c.pr.Stop()
	}
	p.idle = nil
}
