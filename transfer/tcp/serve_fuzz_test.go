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
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// fakeExposed exposes one host buffer and counts the uses it hands out.
type fakeExposed struct {
	base, n uint64
	held    atomic.Int64
}

type fakeRegion struct{ e *fakeExposed }

func (fakeRegion) Placement() transport.Placement { return transport.Placement{} }
func (r fakeRegion) Release()                     { r.e.held.Add(-1) }

func (e *fakeExposed) AcquireExposed(addr uintptr, n uint64) transport.Region {
	a := uint64(addr)
	if a < e.base || n > e.n || a-e.base > e.n-n {
		return nil
	}
	e.held.Add(1)
	return fakeRegion{e}
}

// FuzzServeConn feeds arbitrary bytes, as a peer's stream of requests, to
// the TCP server's connection loop over an in-memory pipe. The loop ends
// when the stream does (a bad frame ends the connection, never the
// process), writes no byte outside the exposed buffer, and releases every
// use of the buffer it took.
func FuzzServeConn(f *testing.F) {
	const page = 4096
	mem := make([]byte, 3*page)
	base := uint64(gpu.AddrOf(mem)) + page
	// Seeds are built with offsets into the exposed page; the fuzz body
	// rebases the address field onto it, so seeds mean the same each run.
	req := func(op transport.Opcode, off, size uint64, v2 bool, payload []byte) []byte {
		var hb [tcpHeaderSize]byte
		tcpHeader{size: size, addr: off, opcode: op, v2: v2}.encode(&hb)
		return append(hb[:], payload...)
	}
	f.Add(req(transport.OpWrite, 0, 5, true, []byte("hello")))
	f.Add(req(transport.OpRead, 100, 16, true, nil))
	f.Add(req(transport.OpRead, 100, 16, false, nil))
	f.Add(req(transport.OpWrite, page-2, 4, true, []byte("edge")))
	f.Add(req(transport.OpWrite, 0, 1<<62, true, nil))
	f.Add(append(req(transport.OpWrite, 8, 3, true, []byte("abc")), req(transport.OpRead, 8, 3, true, nil)...))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		b = bytes.Clone(b)
		// Rebase every full header's address (an offset in the seeds) onto
		// the exposed page, so requests land near it often.
		if len(b) >= tcpHeaderSize {
			off := uint64(b[8]) | uint64(b[9])<<8 | uint64(b[10])<<16
			a := base - page + off%(3*page)
			for i := range 8 {
				b[8+i] = byte(a >> (8 * i))
			}
		}
		for i := range mem {
			mem[i] = 0x5A
		}
		ex := &fakeExposed{base: base, n: page}
		srv := &Server{memory: ex, timeout: 2 * time.Second}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); srv.serveConn(server); server.Close() }()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); io.Copy(io.Discard, client) }()
		client.SetDeadline(time.Now().Add(5 * time.Second))
		client.Write(b)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("serveConn did not end with the stream")
		}
		wg.Wait()
		if h := ex.held.Load(); h != 0 {
			t.Fatalf("%d uses of the buffer not released", h)
		}
		for i, c := range append(mem[:page:page], mem[2*page:]...) {
			if c != 0x5A {
				t.Fatalf("byte %d outside the exposed buffer written", i)
			}
		}
	})
}
