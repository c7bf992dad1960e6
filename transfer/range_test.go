package transfer

import (
	"bytes"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/tcp"
)

// TestEngineRejectsLargeRequestPastBuffer checks that a request larger than
// one TCP slice that runs past the target's buffer fails as a whole: the
// slices that would fit must not be moved either (the TCP transport splits
// requests into tcp.SliceSize pieces that the target checks one by one).
func TestEngineRejectsLargeRequestPastBuffer(t *testing.T) {
	const n = tcp.SliceSize + tcp.SliceSize/2 // registered bytes
	const margin = 4096
	for _, forceTCP := range []bool{true, false} {
		target := newTestEngine(t, forceTCP)
		initiator := newTestEngine(t, forceTCP)
		arena := anonMemory(t, n+2*margin)
		copy(arena, pattern(len(arena), 3))
		base := gpu.AddrOf(arena) + margin
		if err := target.RegisterLocalMemory(base, n, "cpu:0"); err != nil {
			t.Fatal(err)
		}
		local := managed(t, initiator, 2*tcp.SliceSize)
		copy(local, pattern(len(local), 4))
		for _, tc := range []struct {
			name string
			addr uintptr
			n    uint64
		}{
			{"one past end", base, n + 1},
			{"first slice inside", base + n - tcp.SliceSize - 8, tcp.SliceSize + 16},
			{"last slice inside", base - 16, tcp.SliceSize + 32},
		} {
			for _, op := range []Opcode{OpWrite, OpRead} {
				err := initiator.TransferSync(target.Name(), []Request{{Opcode: op, Source: gpu.AddrOf(local), TargetOffset: uint64(tc.addr), Length: tc.n}})
				if err == nil {
					t.Errorf("forceTCP=%v %s %s: accepted", forceTCP, tc.name, op)
				}
				if !bytes.Equal(arena, pattern(len(arena), 3)) {
					t.Fatalf("forceTCP=%v %s %s: target memory was modified", forceTCP, tc.name, op)
				}
				if !bytes.Equal(local, pattern(len(local), 4)) {
					t.Fatalf("forceTCP=%v %s %s: local memory was modified", forceTCP, tc.name, op)
				}
			}
		}
		// Memory the target registers after the initiator cached its
		// descriptor is still reachable (the range check refreshes it).
		extra := anonMemory(t, 4096)
		if err := target.RegisterLocalMemory(gpu.AddrOf(extra), 4096, "cpu:0"); err != nil {
			t.Fatal(err)
		}
		if err := initiator.TransferSync(target.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(gpu.AddrOf(extra)), Length: 4096}}); err != nil {
			t.Fatalf("forceTCP=%v: write into newly registered memory: %v", forceTCP, err)
		}
		if !bytes.Equal(extra, local[:4096]) {
			t.Fatalf("forceTCP=%v: write into newly registered memory lost", forceTCP)
		}
		target.UnregisterLocalMemory(gpu.AddrOf(extra))
		target.UnregisterLocalMemory(base)
	}
}

// TestDescriptorBuffersInRegistrationOrder checks that a segment lists its
// buffers in the order they were registered, as upstream does, so a peer's
// "first buffer" is the first one registered even when a later one lies at
// a lower address.
func TestDescriptorBuffersInRegistrationOrder(t *testing.T) {
	e := newTestEngine(t, true)
	arena := anonMemory(t, 3*4096)
	order := []uintptr{gpu.AddrOf(arena) + 2*4096, gpu.AddrOf(arena), gpu.AddrOf(arena) + 4096}
	for _, a := range order {
		if err := e.RegisterLocalMemory(a, 4096, "cpu:0"); err != nil {
			t.Fatal(err)
		}
	}
	bufs := e.descriptor().Buffers
	if len(bufs) != len(order) {
		t.Fatalf("%d buffers, want %d", len(bufs), len(order))
	}
	for i, a := range order {
		if bufs[i].Addr != uint64(a) {
			t.Fatalf("buffer %d is %#x, want %#x (registration order)", i, bufs[i].Addr, a)
		}
	}
	// Unregistering keeps the order of the rest.
	if err := e.UnregisterLocalMemory(order[0]); err != nil {
		t.Fatal(err)
	}
	if bufs = e.descriptor().Buffers; len(bufs) != 2 || bufs[0].Addr != uint64(order[1]) || bufs[1].Addr != uint64(order[2]) {
		t.Fatalf("after unregistering the first: %v", bufs)
	}
}
