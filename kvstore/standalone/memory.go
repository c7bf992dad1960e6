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

// scatter copies data over the parts in order; false (nothing copied)
// when they are too small.
func scatter(parts []client.Part, data []byte) bool {
	if client.PartsSize(parts) < uint64(len(data)) {
		return false
	}
	client.CopyToParts(parts, data)
	return true
}

func errorsIs(err error, code kvstore.ErrorCode) bool {
	return err != nil && kvstore.CodeOf(err) == code
}
