package transport

import "github.com/mooncake-go/mooncake/gpu"

// Move copies n bytes between local memory and other memory at remote (a
// local region, or a mapped peer buffer): remote to local for OpRead,
// local to remote for OpWrite. Device memory on either side is copied by
// mem (the CUDA driver); host memory directly.
func Move(mem *gpu.Memory, op Opcode, local uintptr, localDev bool, remote uintptr, remoteDev bool, n uint64) error {
	dst, src := remote, local
	if op == OpRead {
		dst, src = local, remote
	}
	if !localDev && !remoteDev {
		copy(gpu.HostBytes(dst, n), gpu.HostBytes(src, n))
		return nil
	}
	return mem.Copy(dst, src, n)
}
