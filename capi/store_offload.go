package main

// #include "cgo.h"
import "C"

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// The disk tier of a store client (setup's enable_ssd_offload).

//export mc_store_enable_offload
func mc_store_enable_offload(h C.uint64_t, path *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil {
		return refused()
	}
	if err := c.EnableOffload(C.GoString(path)); err != nil {
		slog.Error("store setup: ssd offload failed", "err", err)
		return code(err)
	}
	return 0
}

//export mc_store_unmount_local_disk
func mc_store_unmount_local_disk(h C.uint64_t, graceSeconds C.int64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil {
		return refused()
	}
	if graceSeconds < 0 {
		return code(fmt.Errorf("%w: negative grace period %d s", kvstore.InvalidParams, graceSeconds))
	}
	return code(c.UnmountLocalDisk(time.Duration(graceSeconds) * time.Second))
}

//export mc_store_offload_rpc_read_count
func mc_store_offload_rpc_read_count(h C.uint64_t) (ret C.int64_t) {
	defer recoverTo(&ret, 0)
	c := storeOf(h)
	if c == nil {
		return 0
	}
	return C.int64_t(c.OffloadRPCReadCount())
}
