package transfer

import "github.com/mooncake-go/mooncake/internal/rawmem"

// bytesAt views n bytes of process memory starting at addr. The caller must
// have checked that the range lies inside registered (or otherwise owned)
// memory.
func bytesAt(addr uintptr, n uint64) []byte { return rawmem.At(addr, n) }

// addrOf returns the address of the first byte of b.
func addrOf(b []byte) uintptr { return rawmem.Addr(b) }
