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

from mooncake._buffers import MemoryView, sized


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
    """A disk replica's file. This build keeps no disk replicas, so no
    descriptor it returns has one; the type exists for callers that name it."""

    __slots__ = ("file_path", "object_size")

    def __init__(self, file_path: str, object_size: int) -> None:
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One readable replica of an object, as `get_replica_desc` lists it."""

    __slots__ = ("status", "_memory")

    def __init__(self, status: ReplicaStatus, memory: MemoryDescriptor) -> None:
        self.status = status
        self._memory = memory

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def get_memory_descriptor(self) -> MemoryDescriptor:
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        raise RuntimeError("not a disk replica (this build keeps memory replicas only)")

    def __repr__(self) -> str:
        return f"ReplicaDescriptor(status={self.status.name}, {self._memory!r})"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReplicaDescriptor:
        desc = Descriptor(int(d["size"]), int(d["buffer_address"]), d["transport_endpoint"])
        return cls(ReplicaStatus(int(d["status"])), MemoryDescriptor(desc))


class BufferHandle(MemoryView):
    """A copy of an object in memory the client owns (upstream `get_buffer`).

    It exposes the bytes through the buffer protocol (`memoryview(h)`,
    `bytes(h)`, `numpy.frombuffer(h)`: 1-D, one byte per item) and as
    `ptr()` / `size()`. The memory is released when the handle and every
    view of it are gone.
    """

    __slots__ = ()

    def len(self) -> int:
        """Size in bytes (upstream's name for `size`)."""
        return self.size()


def take_buffer(ptr: int, size: int, free: Callable[[int], Any]) -> BufferHandle:
    """Wrap `size` bytes at `ptr` (owned by the caller) in a handle that
    calls `free(ptr)` once it and all its views are collected."""
    handle = sized(BufferHandle, size).from_address(ptr)
    weakref.finalize(handle, free, ptr)
    return handle
