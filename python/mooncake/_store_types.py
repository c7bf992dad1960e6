"""Value types of `mooncake.store` besides the client itself.

Enums and read-only descriptors as upstream's bindings expose them
(`ObjectDataType`, `ReplicaStatus`, `ReplicaDescriptor`, ...), and
`BufferHandle`, the client-owned copy of an object that `get_buffer` returns.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from typing import Any

from mooncake._byte_buffer import ByteExporter


class ObjectDataType(enum.IntEnum):
    """What an object holds; kept as object metadata, placement ignores it."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(enum.IntEnum):
    """A replica's place in its lifecycle (only COMPLETE ones are listed)."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class Descriptor:
    """Where a memory replica lives: `size` bytes at `buffer_address` in the
    Transfer Engine segment `transport_endpoint`."""

    __slots__ = ("size", "buffer_address", "transport_endpoint")

    def __init__(self, size: int, buffer_address: int, transport_endpoint: str) -> None:
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self) -> str:
        return (
            f"Descriptor(size={self.size}, buffer_address={self.buffer_address:#x}, "
            f"transport_endpoint={self.transport_endpoint!r})"
        )


class MemoryDescriptor:
    """A memory replica's location (`buffer_descriptor`)."""

    __slots__ = ("buffer_descriptor",)

    def __init__(self, buffer_descriptor: Descriptor) -> None:
        self.buffer_descriptor = buffer_descriptor

    def __repr__(self) -> str:
        return f"MemoryDescriptor({self.buffer_descriptor!r})"


class DiskDescriptor:
    """A shared-file-system DISK replica (mooncake_master --root_fs_dir):
    the object's `object_size` raw bytes are the file at `file_path`, under
    <root_fs_dir>/<cluster_id>."""

    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path: str, object_size: int) -> None:
        self.file_path = file_path
        self.object_size = object_size

    def __repr__(self) -> str:
        return f"DiskDescriptor(file_path={self.file_path!r}, object_size={self.object_size})"


class LocalDiskDescriptor:
    """A LOCAL_DISK replica: `object_size` bytes on the disk of storage
    client `client_id`, whose offload server listens at
    `transport_endpoint` (host:port)."""

    __slots__ = ("client_id", "object_size", "transport_endpoint")

    def __init__(self, client_id: str, object_size: int, transport_endpoint: str) -> None:
        self.client_id = client_id
        self.object_size = object_size
        self.transport_endpoint = transport_endpoint

    def __repr__(self) -> str:
        return (
            f"LocalDiskDescriptor(client_id={self.client_id!r}, "
            f"object_size={self.object_size}, transport_endpoint={self.transport_endpoint!r})"
        )


# replica_type values of mc_store_replica_desc's JSON (the proto's ReplicaType).
_MEMORY, _DISK, _LOCAL_DISK = 0, 1, 2


class ReplicaDescriptor:
    """One readable replica of an object, as `get_replica_desc` lists it:
    a memory replica, or, listed when the object has no memory replica, a
    LOCAL_DISK one (a copy on a storage client's disk) or a DISK one (a
    file on the shared file system)."""

    __slots__ = ("status", "_memory", "_local_disk", "_disk")

    def __init__(
        self,
        status: ReplicaStatus,
        memory: MemoryDescriptor | None,
        local_disk: LocalDiskDescriptor | None = None,
        disk: DiskDescriptor | None = None,
    ) -> None:
        self.status = status
        self._memory = memory
        self._local_disk = local_disk
        self._disk = disk

    def is_memory_replica(self) -> bool:
        return self._memory is not None

    def is_disk_replica(self) -> bool:
        """A shared-file-system DISK replica (--root_fs_dir)."""
        return self._disk is not None

    def is_local_disk_replica(self) -> bool:
        return self._local_disk is not None

    def get_memory_descriptor(self) -> MemoryDescriptor:
        if self._memory is None:
            raise RuntimeError("not a memory replica")
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        if self._disk is None:
            raise RuntimeError("not a DISK replica")
        return self._disk

    def get_local_disk_descriptor(self) -> LocalDiskDescriptor:
        if self._local_disk is None:
            raise RuntimeError("not a LOCAL_DISK replica")
        return self._local_disk

    def __repr__(self) -> str:
        where = self._memory or self._local_disk or self._disk
        return f"ReplicaDescriptor(status={self.status.name}, {where!r})"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReplicaDescriptor:
        status = ReplicaStatus(int(d["status"]))
        if int(d.get("replica_type", _MEMORY)) == _LOCAL_DISK:
            endpoint = d["transport_endpoint"]
            disk = LocalDiskDescriptor(d.get("client_id", ""), int(d["size"]), endpoint)
            return cls(status, None, disk)
        if int(d.get("replica_type", _MEMORY)) == _DISK:
            return cls(status, None, None, DiskDescriptor(d.get("file_path", ""), int(d["size"])))
        desc = Descriptor(int(d["size"]), int(d["buffer_address"]), d["transport_endpoint"])
        return cls(status, MemoryDescriptor(desc))


class BufferHandle(ByteExporter):  # type: ignore[misc,valid-type]
    """A copy of an object in memory the client owns (upstream `get_buffer`).

    It exposes the bytes through the buffer protocol (`memoryview(h)`,
    `bytes(h)`, `numpy.frombuffer(h)`: 1-D, format "B", so a view can be
    indexed and iterated; size 0 gives an empty view) and as `ptr()` /
    `size()` / `len()`. The memory is released when the handle and every
    view of it are gone.
    """

    __slots__ = ("_ptr", "_size", "__weakref__")

    def ptr(self) -> int:
        """Address of the first byte."""
        return self._ptr

    def size(self) -> int:
        """Size in bytes."""
        return self._size

    def len(self) -> int:
        """Size in bytes (upstream's name for `size`)."""
        return self._size

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"BufferHandle(ptr={self._ptr:#x}, size={self._size})"


def take_buffer(ptr: int, size: int, free: Callable[[int], Any]) -> BufferHandle:
    """Wrap `size` bytes at `ptr` (owned by the caller) in a handle that
    calls `free(ptr)` once it and all its views are collected."""
    handle = BufferHandle()
    handle._ptr, handle._size = int(ptr), int(size)
    weakref.finalize(handle, free, ptr)
    return handle
