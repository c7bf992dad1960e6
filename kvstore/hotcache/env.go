package hotcache

import (
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// ConfigFromEnv reads MC_STORE_LOCAL_HOT_CACHE_SIZE (unset, 0 or invalid:
// Size 0, no cache), MC_STORE_LOCAL_HOT_BLOCK_SIZE (16 MiB),
// MC_STORE_LOCAL_HOT_CACHE_USE_SHM ("1": Shared) and
// MC_STORE_LOCAL_HOT_MAX_AGE_MS (5000).
func ConfigFromEnv() Config {
	return Config{
		Size:      uint64(envvars.StoreHotCacheSize.Int(0)),
		BlockSize: uint64(envvars.StoreHotBlockSize.Int(16 << 20)),
		Shared:    envvars.StoreHotCacheUseShm.Value() == "1",
		MaxAge:    time.Duration(envvars.StoreHotMaxAgeMs.Int(5000)) * time.Millisecond,
	}
}
