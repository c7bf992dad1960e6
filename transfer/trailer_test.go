package transfer

import (
	"bytes"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

// A WRITE's trailer lands with its bytes, over TCP, through a same-host
// view, into the engine's own segment, and from an asynchronous batch; a
// trailer outside the request's buffer fails the request with nothing
// written, and the trailers that cannot ride on a request are refused at
// submission.
func TestTrailerLandsWithItsBytes(t *testing.T) {
	for _, c := range []struct {
		name           string
		forceTCP, self bool
	}{{"tcp", true, false}, {"shm", false, false}, {"self", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			target := newTestEngine(t, c.forceTCP)
			initiator := target
			if !c.self {
				initiator = newTestEngine(t, c.forceTCP)
			}
			const n = 3<<20 + 5
			remote := managed(t, target, n+4096)
			other := managed(t, target, 4096) // another buffer of the target
			local := managed(t, initiator, n+8)
			h, err := initiator.CachedSegment(target.Name())
			if err != nil {
				t.Fatal(err)
			}
			write := func(seed byte, trailerAt uint64) Request {
				copy(local, pattern(n+8, seed))
				return Request{Opcode: OpWrite, Source: gpu.AddrOf(local), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)), Length: n,
					Trailer: Trailer{Source: gpu.AddrOf(local[n:]), TargetOffset: trailerAt, Length: 8}}
			}
			flagAt := uint64(gpu.AddrOf(remote)) + n + 1000
			for round, seed := range []byte{1, 2} {
				req := write(seed, flagAt)
				var st []Status
				if round == 0 {
					st, err = initiator.RunBatch([]Request{req})
				} else { // asynchronous: a same-host view is still taken, in order
					id := mustBatch(t, initiator, 1)
					if err = initiator.SubmitTransfer(id, []Request{req}); err == nil {
						_, err = initiator.WaitBatch(id)
						var ts TransferStatus
						ts, _ = initiator.TransferStatus(id, 0)
						st = []Status{ts.Status}
						initiator.FreeBatch(id)
					}
				}
				if err != nil || st[0] != StatusCompleted {
					t.Fatalf("round %d: %v %v", round, st, err)
				}
				want := pattern(n+8, seed)
				if !bytes.Equal(remote[:n], want[:n]) || !bytes.Equal(remote[n+1000:n+1008], want[n:]) {
					t.Fatalf("round %d: the bytes or the trailer did not land", round)
				}
			}
			before := bytes.Clone(remote)
			if st, err := initiator.RunBatch([]Request{write(3, uint64(gpu.AddrOf(other)))}); err != nil || st[0] == StatusCompleted {
				t.Fatalf("a trailer in another buffer than the bytes: %v %v, want a failed request", st, err)
			}
			if !bytes.Equal(remote, before) || !bytes.Equal(other, make([]byte, 4096)) {
				t.Fatal("a refused request with a trailer wrote to the target")
			}
			for _, bad := range []func(*Request){
				func(r *Request) { r.Opcode = OpRead },
				func(r *Request) { r.Length = MaxTrailed + 1 },
				func(r *Request) { r.Trailer.Length = MaxTrailer + 1 },
				func(r *Request) { r.Trailer.Source = gpu.AddrOf(pattern(8, 0)) },
			} {
				r := write(4, flagAt)
				bad(&r)
				if _, err := initiator.RunBatch([]Request{r}); err == nil {
					t.Fatalf("request %+v accepted", r)
				}
			}
		})
	}
}

// A trailer is host memory: one in device memory is refused at submission
// (the TCP transport sends it straight from its address).
func TestTrailerInDeviceMemoryRefused(t *testing.T) {
	for name, d := range devices(t) {
		t.Run(name, func(t *testing.T) {
			target, initiator := newDeviceEngine(t, d, true), newDeviceEngine(t, d, true)
			remote := managed(t, target, 8192)
			local := managed(t, initiator, 4096)
			flag := deviceBuf(t, d, make([]byte, 8))
			if err := initiator.RegisterLocalMemory(flag, 8, "*"); err != nil {
				t.Fatal(err)
			}
			h, err := initiator.CachedSegment(target.Name())
			if err != nil {
				t.Fatal(err)
			}
			req := Request{Opcode: OpWrite, Source: gpu.AddrOf(local), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)), Length: 4096,
				Trailer: Trailer{Source: flag, TargetOffset: uint64(gpu.AddrOf(remote)) + 4096, Length: 8}}
			if _, err := initiator.RunBatch([]Request{req}); err == nil {
				t.Fatal("a trailer in device memory was accepted")
			}
		})
	}
}
