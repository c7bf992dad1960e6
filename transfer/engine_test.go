package transfer

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
	"golang.org/x/sys/unix"
)

// newTestEngine starts a P2P engine on loopback.
func newTestEngine(t *testing.T, forceTCP bool) *Engine {
	t.Helper()
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: forceTCP, TransferTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// managed allocates a managed buffer and returns it as a byte slice.
func managed(t *testing.T, e *Engine, n int) []byte {
	t.Helper()
	a, err := e.AllocateManagedBuffer(uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	return gpu.HostBytes(a, uint64(n))
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestEngineReadWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		forceTCP bool
	}{{"shm", false}, {"tcp", true}} {
		t.Run(tc.name, func(t *testing.T) {
			target := newTestEngine(t, tc.forceTCP)
			initiator := newTestEngine(t, tc.forceTCP)
			const n = 9<<20 + 123 // several TCP slices, odd tail
			remote := managed(t, target, n)
			local := managed(t, initiator, n)
			copy(local, pattern(n, 1))
			req := []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(gpu.AddrOf(remote)), Length: n}}
			if err := initiator.TransferSync(target.Name(), req); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(remote, local) {
				t.Fatal("WRITE: remote differs from local")
			}
			copy(remote, pattern(n, 2))
			req[0].Opcode = OpRead
			if err := initiator.TransferSync(target.Name(), req); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(local, pattern(n, 2)) {
				t.Fatal("READ: local differs from remote")
			}
			s, _ := initiator.openSegment(target.Name())
			_, conns, _ := s.route(nil)
			_, direct := conns[0].conn.(transport.DirectView)
			if direct == tc.forceTCP {
				t.Fatalf("a same-host mapping first = %v with forceTCP = %v", direct, tc.forceTCP)
			}
		})
	}
}

func TestEngineBatchStatus(t *testing.T) {
	target := newTestEngine(t, true)
	initiator := newTestEngine(t, true)
	remote := managed(t, target, 4096)
	local := managed(t, initiator, 4096)
	copy(local, pattern(4096, 3))
	h, err := initiator.CachedSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	id, err := initiator.AllocateBatch(4)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for i := range 4 {
		off := uint64(i * 1024)
		reqs = append(reqs, Request{Opcode: OpWrite, Source: gpu.AddrOf(local) + uintptr(off), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)) + off, Length: 1024})
	}
	if err := initiator.SubmitTransfer(id, reqs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := initiator.SubmitTransfer(id, reqs[1:]); err != nil {
		t.Fatal(err)
	}
	if err := initiator.SubmitTransfer(id, reqs[:1]); CodeOf(err) != CodeTooManyRequests {
		t.Fatalf("over capacity: got %v", err)
	}
	st, err := initiator.WaitBatch(id)
	if err != nil || st.Status != StatusCompleted || st.TransferredBytes != 4096 {
		t.Fatalf("batch: %+v %v", st, err)
	}
	for i := range 4 {
		ts, _ := initiator.TransferStatus(id, i)
		if ts.Status != StatusCompleted || ts.TransferredBytes != 1024 {
			t.Fatalf("task %d: %+v", i, ts)
		}
	}
	if _, err := initiator.TransferStatus(id, 4); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("task out of range: %v", err)
	}
	if !bytes.Equal(remote, local) {
		t.Fatal("data differs")
	}
	if err := initiator.FreeBatch(id); err != nil {
		t.Fatal(err)
	}
	if err := initiator.FreeBatch(id); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("double free: %v", err)
	}
}

func TestEngineFreeBatchBusy(t *testing.T) {
	e := newTestEngine(t, true)
	b, _ := e.batch(mustBatch(t, e, 1))
	b.add([]Request{{}}, time.Now().Add(time.Second)) // a task that never runs
	if err := e.FreeBatch(1); CodeOf(err) != CodeBatchBusy {
		t.Fatalf("free busy batch: %v", err)
	}
}

func anonMemory(t *testing.T, n int) []byte {
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

func mustBatch(t *testing.T, e *Engine, n int) BatchID {
	id, err := e.AllocateBatch(n)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestEngineRejectsUnregisteredTarget checks that a request outside the
// target's registered memory fails and leaves the target's memory alone,
// over TCP (validated by the target) and shm (falls back to TCP).
func TestEngineRejectsUnregisteredTarget(t *testing.T) {
	for _, forceTCP := range []bool{true, false} {
		target := newTestEngine(t, forceTCP)
		initiator := newTestEngine(t, forceTCP)
		// One allocation, of which only the middle is registered. It is
		// mmap'd, not Go heap, as registered memory is in real use (the race
		// detector cannot see the ordering a network round trip gives).
		arena := anonMemory(t, 3*4096)
		if err := target.RegisterLocalMemory(gpu.AddrOf(arena)+4096, 4096, "cpu:0"); err != nil {
			t.Fatal(err)
		}
		local := managed(t, initiator, 8192)
		copy(local, pattern(8192, 9))
		for _, tc := range []struct {
			name string
			addr uintptr
			n    uint64
		}{
			{"before", gpu.AddrOf(arena), 4096},
			{"straddling end", gpu.AddrOf(arena) + 6144, 4096},
			{"after", gpu.AddrOf(arena) + 8192, 4096},
			{"too long", gpu.AddrOf(arena) + 4096, 8192},
		} {
			for _, op := range []Opcode{OpWrite, OpRead} {
				err := initiator.TransferSync(target.Name(), []Request{{Opcode: op, Source: gpu.AddrOf(local), TargetOffset: uint64(tc.addr), Length: tc.n}})
				if err == nil {
					t.Errorf("forceTCP=%v %s %s: accepted", forceTCP, tc.name, op)
				}
			}
		}
		if !bytes.Equal(arena, make([]byte, len(arena))) {
			t.Fatalf("forceTCP=%v: target memory was modified", forceTCP)
		}
		if !bytes.Equal(local, pattern(8192, 9)) {
			t.Fatalf("forceTCP=%v: rejected READ changed local memory", forceTCP)
		}
		// The connection stays usable after rejections.
		if err := initiator.TransferSync(target.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(gpu.AddrOf(arena)) + 4096, Length: 4096}}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(arena[4096:8192], local[:4096]) {
			t.Fatal("valid write after rejections lost")
		}
		target.UnregisterLocalMemory(gpu.AddrOf(arena) + 4096)
	}
}

func TestEngineBadArguments(t *testing.T) {
	e := newTestEngine(t, true)
	peer := newTestEngine(t, true)
	remote := managed(t, peer, 64)
	unregistered := anonMemory(t, 64)
	h, err := e.CachedSegment(peer.Name())
	if err != nil {
		t.Fatal(err)
	}
	id := mustBatch(t, e, 4)
	if err := e.SubmitTransfer(id, []Request{{Opcode: OpWrite, Source: gpu.AddrOf(unregistered), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)), Length: 64}}); CodeOf(err) != CodeAddressNotRegistered {
		t.Fatalf("unregistered source: %v", err)
	}
	if err := e.SubmitTransfer(id, []Request{{Opcode: 7, Target: h}}); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("bad opcode: %v", err)
	}
	if err := e.SubmitTransfer(id, []Request{{Opcode: OpRead, Target: 999}}); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("bad segment: %v", err)
	}
	if _, err := e.CachedSegment("127.0.0.1:1"); err == nil {
		t.Fatal("opened a segment nobody serves")
	}
	if _, err := e.AllocateBatch(0); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("zero batch: %v", err)
	}
	buf := anonMemory(t, 128)
	if err := e.RegisterLocalMemory(gpu.AddrOf(buf), 128, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.RegisterLocalMemory(gpu.AddrOf(buf)+64, 128, ""); CodeOf(err) != CodeAddressOverlapped {
		t.Fatalf("overlap: %v", err)
	}
	if err := e.UnregisterLocalMemory(gpu.AddrOf(buf) + 1); CodeOf(err) != CodeAddressNotRegistered {
		t.Fatalf("unregister unknown: %v", err)
	}
	// Zero-length requests complete without touching anything.
	if err := e.SubmitTransfer(id, []Request{{Opcode: OpWrite, Target: h}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.WaitBatch(id); st.Status != StatusCompleted {
		t.Fatalf("zero-length: %v", st.Status)
	}
}

func TestEngineNotifyAndProbe(t *testing.T) {
	a := newTestEngine(t, true)
	b := newTestEngine(t, true)
	if err := a.Probe(b.Name()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"one", "two"} {
		if err := a.SendNotify(b.Name(), Notify{Name: a.Name(), Msg: m}); err != nil {
			t.Fatal(err)
		}
	}
	got := b.GetNotifies()
	if len(got) != 2 || got[0].Msg != "one" || got[1].Msg != "two" || got[0].Name != a.Name() {
		t.Fatalf("notifies: %+v", got)
	}
	if len(b.GetNotifies()) != 0 {
		t.Fatal("notifies not drained")
	}
}

// TestEngineDeadPeer checks that transfers to a closed peer fail within the
// timeout rather than hang, over both transports, and that the engine
// reaches a new peer afterwards.
func TestEngineDeadPeer(t *testing.T) {
	for _, forceTCP := range []bool{true, false} {
		initiator := newTestEngine(t, forceTCP)
		target, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: forceTCP})
		if err != nil {
			t.Fatal(err)
		}
		remote, _ := target.AllocateManagedBuffer(1 << 20)
		local := managed(t, initiator, 1<<20)
		req := []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(remote), Length: 1 << 20}}
		if err := initiator.TransferSync(target.Name(), req); err != nil {
			t.Fatal(err)
		}
		target.Close()
		start := time.Now()
		err = initiator.TransferSync(target.Name(), req)
		if err == nil && forceTCP {
			t.Fatal("write to a closed peer succeeded")
		}
		if d := time.Since(start); d > initiator.Timeout()+5*time.Second { // bounded, not a speed claim
			t.Fatalf("failure took %v", d)
		}
	}
}

func TestCodeOf(t *testing.T) {
	if CodeOf(nil) != 0 || CodeOf(errors.New("x")) != -1 {
		t.Fatal("CodeOf basics")
	}
	err := errorf(CodeBatchBusy, nil, "busy")
	if !errors.Is(err, &Error{Code: CodeBatchBusy}) || errors.Is(err, &Error{Code: CodeSocket}) {
		t.Fatal("errors.Is on codes")
	}
}

// TestEngineLocalOnly checks that local-only memory works as a transfer's
// local side, is not published, and cannot be reached by peers.
func TestEngineLocalOnly(t *testing.T) {
	target := newTestEngine(t, true)
	initiator := newTestEngine(t, true)
	remote := managed(t, target, 4096)
	scratch := anonMemory(t, 4096)
	copy(scratch, pattern(4096, 5))
	if err := initiator.RegisterLocalOnly(gpu.AddrOf(scratch), 4096); err != nil {
		t.Fatal(err)
	}
	if !initiator.IsRegistered(gpu.AddrOf(scratch)+10, 100) || initiator.IsRegistered(gpu.AddrOf(scratch)+10, 4096) {
		t.Fatal("IsRegistered")
	}
	if err := initiator.TransferSync(target.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(scratch), TargetOffset: uint64(gpu.AddrOf(remote)), Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote, scratch) {
		t.Fatal("write from local-only memory lost")
	}
	for _, b := range initiator.descriptor().Buffers {
		if b.Addr == uint64(gpu.AddrOf(scratch)) {
			t.Fatal("local-only buffer published")
		}
	}
	// A peer cannot write into it, even knowing the address.
	src := managed(t, target, 4096)
	if err := target.TransferSync(initiator.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(src), TargetOffset: uint64(gpu.AddrOf(scratch)), Length: 4096}}); err == nil {
		t.Fatal("peer wrote into local-only memory")
	}
	if !bytes.Equal(scratch, pattern(4096, 5)) {
		t.Fatal("local-only memory modified by a peer")
	}
	if err := initiator.UnregisterLocalMemory(gpu.AddrOf(scratch)); err != nil {
		t.Fatal(err)
	}
}
