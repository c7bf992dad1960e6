package tcp

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// tracker records a job's outcome.
type tracker struct {
	slices, finished int
	st               transport.Status
	moved            uint64
}

func (r *tracker) Start(n int) { r.slices = n }
func (r *tracker) FinishSlice(st transport.Status, moved uint64) {
	r.finished++
	r.st, r.moved = st, moved
}

// fakeTarget serves v2 requests against mem (guarded by mu), which lives
// at address base of the target, rejecting anything outside it; accepts
// counts the connections it took.
func fakeTarget(t *testing.T, base uint64, mem []byte, mu *sync.Mutex, accepts *atomic.Int32) string {
	t.Helper()
	return testutil.ServeTCP(t, func(c net.Conn) {
		accepts.Add(1)
		var hb [tcpHeaderSize]byte
		for {
			if _, err := io.ReadFull(c, hb[:]); err != nil {
				return
			}
			h, err := decodeTCPHeader(hb[:])
			if err != nil {
				return
			}
			inside := h.addr >= base && h.addr+h.size <= base+uint64(len(mem))
			region := make([]byte, h.size)
			if h.opcode == transport.OpWrite {
				io.ReadFull(c, region)
			}
			mu.Lock()
			switch {
			case inside && h.opcode == transport.OpWrite:
				copy(mem[h.addr-base:], region)
			case inside:
				copy(region, mem[h.addr-base:])
			}
			mu.Unlock()
			code := uint32(statusOK)
			if !inside {
				code = statusRejected
			}
			st := encodeStatus(code)
			c.Write(st[:])
			if inside && h.opcode == transport.OpRead {
				c.Write(region)
			}
		}
	})
}

// Synchronous jobs of one slice run on the caller's thread over one
// connection that they reuse: WRITE, READ and a rejected request (which
// keeps the connection) all complete before RunSync returns, over a
// single accepted connection. A job of several slices is not run that way.
func TestRunSyncReusesOneConnection(t *testing.T) {
	const base = 1 << 30
	mem := make([]byte, 8192)
	var mu sync.Mutex
	var accepts atomic.Int32
	p := newPeer(fakeTarget(t, base, mem, &mu, &accepts), 4, gpu.System(), nil, func() {})
	memAt := func(off, n int) []byte {
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), mem[off:off+n]...)
	}
	defer p.Close()
	local := bytes.Repeat([]byte{7, 1, 3}, 1000)[:2048]
	deadline := time.Now().Add(time.Minute)
	run := func(op transport.Opcode, buf []byte, remote uint64) tracker {
		var r tracker
		j := &transport.Job{Op: op, Local: gpu.AddrOf(buf), Remote: remote, Length: uint64(len(buf)), Deadline: deadline, Tracker: &r}
		if !p.RunSync(j) {
			t.Fatalf("RunSync refused a one-slice %v", op)
		}
		if r.slices != 1 || r.finished != 1 {
			t.Fatalf("%v: Start(%d) and %d slices finished before RunSync returned", op, r.slices, r.finished)
		}
		return r
	}
	if r := run(transport.OpWrite, local, base+100); r.st != transport.StatusCompleted || r.moved != 2048 || !bytes.Equal(memAt(100, 2048), local) {
		t.Fatalf("WRITE: %+v", r)
	}
	back := make([]byte, 2048)
	if r := run(transport.OpRead, back, base+100); r.st != transport.StatusCompleted || !bytes.Equal(back, local) {
		t.Fatalf("READ: %+v", r)
	}
	if r := run(transport.OpWrite, local, base+8000); r.st != transport.StatusFailed {
		t.Fatalf("WRITE past the target's memory: %+v, want FAILED", r)
	}
	if r := run(transport.OpRead, back, base); r.st != transport.StatusCompleted || !bytes.Equal(back, memAt(0, 2048)) {
		t.Fatalf("READ after a rejection: %+v", r)
	}
	if n := accepts.Load(); n != 1 {
		t.Fatalf("%d connections for four sequential jobs, want 1", n)
	}
	big := &transport.Job{Op: transport.OpWrite, Length: SliceSize + 1, Deadline: deadline, Tracker: &tracker{}}
	if p.RunSync(big) {
		t.Fatal("RunSync took a job of two slices")
	}
}

// While every direct connection (one per lane) is busy, RunSync declines,
// so that the job goes to the lanes instead of a connection more.
func TestRunSyncDeclinesWhileAllDirectConnectionsAreBusy(t *testing.T) {
	var mu sync.Mutex
	var accepts atomic.Int32
	p := newPeer(fakeTarget(t, 1<<30, make([]byte, 4096), &mu, &accepts), 1, gpu.System(), nil, func() {})
	defer p.Close()
	buf := make([]byte, 64)
	job := func() *transport.Job {
		return &transport.Job{Op: transport.OpRead, Local: gpu.AddrOf(buf), Remote: 1 << 30, Length: 64, Deadline: time.Now().Add(time.Minute), Tracker: &tracker{}}
	}
	busy, _, ok := p.takeDirect(job())
	if !ok || busy == nil {
		t.Fatal("no direct connection for the first caller")
	}
	if p.RunSync(job()) {
		t.Fatal("RunSync ran a job while the only direct connection was busy")
	}
	p.putDirect(busy, true)
	j := job()
	if !p.RunSync(j) || j.Tracker.(*tracker).st != transport.StatusCompleted {
		t.Fatalf("RunSync with the connection idle again: %+v", j.Tracker)
	}
	if n := accepts.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}
