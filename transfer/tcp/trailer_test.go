package tcp

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// heldRequest is a request as heldTarget read it.
type heldRequest struct {
	h    tcpHeader
	body []byte
}

// heldTarget reads requests in pairs and answers both only once it has
// read the second: an initiator that waited for the first one's status
// before sending the second would wait forever (here: until the target
// gives up after a few seconds and closes the connection). A request
// outside [base, base+size) is rejected. Every pair read goes to pairs.
func heldTarget(t *testing.T, base, size uint64, pairs chan<- [2]heldRequest) string {
	t.Helper()
	return testutil.ServeTCP(t, func(c net.Conn) {
		for {
			var pair [2]heldRequest
			for k := range pair {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				var hb [tcpHeaderSize]byte
				if _, err := io.ReadFull(c, hb[:]); err != nil {
					return
				}
				h, err := decodeTCPHeader(hb[:])
				if err != nil || h.opcode != transport.OpWrite {
					return
				}
				pair[k] = heldRequest{h: h, body: make([]byte, h.size)}
				if _, err := io.ReadFull(c, pair[k].body); err != nil {
					return
				}
			}
			pairs <- pair
			for _, r := range pair {
				code := uint32(statusOK)
				if r.h.addr < base || r.h.addr+r.h.size > base+size {
					code = statusRejected
				}
				st := encodeStatus(code)
				c.Write(st[:])
			}
		}
	})
}

// A WRITE with a trailer sends the trailer's request right behind its
// bytes on the same connection, without waiting for their status, on the
// caller's thread (RunSync) and through the lanes (Submit) alike; the job
// completes only when both requests did, and fails when the target
// rejects either. A job with a trailer must be one WRITE slice.
func TestTrailerFollowsTheBytesOnOneConnection(t *testing.T) {
	const base = 1 << 30
	pairs := make(chan [2]heldRequest, 8)
	p := newPeer(heldTarget(t, base, 1<<20, pairs), 2, gpu.System(), nil, func() {})
	defer p.Close()
	data := bytes.Repeat([]byte{5, 9, 1}, 700)[:2000]
	flag := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	job := func(remote, flagAt uint64, r *trackerDone) *transport.Job {
		return &transport.Job{Op: transport.OpWrite, Local: gpu.AddrOf(data), Remote: remote, Length: uint64(len(data)),
			Deadline: time.Now().Add(time.Minute), Tracker: r,
			Trailer: transport.Trailer{Local: gpu.AddrOf(flag), Remote: flagAt, Length: uint64(len(flag))}}
	}
	for _, sync := range []bool{true, false} {
		for _, c := range []struct {
			name           string
			remote, flagAt uint64
			want           transport.Status
		}{
			{"both inside", base + 4096, base + 64, transport.StatusCompleted},
			{"bytes rejected", base + (1 << 20), base + 64, transport.StatusFailed},
			{"trailer rejected", base + 4096, base + (2 << 20), transport.StatusFailed},
		} {
			r := newTrackerDone()
			if j := job(c.remote, c.flagAt, r); sync {
				if !p.RunSync(j) {
					t.Fatalf("%s: RunSync refused a one-slice WRITE with a trailer", c.name)
				}
			} else {
				p.Submit(j)
			}
			var got [2]heldRequest
			select {
			case got = <-pairs:
			case <-time.After(30 * time.Second):
				t.Fatalf("sync %v, %s: the target never read the bytes and the trailer together", sync, c.name)
			}
			if got[0].h.addr != c.remote || !bytes.Equal(got[0].body, data) || got[1].h.addr != c.flagAt || !bytes.Equal(got[1].body, flag) {
				t.Fatalf("sync %v, %s: requests %#x (%d bytes) then %#x (%d bytes), want the bytes at %#x then the trailer at %#x",
					sync, c.name, got[0].h.addr, len(got[0].body), got[1].h.addr, len(got[1].body), c.remote, c.flagAt)
			}
			if st := r.wait(t); st != c.want {
				t.Fatalf("sync %v, %s: job %v, want %v", sync, c.name, st, c.want)
			}
		}
	}
	for _, j := range []*transport.Job{
		{Op: transport.OpWrite, Length: SliceSize + 1},
		{Op: transport.OpRead, Length: 8},
	} {
		r := newTrackerDone()
		j.Local, j.Deadline, j.Tracker = gpu.AddrOf(data), time.Now().Add(time.Minute), r
		j.Trailer = transport.Trailer{Local: gpu.AddrOf(flag), Remote: base, Length: 8}
		p.Submit(j)
		if st := r.wait(t); st != transport.StatusFailed {
			t.Fatalf("a %v of %d bytes with a trailer: %v, want FAILED", j.Op, j.Length, st)
		}
	}
}

// trackerDone records a job's outcome and tells when its slices are done.
type trackerDone struct {
	mu   sync.Mutex
	left int
	st   transport.Status
	done chan struct{}
}

func newTrackerDone() *trackerDone { return &trackerDone{done: make(chan struct{})} }

func (r *trackerDone) Start(n int) {
	r.mu.Lock()
	r.left = n
	r.st = transport.StatusCompleted
	r.mu.Unlock()
}

func (r *trackerDone) FinishSlice(st transport.Status, _ uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st != transport.StatusCompleted {
		r.st = st
	}
	if r.left--; r.left == 0 {
		close(r.done)
	}
}

func (r *trackerDone) wait(t *testing.T) transport.Status {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not finish")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}
