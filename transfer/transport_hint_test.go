package transfer

import (
	"bytes"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

// syncWith runs one WRITE of data to addr on target with the given
// transport hint and returns TransferSync's error.
func syncWith(e, target *Engine, src []byte, addr uintptr, hint string) error {
	return e.TransferSync(target.Name(), []Request{{
		Opcode: OpWrite, Source: gpu.AddrOf(src), TargetOffset: uint64(addr), Length: uint64(len(src)), Transport: hint,
	}})
}

// TestTransportHintSelectsTheTransport checks that a hint restricts a
// request to the named transport: with the target's TCP port closed, only
// shared memory reaches it, so "" and "shm" succeed and "tcp" (and "rdma",
// which runs as TCP) fail.
func TestTransportHintSelectsTheTransport(t *testing.T) {
	target, initiator := newTestEngine(t, false), newTestEngine(t, false)
	remote := managed(t, target, 4096)
	src := managed(t, initiator, 4096)
	target.dataLn.Close() // nothing reaches the target over TCP now
	for _, tc := range []struct {
		hint string
		ok   bool
	}{{"", true}, {"shm", true}, {"SHM", true}, {"tcp", false}, {"rdma", false}} {
		copy(src, pattern(len(src), byte(len(tc.hint))))
		clear(remote)
		err := syncWith(initiator, target, src, gpu.AddrOf(remote), tc.hint)
		if tc.ok != (err == nil) {
			t.Fatalf("hint %q: err = %v, want success %v", tc.hint, err, tc.ok)
		}
		if tc.ok != bytes.Equal(remote, src) {
			t.Fatalf("hint %q: target holds the data = %v, want %v", tc.hint, !tc.ok, tc.ok)
		}
	}
}

// TestTransportHintTCPReachesMemoryShmCannot: memory the target registered
// itself (not engine-allocated) has no shared-memory mapping, so "shm"
// fails and "tcp" moves it.
func TestTransportHintTCPReachesMemoryShmCannot(t *testing.T) {
	target, initiator := newTestEngine(t, false), newTestEngine(t, false)
	remote := anonMemory(t, 4096)
	if err := target.RegisterLocalMemory(gpu.AddrOf(remote), 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	src := managed(t, initiator, 4096)
	copy(src, pattern(len(src), 9))
	if err := syncWith(initiator, target, src, gpu.AddrOf(remote), "shm"); err == nil {
		t.Fatal(`hint "shm" reached memory that has no shared mapping`)
	}
	if err := syncWith(initiator, target, src, gpu.AddrOf(remote), "tcp"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote, src) {
		t.Fatal(`hint "tcp": target differs`)
	}
}

// TestTransportHintRefusesUnknownNames: a name the engine does not run is
// refused at submission, with nothing moved.
func TestTransportHintRefusesUnknownNames(t *testing.T) {
	target, initiator := newTestEngine(t, false), newTestEngine(t, false)
	tcpOnly := newTestEngine(t, true)
	remote := managed(t, target, 4096)
	for _, tc := range []struct {
		e    *Engine
		hint string
	}{{initiator, "nvlink"}, {initiator, "bogus"}, {tcpOnly, "shm"}} {
		src := managed(t, tc.e, 4096)
		copy(src, pattern(len(src), 3))
		clear(remote)
		if err := syncWith(tc.e, target, src, gpu.AddrOf(remote), tc.hint); CodeOf(err) != CodeInvalidArgument {
			t.Fatalf("hint %q: err = %v, want an invalid-argument error", tc.hint, err)
		}
		if !bytes.Equal(remote, make([]byte, len(remote))) {
			t.Fatalf("hint %q: data moved anyway", tc.hint)
		}
	}
}
