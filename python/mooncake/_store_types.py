"""Value types of `mooncake.store` besides the client itself.

Enums and read-only descriptors as upstream's bindings expose them
(`ErrorCode`, `ObjectDataType`, `ReplicaStatus`, `ReplicaDescriptor`, ...),
`ReplicateConfig`, `parse_size`, the put flags, and `BufferHandle`, the
client-owned copy of an object that `get_buffer` returns. The store's parts
(`_store_tensors`, `_store_sessions`, `_store_dummy`, ...) take what they
share from here; `mooncake.store` composes them and re-exports these names.
"""

from __future__ import annotations

import enum
import json
import re
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


class ErrorCode(enum.IntEnum):
    """Upstream Mooncake Store error numbers: every one this package returns
    (the same table as kvstore/errors.go; a test keeps them equal)."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    REPLICA_NOT_FOUND = -710
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    ETCD_OPERATION_ERROR = -1000
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    NOT_SUPPORTED = -1012
    FILE_NOT_FOUND = -1100
    UNABLE_OFFLOAD = -1300
    TASK_NOT_FOUND = -1400
    TASK_PENDING_LIMIT_EXCEEDED = -1401
    TENANT_QUOTA_EXCEEDED = -1700
    TENANT_NOT_REGISTERED = -1701
    TENANT_NOT_EMPTY = -1702


class SoftPinAction(enum.IntEnum):
    """What a put does to the object's soft pin."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


_U64_MAX = (1 << 64) - 1


class ReplicateConfig:
    """Placement of an object (upstream `ReplicateConfig`)."""

    def __init__(self) -> None:
        self.replica_num: int = 1
        self.soft_pin_action: SoftPinAction = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: int | None = None
        self.with_hard_pin: bool = False
        self.preferred_segments: list[str] = []
        self.preferred_segment: str = ""
        self.prefer_alloc_in_same_node: bool = False
        self.data_type: ObjectDataType = ObjectDataType.UNKNOWN
        self.group_ids: list[str] | None = None
        # Store-RS placement (docs/store-operations.md).
        self.prefer_local: bool = False
        self.preferred_storage_owners: list[str] = []
        self.preferred_storage_owner: str = ""
        self._session_ids: list[str] = []

    @property
    def session_ids(self) -> list[str]:
        """Sessions to route the write to: always empty in this build.

        This store has no write sessions for a config to name (its
        ``batch_put_session_*`` calls are keyed by object key), so a
        non-empty list is refused with ValueError rather than carried and
        ignored; a list or tuple of anything but strings is a TypeError.
        """
        return list(self._session_ids)

    @session_ids.setter
    def session_ids(self, value: list[str]) -> None:
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, str) for i in value):
            raise TypeError(f"session_ids must be a list of str, not {value!r}")
        if value:
            raise ValueError(
                "ReplicateConfig.session_ids is not supported by this build: it has no "
                "write sessions to route a put to (leave it empty)"
            )
        self._session_ids = []

    @property
    def with_soft_pin(self) -> bool:
        """Upstream's earlier boolean for a soft pin: True is soft_pin_action ENABLE.

        Setting True enables the soft pin; False leaves soft_pin_action at
        PRESERVE (a new object is not pinned), as the field meant before upstream
        replaced it with soft_pin_action. Anything but a bool is a TypeError.
        """
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"with_soft_pin must be a bool, not {value!r}")
        self.soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self) -> int | None:
        """Soft pin TTL in ms (None: the master's default)."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value: int | None) -> None:
        # As upstream's Optional[uint64] field: anything else is a TypeError.
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64_MAX
        ):
            raise TypeError(
                f"soft_pin_ttl_ms must be None or an integer in [0, 2**64-1], not {value!r}"
            )
        self._soft_pin_ttl_ms = value

    def _json(self) -> bytes:
        return json.dumps(
            {
                "replica_num": int(self.replica_num),
                "soft_pin_action": int(self.soft_pin_action),
                "soft_pin_ttl_ms": None
                if self.soft_pin_ttl_ms is None
                else int(self.soft_pin_ttl_ms),
                "with_hard_pin": bool(self.with_hard_pin),
                "preferred_segments": list(self.preferred_segments),
                "preferred_segment": self.preferred_segment,
                "prefer_alloc_in_same_node": bool(self.prefer_alloc_in_same_node),
                "data_type": int(ObjectDataType(self.data_type)),
                "group_ids": None if self.group_ids is None else [str(g) for g in self.group_ids],
                "prefer_local": bool(self.prefer_local),
                "preferred_storage_owners": [str(o) for o in self.preferred_storage_owners],
                "preferred_storage_owner": str(self.preferred_storage_owner),
            }
        ).encode()

    def __str__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num}, "
            f"soft_pin_action={self.soft_pin_action.name}, "
            f"soft_pin_ttl_ms={self.soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
            f"preferred_segments={self.preferred_segments}, "
            f"preferred_segment={self.preferred_segment!r}, "
            f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node}, "
            f"data_type={ObjectDataType(self.data_type).name}, group_ids={self.group_ids}, "
            f"prefer_local={self.prefer_local}, "
            f"preferred_storage_owners={self.preferred_storage_owners}, "
            f"preferred_storage_owner={self.preferred_storage_owner!r}, "
            f"session_ids={self.session_ids})"
        )

    __repr__ = __str__


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(value: int | str) -> int:
    """Parse a size: an int, or a string such as "16MB", "16 MB", "1GiB", "4096".

    Units are 1024-based, as upstream's. Percentages are rejected.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid size {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"negative size {value}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"invalid size {value!r} (use bytes or a unit: KB, MB, GB, TB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


# The put flags of mc_store_put and mc_store_put_parts.
_PUT_UPSERT = 1
_PUT_ZERO_COPY = 2


class _LazyLogger:
    """A `logging.Logger` looked up on first use, so that importing
    `mooncake.store` does not import `logging` (a few ms of its import time)."""

    __slots__ = ("_name", "_logger")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self._name)
        return getattr(self._logger, attr)


def lazy_logger(name: str) -> Any:
    """The logger `name`, imported and created at its first call."""
    return _LazyLogger(name)
