"""The disk tier calls of `MooncakeDistributedStore` (client-local SSD offload).

`_DiskTier` is a mixin that `mooncake.store.MooncakeDistributedStore`
inherits; it expects the store's ``_handle`` and ``health_check``. With
``setup(..., enable_ssd_offload=True, ssd_offload_path=DIR)`` the client
keeps copies of objects in bucket files under DIR (or
MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else /data/file_storage), the master
records them as LOCAL_DISK replicas, and reads of objects no longer in
memory are served from those files (docs/store-disk-tiers.md, "Disk tier").
"""

from __future__ import annotations

import ctypes

from mooncake import _lib
from mooncake._lib import I64, INT, STR, U64

_SIGNATURES = {
    "mc_store_enable_offload": ([U64, STR], INT),
    "mc_store_unmount_local_disk": ([U64, I64], INT),
    "mc_store_offload_rpc_read_count": ([U64], I64),
}


class _DiskTier:
    """Disk tier calls (see the module doc)."""

    _handle: int  # and health_check(): the store's

    def _native_offload(self) -> ctypes.CDLL:
        return _lib.bind(_SIGNATURES)

    def _enable_offload(self, path: str) -> int:
        """Start the disk tier after setup: 0, -600 (bad directory), -1300
        (the master runs without --enable_offload)."""
        return int(self._native_offload().mc_store_enable_offload(self._handle, path.encode()))

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        """Unmount the disk tier: the master stops naming this client as a
        disk replica holder at once; reads already routed here are served
        for `grace_period_seconds` more. The files stay (a later setup on
        the directory announces them again). 0, also without a disk tier;
        -1 for a grace period outside [0, 3600] or a store not set up."""
        if not 0 <= int(grace_period_seconds) <= 3600 or self.health_check() == 1:  # type: ignore[attr-defined]
            return -1
        lib = self._native_offload()
        rc = lib.mc_store_unmount_local_disk(self._handle, int(grace_period_seconds))
        return 0 if rc == 0 else -1

    def get_offload_rpc_read_count(self) -> int:
        """How many disk reads this client's offload server has served."""
        if not self._handle:
            return 0
        return int(self._native_offload().mc_store_offload_rpc_read_count(self._handle))
