package standalone

import (
	"unsafe"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// bytesAt views n bytes of this process's memory at addr.
func bytesAt(addr uintptr, n uint64) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

// partsCap is the parts' total size.
func partsCap(parts []client.Part) uint64 {
	var n uint64
	for _, p := range parts {
		n += p.Size
	}
	return n
}

// scatter copies data over the parts in order; false (nothing copied)
// when they are too small.
func scatter(parts []client.Part, data []byte) bool {
	if partsCap(parts) < uint64(len(data)) {
		return false
	}
	for _, p := range parts {
		if len(data) == 0 {
			break
		}
		n := copy(bytesAt(p.Addr, p.Size), data)
		data = data[n:]
	}
	return true
}

// gather fills dst from the parts in order.
func gather(dst []byte, parts []client.Part) {
	for _, p := range parts {
		if len(dst) == 0 {
			return
		}
		n := copy(dst, bytesAt(p.Addr, p.Size))
		dst = dst[n:]
	}
}

func errorsIs(err error, code kvstore.ErrorCode) bool {
	return err != nil && kvstore.CodeOf(err) == code
}
