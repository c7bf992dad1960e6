package transfer

import (
	"strconv"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// GPU memory in the engine. A registered buffer may be device memory (a
// CUDA allocation): the engine learns so at registration and never
// dereferences it. Peers see its address only as a name inside this
// engine's segment; the bytes move as follows:
//
//   - TCP (either side device): through pinned host chunks, the copy
//     between device and host pipelined against the network (gpu.Memory
//     SendDevice and RecvDevice).
//   - same process, or a same-host peer's shared-memory buffer: one
//     synchronous CUDA copy between the two ranges.
//
// A device buffer is never shared through memfd, so same-host peers reach
// it over TCP.

// classify says whether [addr, addr+n) is device memory; device memory
// must lie inside one CUDA allocation.
func (e *Engine) classify(addr uintptr, n uint64) (transport.Placement, error) {
	info, err := e.mem.Range(addr, n)
	if err != nil {
		return transport.Placement{}, errorf(CodeInvalidArgument, err, "classify [%#x,+%d)", addr, n)
	}
	if info.HostAccessible() {
		return transport.Placement{}, nil
	}
	return transport.Placement{Device: true, Ordinal: info.Device}, nil
}

// deviceLocation is the placement hint of device memory registered with
// the wildcard location: "cuda:N", as upstream names it.
func deviceLocation(location string, d transport.Placement) string {
	if d.Device && location == "*" {
		return "cuda:" + strconv.Itoa(d.Ordinal)
	}
	return location
}

// move copies n bytes between local memory and other memory at remote:
// transport.Move with the engine's GPU memory access.
func (e *Engine) move(op Opcode, local uintptr, localDev bool, remote uintptr, remoteDev bool, n uint64) error {
	return transport.Move(e.mem, op, local, localDev, remote, remoteDev, n)
}

// Memory is the GPU memory access the engine uses (Config.Memory or
// gpu.System()); the store client stages through the same one.
func (e *Engine) Memory() *gpu.Memory { return e.mem }
