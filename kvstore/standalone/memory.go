package standalone

import (
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

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
