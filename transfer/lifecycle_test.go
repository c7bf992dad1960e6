package transfer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

// TestCloseRevokesPeerAccess: after Close, a peer that already had a
// connection can neither write nor read the engine's user-registered
// memory, and its transfer reports failure.
func TestCloseRevokesPeerAccess(t *testing.T) {
	target := newTestEngine(t, true)
	initiator := newTestEngine(t, true)
	mem := anonMemory(t, 4096)
	if err := target.RegisterLocalMemory(gpu.AddrOf(mem), 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	local := managed(t, initiator, 4096)
	copy(local, pattern(4096, 1))
	req := []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(gpu.AddrOf(mem)), Length: 4096}}
	if err := initiator.TransferSync(target.Name(), req); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, local) {
		t.Fatal("first write lost")
	}
	if err := target.Close(); err != nil {
		t.Fatal(err)
	}
	copy(local, pattern(4096, 2))
	if err := initiator.TransferSync(target.Name(), req); err == nil {
		t.Fatal("write into a closed engine's memory reported success")
	}
	if !bytes.Equal(mem, pattern(4096, 1)) {
		t.Fatal("a peer wrote into a closed engine's memory")
	}
	req[0].Opcode = OpRead
	if err := initiator.TransferSync(target.Name(), req); err == nil {
		t.Fatal("read from a closed engine's memory reported success")
	}
	if target.IsRegistered(gpu.AddrOf(mem), 4096) {
		t.Fatal("user memory still registered after Close")
	}
}

// TestClosedEngineRefusesWork: every call that starts work on a closed
// engine fails with ErrClosed, and Close is idempotent.
func TestClosedEngineRefusesWork(t *testing.T) {
	peer := newTestEngine(t, true)
	remote := managed(t, peer, 4096)
	e := newTestEngine(t, true)
	local := managed(t, e, 4096)
	seg, err := e.OpenSegment(peer.Name())
	if err != nil {
		t.Fatal(err)
	}
	h := seg.Handle()
	id := mustBatch(t, e, 1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	mem := anonMemory(t, 4096)
	checks := map[string]error{
		"RegisterLocalMemory": e.RegisterLocalMemory(gpu.AddrOf(mem), 4096, ""),
		"RegisterLocalOnly":   e.RegisterLocalOnly(gpu.AddrOf(mem), 4096),
		"SubmitTransfer":      e.SubmitTransfer(id, []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), Target: h, TargetOffset: uint64(gpu.AddrOf(remote)), Length: 64}}),
		"TransferSync":        e.TransferSync(peer.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local), TargetOffset: uint64(gpu.AddrOf(remote)), Length: 64}}),
		"WriteLocal":          e.WriteLocal(gpu.AddrOf(local), []byte{1}),
		"SendNotify":          e.SendNotify(peer.Name(), Notify{Msg: "x"}),
		"Probe":               e.Probe(peer.Name()),
	}
	_, err = e.AllocateManagedBuffer(4096)
	checks["AllocateManagedBuffer"] = err
	_, err = e.AllocateBatch(1)
	checks["AllocateBatch"] = err
	_, err = e.AccessRemote(h, uint64(gpu.AddrOf(remote)), 4, func([]byte) {})
	checks["AccessRemote"] = err
	_, err = e.OpenSegment(peer.Name())
	checks["OpenSegment"] = err
	_, err = e.CachedSegment(peer.Name())
	checks["CachedSegment"] = err
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s on a closed engine: %v, want ErrClosed", name, err)
		}
	}
	if e.IsRegistered(gpu.AddrOf(local), 1) {
		t.Error("managed buffer still registered after Close")
	}
}
