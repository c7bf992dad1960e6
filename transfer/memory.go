package transfer

import "github.com/mooncake-go/mooncake/gpu"

// bytesAt views n bytes of process memory starting at addr. The caller must
// have checked that the range lies inside registered (or otherwise owned)
// memory.
func bytesAt(addr uintptr, n uint64) []byte { return gpu.HostBytes(addr, n) }

// addrOf returns the address of the first byte of b.
func addrOf(b []byte) uintptr { return gpu.AddrOf(b) }
