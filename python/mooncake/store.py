"""mooncake.store: the distributed KV store's Python API, as upstream's.

`MooncakeDistributedStore` is a client of a `mooncake_master`. It can
contribute memory to the pool (`global_segment_size`) and puts and gets
objects; bytes move directly between clients through the Transfer Engine.
Methods keep upstream's signatures and return conventions: integers (0 or
a negative error number from `ErrorCode`), `b""` for a missing object on
`get`, `None` for a missing tensor.

Example::

    store = MooncakeDistributedStore()
    store.setup("127.0.0.1", "http://127.0.0.1:8080/metadata",
                "512MB", "64MB", "tcp", "", "127.0.0.1:50051")
    store.put("k", b"value")
    assert store.get("k") == b"value"
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from mooncake import _lib, _tls
from mooncake._buffers import address_of
from mooncake._engram import EngramStore, EngramStoreConfig
from mooncake._hugepages import page_shift
from mooncake._lib import I64, INT, PTR, STR, U64, P
from mooncake._numa import bind_to_numa_node
from mooncake._store_dummy import _DummyMode
from mooncake._store_fleet import (
    StoreOperationError,
    _FleetOps,
    init_tracing,
    split_fleet_options,
    tracing_requested,
)
from mooncake._store_offload import _DiskTier
from mooncake._store_sessions import (  # noqa: F401  (the task types are re-exported)
    QueryTaskResponse,
    TaskStatus,
    TaskType,
    _SessionsAndTasks,
)
from mooncake._store_tensors import ParallelAxis, ReadTarget, TensorParallelism, _TensorAPI
from mooncake._store_types import (
    _PUT_UPSERT,
    _PUT_ZERO_COPY,
    _SIZE,  # noqa: F401  (kept importable here)
    _UNITS,  # noqa: F401
    BufferHandle,
    Descriptor,
    DiskDescriptor,
    ErrorCode,
    MemoryDescriptor,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    SoftPinAction,
    lazy_logger,
    parse_size,
    take_buffer,
)
from mooncake._tensor import deserialize_tensor, serialize_tensor, tensor_metadata_size

# Every public name of upstream's `store` module (its pybind11 module has no
# `__all__`, so `from store import *` takes them all), plus our own additions.
# RangedReadSnapshot and MooncakeDistributedNoFRegister are not implemented.
__all__ = [
    "StoreOperationError",
    "init_tracing",
    "BufferHandle",
    "BufferLease",
    "BufferLeaseView",
    "BufferPool",
    "Descriptor",
    "DiskDescriptor",
    "EngramStore",
    "EngramStoreConfig",
    "ErrorCode",
    "MemoryDescriptor",
    "MooncakeDistributedStore",
    "MooncakeHostMemAllocator",
    "ObjectDataType",
    "ParallelAxis",
    "QueryTaskResponse",
    "ReadTarget",
    "RegisteredBufferLease",
    "RegisteredBufferLeaseView",
    "RegisteredBufferPool",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "ReplicateConfig",
    "SoftPinAction",
    "TaskStatus",
    "TaskType",
    "TensorParallelism",
    "bind_to_numa_node",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "parse_size",
    # enum members upstream exports at module level (its `export_values()`)
    "UNKNOWN",
    "KVCACHE",
    "TENSOR",
    "WEIGHT",
    "SAMPLE",
    "ACTIVATION",
    "GRADIENT",
    "OPTIMIZER_STATE",
    "METADATA",
    "GENERAL",
    "UNDEFINED",
    "INITIALIZED",
    "COMPLETE",
    "REMOVED",
    "REPLICA_COPY",
    "REPLICA_MOVE",
    "PENDING",
    "PROCESSING",
    "SUCCESS",
    "FAILED",
]

# Upstream exports ObjectDataType's, ReplicaStatus's, TaskType's and
# TaskStatus's members in that order; PROCESSING and FAILED are in both
# ReplicaStatus and TaskStatus, and TaskStatus's, exported last, win.
UNKNOWN = ObjectDataType.UNKNOWN
KVCACHE = ObjectDataType.KVCACHE
TENSOR = ObjectDataType.TENSOR
WEIGHT = ObjectDataType.WEIGHT
SAMPLE = ObjectDataType.SAMPLE
ACTIVATION = ObjectDataType.ACTIVATION
GRADIENT = ObjectDataType.GRADIENT
OPTIMIZER_STATE = ObjectDataType.OPTIMIZER_STATE
METADATA = ObjectDataType.METADATA
GENERAL = ObjectDataType.GENERAL
UNDEFINED = ReplicaStatus.UNDEFINED
INITIALIZED = ReplicaStatus.INITIALIZED
COMPLETE = ReplicaStatus.COMPLETE
REMOVED = ReplicaStatus.REMOVED
REPLICA_COPY = TaskType.REPLICA_COPY
REPLICA_MOVE = TaskType.REPLICA_MOVE
PENDING = TaskStatus.PENDING
PROCESSING = TaskStatus.PROCESSING
SUCCESS = TaskStatus.SUCCESS
FAILED = TaskStatus.FAILED


class StoreSetupArgs(ctypes.Structure):
    """mooncake.h's ``mc_store_setup_args`` (tests/test_package.py checks the layout)."""

    _fields_ = [
        ("local_hostname", STR),
        ("metadata_server", STR),
        ("global_segment_size", U64),
        ("local_buffer_size", U64),
        ("protocol", STR),
        ("device_name", STR),
        ("master_server_addr", STR),
        ("engine", U64),
        ("tenant_id", STR),
        ("hugepage_size", U64),
    ]


_SIGNATURES = {
    "mc_store_create": ([], U64),
    "mc_store_setup": ([U64, P(StoreSetupArgs)], INT),
    "mc_store_close": ([U64], INT),
    "mc_store_health_check": ([U64], INT),
    "mc_store_get_hostname": ([U64], PTR),
    "mc_store_put": (
        [U64, INT, P(STR), P(INT), P(U64), P(U64), STR, INT, P(INT)],
        INT,
    ),
    "mc_store_get_into": (
        [U64, INT, P(STR), P(INT), P(U64), P(U64), INT, P(I64)],
        None,
    ),
    "mc_store_get": ([U64, INT, P(STR), P(U64), P(I64)], None),
    "mc_store_get_sized": ([U64, INT, P(STR), PTR, P(I64)], None),
    "mc_store_get_ranges": ([U64, INT, P(STR), P(U64), P(U64), P(U64), P(I64)], None),
    "mc_store_exist": ([U64, INT, P(STR), P(INT)], None),
    "mc_store_is_exist": ([U64, STR], INT),
    "mc_store_get_size": ([U64, STR], I64),
    "mc_store_replica_desc": ([U64, INT, P(STR)], PTR),
    "mc_store_remove": ([U64, INT, P(STR), INT, P(INT)], None),
    "mc_store_remove_by_regex": ([U64, STR, INT], I64),
    "mc_store_remove_all": ([U64, INT], I64),
    "mc_store_register_buffer": ([U64, U64, U64], INT),
    "mc_store_unregister_buffer": ([U64, U64], INT),
}


def _native() -> ctypes.CDLL:
    return _lib.bind(_SIGNATURES)


# mc_store_get_sized's callback: (first, count, sizes, addrs); it sets
# addrs[i] for each i in [first, first + count) whose sizes[i] >= 0.
_ALLOC_ALL_FN = ctypes.CFUNCTYPE(None, INT, INT, P(I64), P(U64))

# A bytes object of n bytes whose contents the caller fills before anyone
# else sees it (CPython's documented way to build bytes in place).
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t]
_new_bytes.restype = ctypes.py_object


def _bytes_address(b: bytes) -> int:
    """Address of a bytes object's contents (c_char_p points into it)."""
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


_U64_MAX = (1 << 64) - 1


def _u64s(values: Sequence[int]) -> ctypes.Array:
    return (U64 * len(values))(*[int(v) for v in values])


def _ints(values: Sequence[int]) -> ctypes.Array:
    return (INT * len(values))(*[int(v) for v in values])


_log = lazy_logger("mooncake.store")


class _SetupError(Exception):
    """A setup argument that is invalid or asks for what this build lacks."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _SetupParams(NamedTuple):
    """setup()'s arguments, parsed and validated: what reaches the library."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    rdma_devices: str
    master_server_addr: str
    engine: Any
    tenant_id: str
    hugepage_bytes: int  # 0: normal pages
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""  # "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH
    client_http_port: int = 0  # 0: no client metrics server
    tls: tuple[str | None, str | None, str | None] = (None, None, None)  # None: MC_TLS_*


_SETUP_NAMES = (
    "local_hostname",
    "metadata_server",
    "global_segment_size",
    "local_buffer_size",
    "protocol",
    "rdma_devices",
    "master_server_addr",
    "engine",
    "enable_ssd_offload",
    "ssd_offload_path",
    "tenant_id",
    "enable_client_http_server",
    "client_http_port",
)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


# Keyword-only setup options (not in upstream's positional signature), as
# MooncakeHostMemAllocator takes them.
_SETUP_KEYWORDS = ("use_hugepage", "hugepage_size", "tls_cert_file", "tls_key_file", "tls_ca_file")


def _setup_params(args: Sequence[Any], kwargs: dict[str, Any]) -> _SetupParams:
    if len(args) > len(_SETUP_NAMES):
        raise TypeError(f"setup() takes at most {len(_SETUP_NAMES)} arguments ({len(args)} given)")
    values = dict(zip(_SETUP_NAMES, args, strict=False))
    for k, v in kwargs.items():
        if k not in _SETUP_NAMES and k not in _SETUP_KEYWORDS:
            raise TypeError(f"setup() got an unexpected keyword argument {k!r}")
        if k in values:
            raise TypeError(f"setup() got multiple values for argument {k!r}")
        values[k] = v
    missing = [n for n in _SETUP_NAMES[:7] if n not in values]
    if missing:
        raise TypeError(f"setup() missing arguments: {', '.join(missing)}")
    return _validated(values)


def _dict_setup_params(config: dict[str, Any]) -> _SetupParams:
    cfg = {k: str(v) for k, v in config.items()}
    if "local_hostname" not in cfg or "metadata_server" not in cfg:
        raise _SetupError(
            ErrorCode.INVALID_PARAMS, "config needs local_hostname and metadata_server"
        )
    values: dict[str, Any] = {
        "local_hostname": cfg["local_hostname"],
        "metadata_server": cfg["metadata_server"],
        "global_segment_size": cfg.get("global_segment_size", 16 << 20),
        "local_buffer_size": cfg.get("local_buffer_size", 16 << 20),
        "protocol": cfg.get("protocol", "tcp"),
        "rdma_devices": cfg.get("device_name", cfg.get("rdma_devices", "")),
        "master_server_addr": cfg.get(
            "master_server_addr", cfg.get("master_server_address", "127.0.0.1:50051")
        ),
        "ipc_socket_path": cfg.get("ipc_socket_path", ""),
    }
    for k in (
        "tenant_id",
        "enable_ssd_offload",
        "ssd_offload_path",
        "enable_client_http_server",
        "client_http_port",
        *_SETUP_KEYWORDS,
    ):
        if k in cfg:
            values[k] = cfg[k]
    return _validated(values)


def _validated(values: dict[str, Any]) -> _SetupParams:
    if values.get("ipc_socket_path"):
        raise _SetupError(
            ErrorCode.NOT_SUPPORTED,
            "ipc_socket_path: this build does not serve dummy clients",
        )
    port = values.get("client_http_port", 9300)
    try:
        if isinstance(port, bool) or not 0 < int(port) < 65536:
            raise ValueError
    except (TypeError, ValueError):
        raise _SetupError(ErrorCode.INVALID_PARAMS, f"invalid client_http_port {port!r}") from None
    try:
        segment = parse_size(values["global_segment_size"])
        buffer = parse_size(values["local_buffer_size"])
    except ValueError as e:
        raise _SetupError(ErrorCode.INVALID_PARAMS, str(e)) from None
    hugepage_bytes = _hugepage_bytes(values)
    return _SetupParams(
        local_hostname=str(values["local_hostname"]),
        metadata_server=str(values["metadata_server"]),
        global_segment_size=segment,
        local_buffer_size=buffer,
        protocol=str(values["protocol"] or "tcp"),
        rdma_devices=str(values["rdma_devices"] or ""),
        master_server_addr=str(values["master_server_addr"]),
        engine=values.get("engine"),
        tenant_id=str(values.get("tenant_id") or "default"),
        hugepage_bytes=hugepage_bytes,
        enable_ssd_offload=_truthy(values.get("enable_ssd_offload", False)),
        ssd_offload_path=str(values.get("ssd_offload_path") or ""),
        client_http_port=int(port) if _truthy(values.get("enable_client_http_server")) else 0,
        tls=(values.get("tls_cert_file"), values.get("tls_key_file"), values.get("tls_ca_file")),
    )


def _hugepage_bytes(values: dict[str, Any]) -> int:
    """The huge page size setup asks for (0: none): `use_hugepage` and
    `hugepage_size`, defaulting to MC_STORE_USE_HUGEPAGE and
    MC_STORE_HUGEPAGE_SIZE ("2MB" when unset), as upstream's variables."""
    use = values.get("use_hugepage", os.environ.get("MC_STORE_USE_HUGEPAGE", ""))
    if not _truthy(use):
        return 0
    size = values.get("hugepage_size") or os.environ.get("MC_STORE_HUGEPAGE_SIZE") or "2MB"
    try:
        return 1 << page_shift(str(size).strip().upper())
    except ValueError as e:
        raise _SetupError(ErrorCode.INVALID_PARAMS, str(e)) from None


class MooncakeDistributedStore(_TensorAPI, _SessionsAndTasks, _DiskTier, _FleetOps, _DummyMode):
    """A KV store client (upstream `mooncake.store.MooncakeDistributedStore`)."""

    def __init__(self) -> None:
        self._lib = _native()
        self._handle = self._lib.mc_store_create()
        self._torch: Any = None
        # The TransferEngine given to setup: kept alive until close (the
        # native side retains the engine too, so closing the engine object
        # meanwhile does not stop the store).
        self._engine: Any = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # -- lifecycle ---------------------------------------------------------

    def setup(self, *args: Any, **kwargs: Any) -> int:
        """Set the client up; 0, or a negative error number.

        Forms: ``setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr,
        engine=None, enable_ssd_offload=False, ssd_offload_path="",
        tenant_id="default", enable_client_http_server=False,
        client_http_port=9300)`` or ``setup(config: dict)`` (required keys
        ``local_hostname`` and ``metadata_server``; defaults 16 MiB segment,
        16 MiB buffer, "tcp", "", "127.0.0.1:50051"). Sizes may be strings
        such as "16MB". ``protocol="rdma"`` runs TCP on a host without an
        RDMA transport (see docs/store.md). ``enable_ssd_offload=True``
        starts the disk tier in ``ssd_offload_path`` (or
        MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else /data/file_storage): -600
        for a directory that is missing, relative or not writable, -1300
        when the master runs without --enable_offload. The dict key
        ``ipc_socket_path`` (serving dummy clients in process, which this
        build does not do) returns NOT_SUPPORTED (-1012).
        ``enable_client_http_server=True`` serves this client's metrics
        (/metrics, /breakdown, /tracing) on ``client_http_port`` of the
        local hostname's address, as ``start_metrics_server`` does; a port
        that cannot be bound fails setup.
        Keyword-only ``use_hugepage=False, hugepage_size="2MB"`` (defaults:
        MC_STORE_USE_HUGEPAGE, MC_STORE_HUGEPAGE_SIZE) put the segment and
        the local buffer on huge pages, which the kernel must have reserved
        (-600 otherwise; the log says how many are missing). Keyword-only
        ``tls_cert_file``, ``tls_key_file``, ``tls_ca_file`` (defaults:
        MC_TLS_CERT_FILE, MC_TLS_KEY_FILE, MC_TLS_CA_FILE) make the master,
        metadata and etcd connections TLS, for the whole process
        (docs/security.md, "TLS"); a half or unloadable configuration
        fails setup. The Store-RS
        keywords (``keyspace``, ``tenant``, ``domain``, ``object_set``,
        ``routed_writes``, ``replica_count``, ``route_topk``,
        ``eviction_high_watermark_percent``, ``eviction_low_watermark_percent``)
        are described in docs/store-operations.md; a bad value is -600. A
        closed store can be set up again.
        """
        dict_form = len(args) == 1 and not kwargs and isinstance(args[0], dict)
        try:
            kwargs, fleet = split_fleet_options(args[0] if dict_form else kwargs)
            params = _dict_setup_params(kwargs) if dict_form else _setup_params(args, kwargs)
        except ValueError as e:
            _log.error("setup: %s", e)
            return int(ErrorCode.INVALID_PARAMS)
        except _SetupError as e:
            _log.error("setup: %s", e)
            return int(e.code)
        engine_handle = 0
        if params.engine is not None:
            engine_handle = int(params.engine.get_engine_ptr())
            if not engine_handle:
                _log.error("setup: the engine given was closed")
                return int(ErrorCode.INVALID_PARAMS)
        if not self._handle:  # closed: start over with a new native handle
            self._handle = self._lib.mc_store_create()
        try:
            self._set_fleet_options(fleet)
            if tracing_requested():
                init_tracing()
        except StoreOperationError as e:
            _log.error("setup: %s", e)
            return e.code
        args = StoreSetupArgs(
            local_hostname=params.local_hostname.encode(),
            metadata_server=params.metadata_server.encode(),
            global_segment_size=params.global_segment_size,
            local_buffer_size=params.local_buffer_size,
            protocol=params.protocol.encode(),
            device_name=params.rdma_devices.encode(),
            master_server_addr=params.master_server_addr.encode(),
            engine=engine_handle,
            tenant_id=params.tenant_id.encode(),
            hugepage_size=params.hugepage_bytes,
        )
        _tls.apply(*params.tls)
        rc = self._lib.mc_store_setup(self._handle, ctypes.byref(args))
        if rc == 0 and params.enable_ssd_offload:
            rc = self._enable_offload(params.ssd_offload_path)
            if rc != 0:
                self.close()
        if rc == 0 and params.client_http_port:
            rc = self._serve_client_metrics(params)
        if rc == 0:
            self._engine = params.engine
        return rc

    def _serve_client_metrics(self, params: _SetupParams) -> int:
        """enable_client_http_server: the metrics server on client_http_port
        of the local hostname's address; on failure the client is closed."""
        host = (
            params.local_hostname.rsplit(":", 1)[0]
            if params.local_hostname.count(":") == 1
            else params.local_hostname
        )
        try:
            self.start_metrics_server(params.client_http_port, host.strip("[]") or "0.0.0.0")
        except StoreOperationError as e:
            _log.error("setup: client metrics server on port %d: %s", params.client_http_port, e)
            self.close()
            return e.code
        return 0

    def close(self) -> int:
        """Unmount this client's memory and release it. Idempotent; 0."""
        handle, self._handle = getattr(self, "_handle", 0), 0
        if handle:
            self._lib.mc_store_close(handle)
        self._engine = None
        self._forget_dummy()
        return 0

    def health_check(self) -> int:
        """0 healthy, 1 not initialized or closed, 2 master unreachable."""
        return self._lib.mc_store_health_check(self._handle) if self._handle else 1

    def get_hostname(self) -> str:
        """The effective local hostname (host:port) this client registered as."""
        return _lib.take_string(self._lib.mc_store_get_hostname(self._handle)) or ""

    # -- puts --------------------------------------------------------------

    @staticmethod
    def _bad_ranges(parts: Sequence[Sequence[tuple[int, int]]]) -> list[bool]:
        """Per key: a pointer or size that is not a non-negative int (ctypes would wrap it)."""
        out = []
        for p in parts:
            try:
                out.append(any(int(a) < 0 or int(z) < 0 for a, z in p))
            except (TypeError, ValueError):
                out.append(True)
        return out

    def _per_key(self, fn, keys, parts, *rest) -> list[int]:
        """Run fn on the keys whose ranges are valid; -600 for the others."""
        bad = self._bad_ranges(parts)
        if not any(bad):
            return fn(keys, parts, *rest)
        good = [i for i, b in enumerate(bad) if not b]
        out = [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        if good:
            for i, r in zip(
                good, fn([keys[i] for i in good], [parts[i] for i in good], *rest), strict=True
            ):
                out[i] = r
        return out

    def _put(
        self, keys: Sequence[str], parts: Sequence[Sequence[tuple[int, int]]], config, flags: int
    ) -> list[int]:
        n = len(keys)
        if n == 0:
            return []
        if len(parts) != n:
            return [int(ErrorCode.INVALID_PARAMS)] * n
        if any(self._bad_ranges(parts)):
            return self._per_key(self._put, keys, parts, config, flags)
        counts = [len(p) for p in parts]
        ptrs = [a for p in parts for a, _ in p]
        sizes = [s for p in parts for _, s in p]
        results = (INT * n)()
        # No config: NULL, the library's default (the same as a default
        # ReplicateConfig), without encoding and decoding it on every put.
        cfg = None
        if config is not None:
            try:
                cfg = config._json()
            except (TypeError, ValueError):  # e.g. a data_type that is no ObjectDataType
                return [int(ErrorCode.INVALID_PARAMS)] * n
        self._lib.mc_store_put(
            self._handle,
            n,
            _lib.key_array(keys),
            _ints(counts),
            _u64s(ptrs),
            _u64s(sizes),
            cfg,
            flags,
            results,
        )
        return results[:]

    def _put_buffers(self, keys, values_per_key, config, flags) -> list[int]:
        keep: list[Any] = []
        parts = []
        for values in values_per_key:
            ranges = []
            for v in values:
                addr, size, k = address_of(v)
                keep.append(k)
                ranges.append((addr, size))
            parts.append(ranges)
        return self._put(keys, parts, config, flags)

    @staticmethod
    def _first(results: list[int]) -> int:
        return next((r for r in results if r != 0), 0)

    def put(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Store `value` (bytes-like) under `key`; 0 or negative.

        An existing key is left as it is, and the call returns 0 (upstream).
        """
        return self._put_buffers([key], [[value]], config, 0)[0]

    def put_parts(self, key: str, *parts: Any, config: ReplicateConfig | None = None) -> int:
        """Store the concatenation of `parts` under `key`."""
        return self._put_buffers([key], [list(parts)], config, 0)[0]

    def put_batch(
        self, keys: Sequence[str], values: Sequence[Any], config: ReplicateConfig | None = None
    ) -> int:
        """Store several values; 0, or the first failing key's error."""
        if len(keys) != len(values):
            return int(ErrorCode.INVALID_PARAMS)
        return self._first(self._put_buffers(keys, [[v] for v in values], config, 0))

    def upsert(self, key: str, value: Any, config: ReplicateConfig | None = None) -> int:
        """Insert or overwrite `key`."""
        return self._put_buffers([key], [[value]], config, _PUT_UPSERT)[0]

    def upsert_parts(self, key: str, *parts: Any, config: ReplicateConfig | None = None) -> int:
        """Insert or overwrite `key` with the concatenation of `parts`."""
        return self._put_buffers([key], [list(parts)], config, _PUT_UPSERT)[0]

    def upsert_batch(
        self, keys: Sequence[str], values: Sequence[Any], config: ReplicateConfig | None = None
    ) -> int:
        """Insert or overwrite several keys; 0 or the first error."""
        if len(keys) != len(values):
            return int(ErrorCode.INVALID_PARAMS)
        return self._first(self._put_buffers(keys, [[v] for v in values], config, _PUT_UPSERT))

    def put_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> int:
        """Zero-copy put of `size` bytes at `buffer_ptr`. Size 0 stores nothing (0)."""
        return self._put([key], [[(buffer_ptr, size)]], config, _PUT_ZERO_COPY)[0]

    def upsert_from(
        self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None
    ) -> int:
        """Zero-copy insert or overwrite."""
        return self._put([key], [[(buffer_ptr, size)]], config, _PUT_ZERO_COPY | _PUT_UPSERT)[0]

    def batch_put_from(
        self, keys, buffer_ptrs, sizes, config: ReplicateConfig | None = None
    ) -> list[int]:
        """Zero-copy put of several buffers; a code per key."""
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        return self._put(
            keys,
            [[(p, s)] for p, s in zip(buffer_ptrs, sizes, strict=True)],
            config,
            _PUT_ZERO_COPY,
        )

    def batch_upsert_from(
        self, keys, buffer_ptrs, sizes, config: ReplicateConfig | None = None
    ) -> list[int]:
        """Zero-copy insert or overwrite of several buffers; a code per key."""
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        flags = _PUT_ZERO_COPY | _PUT_UPSERT
        return self._put(
            keys, [[(p, s)] for p, s in zip(buffer_ptrs, sizes, strict=True)], config, flags
        )

    def batch_put_from_multi_buffers(
        self, keys, all_buffer_ptrs, all_sizes, config=None
    ) -> list[int]:
        """Zero-copy put where key i is the concatenation of its buffers."""
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes)) or any(
            len(p) != len(s) for p, s in zip(all_buffer_ptrs, all_sizes, strict=True)
        ):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        parts = [
            list(zip(p, s, strict=True)) for p, s in zip(all_buffer_ptrs, all_sizes, strict=True)
        ]
        return self._put(keys, parts, config, _PUT_ZERO_COPY)

    # -- gets --------------------------------------------------------------

    def _get_alloc(self, keys: Sequence[str]) -> list[tuple[int, int]]:
        n = len(keys)
        ptrs, results = (U64 * n)(), (I64 * n)()
        self._lib.mc_store_get(self._handle, n, _lib.key_array(keys), ptrs, results)
        return list(zip(ptrs, results, strict=True))

    def get(self, key: str) -> bytes:
        """The object's bytes; b"" if it is missing or cannot be read."""
        return self.get_batch([key])[0]

    def get_batch(self, keys: Sequence[str]) -> list[bytes]:
        """Bytes per key; b"" for each miss.

        Each object is read straight into the `bytes` returned for it: once
        the master has answered, the library asks for all of the batch's
        destinations in one call on this thread (`mc_store_get_sized`).
        """
        if not keys:
            return []
        n = len(keys)
        out: list[bytes] = [b""] * n

        def alloc_all(first: int, count: int, sizes: Any, addrs: Any) -> None:
            for i in range(first, first + count):
                size = sizes[i]
                if size >= 0:
                    out[i] = b = _new_bytes(None, size)
                    addrs[i] = _bytes_address(b)

        results = (I64 * n)()
        callback = _ALLOC_ALL_FN(alloc_all)
        self._lib.mc_store_get_sized(self._handle, n, _lib.key_array(keys), callback, results)
        return [b if r >= 0 else b"" for b, r in zip(out, results[:], strict=True)]

    def get_buffer(self, key: str) -> BufferHandle | None:
        """A copy of the object in memory this client owns, or None on a miss.

        The `BufferHandle` supports the buffer protocol and `ptr()`/`size()`;
        its memory is freed when it is collected.
        """
        return self.batch_get_buffer([key])[0]

    def batch_get_buffer(self, keys: Sequence[str]) -> list[BufferHandle | None]:
        """`get_buffer` per key; None for each miss."""
        if not keys:
            return []
        free = self._lib.mc_free
        return [take_buffer(p, r, free) if r >= 0 else None for p, r in self._get_alloc(keys)]

    def get_replica_desc(self, key: str) -> list[ReplicaDescriptor]:
        """The object's readable replicas; [] on a miss. Grants a read lease."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys: Sequence[str]) -> dict[str, list[ReplicaDescriptor]]:
        """Replicas per key; keys that are missing (or fail) are left out."""
        if not keys:
            return {}
        raw = _lib.take_string(
            self._lib.mc_store_replica_desc(self._handle, len(keys), _lib.key_array(keys))
        )
        if not raw:
            return {}
        out: dict[str, list[ReplicaDescriptor]] = {}
        for key, entry in zip(keys, json.loads(raw), strict=True):
            if "replicas" in entry:
                out[key] = [ReplicaDescriptor.from_json(r) for r in entry["replicas"]]
        return out

    def _get_into(self, keys, parts, zero_copy: bool) -> list[int]:
        n = len(keys)
        if n == 0:
            return []
        if any(self._bad_ranges(parts)):
            return self._per_key(self._get_into, keys, parts, zero_copy)
        counts = [len(p) for p in parts]
        ptrs = [a for p in parts for a, _ in p]
        sizes = [s for p in parts for _, s in p]
        results = (I64 * n)()
        self._lib.mc_store_get_into(
            self._handle,
            n,
            _lib.key_array(keys),
            _ints(counts),
            _u64s(ptrs),
            _u64s(sizes),
            int(zero_copy),
            results,
        )
        return results[:]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Read `key` into `size` bytes at `buffer_ptr`.

        Returns the bytes read, or negative (-600 if the buffer is too small).
        """
        return self._get_into([key], [[(buffer_ptr, size)]], True)[0]

    def batch_get_into(self, keys, buffer_ptrs, sizes) -> list[int]:
        """`get_into` for several keys; bytes read or negative per key."""
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        return self._get_into(
            keys, [[(p, s)] for p, s in zip(buffer_ptrs, sizes, strict=True)], True
        )

    def batch_get_into_multi_buffers(
        self, keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=False
    ) -> list[int]:
        """Read each key scattered in order over its buffers; bytes read or negative per key."""
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes)) or any(
            len(p) != len(s) for p, s in zip(all_buffer_ptrs, all_sizes, strict=True)
        ):
            return [int(ErrorCode.INVALID_PARAMS)] * len(keys)
        parts = [
            list(zip(p, s, strict=True)) for p, s in zip(all_buffer_ptrs, all_sizes, strict=True)
        ]
        return self._get_into(keys, parts, True)

    def get_into_ranges(
        self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets, all_sizes
    ) -> list:
        """Ranged reads, indexed [buffer][key][fragment]: bytes read or negative.

        Fragment k of key j for buffer i reads all_sizes[i][j][k] bytes at
        all_src_offsets[i][j][k] of the object into buffer_ptrs[i] +
        all_dst_offsets[i][j][k]. A range past the object's end is -600, as
        is a destination that starts in a registered buffer and runs past
        it, or past the end of the address space; every destination is
        checked before any byte moves. A key whose offset and size lists
        differ in length (or hold negative values) gets ``[-600]`` and the
        other keys are still read; lists of buffers that differ in length
        raise ValueError.
        """
        if not (
            len(buffer_ptrs)
            == len(all_keys)
            == len(all_dst_offsets)
            == len(all_src_offsets)
            == len(all_sizes)
        ):
            raise ValueError(
                "get_into_ranges: buffer_ptrs, all_keys, all_dst_offsets, "
                "all_src_offsets and all_sizes must have one entry per buffer"
            )
        bad = [int(ErrorCode.INVALID_PARAMS)]
        flat: list[tuple[str, int, int, int]] = []
        # layout[i][j]: fragment count of key j of buffer i, or None if refused.
        layout: list[list[int | None]] = []
        for i, base in enumerate(buffer_ptrs):
            keys_i, dsts_i, srcs_i, sizes_i = (
                all_keys[i],
                all_dst_offsets[i],
                all_src_offsets[i],
                all_sizes[i],
            )
            counts: list[int | None] = []
            for j, key in enumerate(keys_i):
                try:
                    dst, src, size = dsts_i[j], srcs_i[j], sizes_i[j]
                    # Every value is a u64 and no destination range runs
                    # past the end of the address space (ctypes would wrap
                    # it silently); Go checks the range against the
                    # registered buffers before any byte moves.
                    ok = (
                        len(dst) == len(src) == len(size)
                        and all(0 <= int(v) <= _U64_MAX for v in (base, *dst, *src, *size))
                        and all(
                            int(base) + int(d) + int(z) <= _U64_MAX
                            for d, z in zip(dst, size, strict=True)
                        )
                    )
                except (IndexError, TypeError, ValueError):
                    ok = False
                if not ok:
                    counts.append(None)
                    continue
                counts.append(len(size))
                flat.extend(
                    (key, int(base) + int(d), int(o), int(z))
                    for d, o, z in zip(dst, src, size, strict=True)
                )
            layout.append(counts)
        n = len(flat)
        results = (I64 * n)()
        if n:
            self._lib.mc_store_get_ranges(
                self._handle,
                n,
                _lib.key_array([f[0] for f in flat]),
                _u64s([f[1] for f in flat]),
                _u64s([f[2] for f in flat]),
                _u64s([f[3] for f in flat]),
                results,
            )
        out, k = [], 0
        for counts in layout:
            per_key = []
            for c in counts:
                if c is None:
                    per_key.append(list(bad))
                    continue
                per_key.append(list(results[k : k + c]))
                k += c
            out.append(per_key)
        return out

    # -- queries and removal --------------------------------------------------

    def batch_is_exist(self, keys: Sequence[str]) -> list[int]:
        """1 / 0 / negative per key. Grants read leases, as upstream."""
        n = len(keys)
        if n == 0:
            return []
        results = (INT * n)()
        self._lib.mc_store_exist(self._handle, n, _lib.key_array(keys), results)
        return results[:]

    def is_exist(self, key: str) -> int:
        """1 if `key` has a readable replica, 0 if not, negative on error."""
        return self._lib.mc_store_is_exist(self._handle, key.encode())

    def get_size(self, key: str) -> int:
        """The object's size, or negative (-704 missing)."""
        return self._lib.mc_store_get_size(self._handle, key.encode())

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> list[int]:
        """Remove keys; a code per key (-706 leased unless force)."""
        n = len(keys)
        if n == 0:
            return []
        results = (INT * n)()
        self._lib.mc_store_remove(self._handle, n, _lib.key_array(keys), int(force), results)
        return results[:]

    def remove(self, key: str, force: bool = False) -> int:
        """Remove `key`: 0, -704 missing, -706 leased (unless force), -703 incomplete."""
        return self.batch_remove([key], force)[0]

    def remove_by_regex(self, regex_pattern: str, force: bool = False) -> int:
        """Remove keys matching the pattern (searched, RE2 syntax); count or negative."""
        return self._lib.mc_store_remove_by_regex(self._handle, regex_pattern.encode(), int(force))

    def remove_all(self, force: bool = False) -> int:
        """Remove every removable object; count or negative."""
        return self._lib.mc_store_remove_all(self._handle, int(force))

    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Register memory for zero-copy calls (faster, not required)."""
        if self._is_dummy():
            return self._register_dummy_buffer(buffer_ptr, size)
        return self._lib.mc_store_register_buffer(self._handle, buffer_ptr, size)

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Withdraw memory registered with `register_buffer`."""
        return self._lib.mc_store_unregister_buffer(self._handle, buffer_ptr)

    # -- segments mounted after setup, BufferPool support (issue 10) -----------

    def mount_segment(
        self, path: str, size: int, offset: int = 0, protocol: str = "tcp", location: str = ""
    ) -> dict:
        """Map `size` bytes of the file at `path` from `offset` (page-aligned) and mount them.

        Returns ``{"ret": 0, "segment_ids": [...]}``, or ``{"ret": -1,
        "segment_ids": []}`` on any failure (the reason is logged).
        """
        ids, err = _lib_ptr(), _lib_ptr()
        rc = self._segments().mc_store_mount_segment(
            self._handle,
            str(path).encode(),
            int(size),
            int(offset),
            str(protocol).encode(),
            str(location).encode(),
            ctypes.byref(ids),
            ctypes.byref(err),
        )
        if rc != 0:
            _segment_failure("mount_segment", rc, err)
            return {"ret": -1, "segment_ids": []}
        return {"ret": 0, "segment_ids": _split_ids(ids)}

    def allocate_and_mount_segment(
        self, size: int, protocol: str = "tcp", location: str = ""
    ) -> dict:
        """Allocate `size` bytes (rounded up to 16 MiB) and mount them.

        Returns ``{"ret", "segment_ids", "allocated_size"}``; ret -1 on failure.
        """
        ids, err, allocated = _lib_ptr(), _lib_ptr(), U64()
        rc = -1
        if isinstance(size, int) and size > 0:
            rc = self._segments().mc_store_allocate_and_mount_segment(
                self._handle,
                size,
                str(protocol).encode(),
                str(location).encode(),
                ctypes.byref(allocated),
                ctypes.byref(ids),
                ctypes.byref(err),
            )
        if rc != 0:
            _segment_failure("allocate_and_mount_segment", rc, err)
            return {"ret": -1, "segment_ids": [], "allocated_size": 0}
        return {"ret": 0, "segment_ids": _split_ids(ids), "allocated_size": allocated.value}

    def unmount_segment(self, segment_ids, grace_period_seconds: int = 0) -> int:
        """Unmount segments from `mount_segment`; 0, or -1 (an unknown id).

        With ``grace_period_seconds > 0`` each segment takes no new
        replicas at once, stays readable, and is unmounted when the grace
        period ends (``0`` afterwards unmounts a draining one at once).
        """
        return self._unmount("unmount_segment", segment_ids, grace_period_seconds, False)

    def unmount_and_free_segment(self, segment_ids, grace_period_seconds: int = 0) -> int:
        """Unmount and free segments from `allocate_and_mount_segment`; 0 or -1."""
        return self._unmount("unmount_and_free_segment", segment_ids, grace_period_seconds, True)

    def _unmount(self, name: str, segment_ids, grace: int, allocated: bool) -> int:
        ids = [segment_ids] if isinstance(segment_ids, str) else list(segment_ids)
        if not ids or not all(isinstance(i, str) for i in ids):
            return -1
        err = _lib_ptr()
        rc = self._segments().mc_store_unmount_segment(
            self._handle,
            _lib.key_array(ids),
            len(ids),
            int(grace),
            int(allocated),
            ctypes.byref(err),
        )
        if rc != 0:
            _segment_failure(name, rc, err)
            return -1
        return 0

    def _segments(self) -> ctypes.CDLL:
        return _lib.bind(_SEGMENT_SIGNATURES)

    def _get_pyclient_capsule(self) -> Any:
        """A capsule ("mooncake.PyClient.shared_ptr") naming this set-up client, or None.

        `mooncake.buffer_pool.BufferPool` takes its client from it.
        """
        if not self._handle or self.health_check() == 1:
            return None
        return _new_capsule(self._handle)


def _tensor_metadata_size() -> int:
    """Size of the tensor object header (304)."""
    return tensor_metadata_size()


def _serialize_tensor(tensor: Any) -> tuple[bytes, int, int, Any]:
    """(header, data_ptr, nbytes, owner) for a tensor, as upstream's helper."""
    t, header = serialize_tensor(tensor)
    return header, t.data_ptr(), t.numel() * t.element_size(), t


def _deserialize_tensor(data: bytes) -> Any:
    """Rebuild a tensor from a stored object's bytes; None if invalid."""
    addr, size, keep = address_of(data)
    tensor = deserialize_tensor(addr, size)
    del keep
    return tensor


# -- segment calls and the client capsule (issue 10) ---------------------------

_SEGMENT_SIGNATURES = {
    "mc_store_mount_segment": ([U64, STR, U64, U64, STR, STR, P(PTR), P(PTR)], INT),
    "mc_store_allocate_and_mount_segment": (
        [U64, U64, STR, STR, P(U64), P(PTR), P(PTR)],
        INT,
    ),
    "mc_store_unmount_segment": ([U64, P(STR), INT, I64, INT, P(PTR)], INT),
}

_log = lazy_logger(__name__)


def _lib_ptr() -> ctypes.c_void_p:
    return ctypes.c_void_p()


def _split_ids(ids: ctypes.c_void_p) -> list[str]:
    text = _lib.take_string(ids.value) or ""
    return [i for i in text.split("\n") if i]


def _segment_failure(name: str, rc: int, err: ctypes.c_void_p) -> None:
    _log.warning("%s failed (%d): %s", name, rc, _lib.take_string(err.value) or "")


CAPSULE_NAME = b"mooncake.PyClient.shared_ptr"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_new.restype = ctypes.py_object


def _new_capsule(handle: int) -> Any:
    """A PyCapsule whose pointer is the native store handle."""
    return _capsule_new(handle, CAPSULE_NAME, None)


from mooncake.allocator import get_alloc_func_addr, get_free_func_addr  # noqa: E402
from mooncake.buffer_pool import (  # noqa: E402  (re-exports; buffer_pool does not import this module)
    BufferLease,
    BufferLeaseView,
    BufferPool,
    MooncakeHostMemAllocator,
)

RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
