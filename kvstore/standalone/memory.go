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

// scatter copies data over the parts in order; false when they are too
// small (nothing copied) or a copy into device memory failed.
func scatter(parts []client.Part, data []byte) bool {
	if client.PartsSize(parts) < uint64(len(data)) {
		return false
	}
	return client.CopyToParts(parts, data) == nil
}

func errorsIs(err error, code kvstore.ErrorCode) bool {
	return err != nil && kvstore.CodeOf(err) == code
}
