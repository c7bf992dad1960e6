"""Session, replica-management and metadata-put calls of `MooncakeDistributedStore`.

`_SessionsAndTasks` is a mixin that `mooncake.store.MooncakeDistributedStore`
inherits; it expects the store's ``_handle`` and ``health_check``. The
calls keep upstream's names and return conventions:

* Sessions for layer-wise loading: ``batch_get_session_start`` asks the
  master once per key, then ``batch_get_into_multi_buffer_ranges`` reads
  ranges without asking it again, until ``batch_get_session_end``; likewise
  ``batch_put_session_start`` (reserve), ``batch_put_from_multi_buffer_ranges``
  (ranged writes), ``batch_put_session_end`` (publish) or
  ``batch_put_session_revoke`` (cancel).
* Replica management: ``batch_replica_clear``, ``create_copy_task``,
  ``create_move_task``, ``query_task`` (with `TaskType`, `TaskStatus`,
  `QueryTaskResponse`).
* ``put_from_with_metadata``: one object ``[metadata][data]`` from two buffers.
"""

from __future__ import annotations

import ctypes
import enum
import json
from collections.abc import Sequence
from typing import Any

from mooncake import _lib
from mooncake._lib import I64, INT, PTR, STR, U64, P

_RANGES = [U64, INT, P(STR), P(INT), P(U64), P(U64), P(U64), P(I64)]
_SIGNATURES = {
    "mc_store_get_session_start": ([U64, INT, P(STR), P(INT)], None),
    "mc_store_get_session_ranges": (_RANGES, None),
    "mc_store_get_session_end": ([U64, INT, P(STR)], INT),
    "mc_store_put_session_start": ([U64, INT, P(STR), P(U64), STR, P(INT)], None),
    "mc_store_put_session_ranges": (_RANGES, None),
    "mc_store_put_session_end": ([U64, INT, P(STR), P(INT)], None),
    "mc_store_put_session_revoke": ([U64, INT, P(STR), P(INT)], None),
    "mc_store_replica_clear": ([U64, INT, P(STR), STR, P(INT)], INT),
    "mc_store_create_copy_task": (
        [U64, STR, INT, P(STR), P(U64), P(U64)],
        INT,
    ),
    "mc_store_create_move_task": ([U64, STR, STR, STR, P(U64), P(U64)], INT),
    "mc_store_query_task": ([U64, U64, U64], PTR),
}

_INVALID_PARAMS = -600


class TaskType(enum.IntEnum):
    """What a replica task does (upstream `TaskType`)."""

    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    """A replica task's state (upstream `TaskStatus`); SUCCESS and FAILED are final."""

    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class QueryTaskResponse:
    """A task as `query_task` reports it (upstream `QueryTaskResponse`).

    `assigned_client` is the segment name (host:port) of the client that
    executes the task: the one holding the source replica. Read-only;
    two responses are equal when all their fields are.
    """

    __slots__ = (
        "id",
        "type",
        "status",
        "created_at_ms_epoch",
        "last_updated_at_ms_epoch",
        "assigned_client",
        "message",
    )

    id: tuple[int, int]
    type: TaskType
    status: TaskStatus
    created_at_ms_epoch: int
    last_updated_at_ms_epoch: int
    assigned_client: str
    message: str

    def __init__(
        self,
        id: tuple[int, int],  # noqa: A002  (upstream's field name)
        type: TaskType,  # noqa: A002
        status: TaskStatus,
        created_at_ms_epoch: int,
        last_updated_at_ms_epoch: int,
        assigned_client: str,
        message: str,
    ) -> None:
        values = (id, type, status, created_at_ms_epoch, last_updated_at_ms_epoch)
        values += (assigned_client, message)
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"QueryTaskResponse is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"QueryTaskResponse is read-only: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"QueryTaskResponse({inner})"


def _u64s(values: Sequence[int]) -> ctypes.Array:
    return (U64 * len(values))(*[int(v) for v in values])


def _valid_u64s(values: Any) -> bool:
    try:
        return all(not isinstance(v, bool) and 0 <= int(v) < 1 << 64 for v in values)
    except (TypeError, ValueError):
        return False


def _span_rows(ptrs: Any, sizes: Any, offsets: Any) -> bool:
    """Whether one key's span lists are equally long lists of u64s."""
    try:
        n = len(ptrs)
        return n == len(sizes) == len(offsets) and all(
            _valid_u64s(x) for x in (ptrs, sizes, offsets)
        )
    except TypeError:
        return False


class _SessionsAndTasks:
    """Sessions, replica management and `put_from_with_metadata` (see the module doc)."""

    _handle: int  # and health_check(), batch_put_from_multi_buffers(): the store's

    def _native_sessions(self) -> ctypes.CDLL:
        return _lib.bind(_SIGNATURES)

    def _ready(self) -> bool:
        return bool(self._handle) and self.health_check() != 1  # type: ignore[attr-defined]

    # -- put with metadata -------------------------------------------------

    def put_from_with_metadata(
        self,
        key: str,
        buffer_ptr: int,
        metadata_buffer_ptr: int,
        size: int,
        metadata_size: int,
        config: Any = None,
    ) -> int:
        """Store ``[metadata_size bytes at metadata_buffer_ptr][size bytes at buffer_ptr]``.

        Zero-copy, as `put_from`. Returns 0, or on failure a *positive*
        error number (upstream's quirk: 600 for INVALID_PARAMS, ...).
        """
        rc = self.batch_put_from_multi_buffers(  # type: ignore[attr-defined]
            [key], [[metadata_buffer_ptr, buffer_ptr]], [[metadata_size, size]], config
        )[0]
        return -rc if rc < 0 else rc

    # -- read sessions -----------------------------------------------------

    def batch_get_session_start(self, keys: Sequence[str]) -> list[int]:
        """Open read sessions with one master query; per key 0 or an error number.

        -704 missing, -702 no complete replica, -707 lease already expired.
        A key's earlier session is replaced. ``[]`` for no keys or a store
        not set up.
        """
        if not keys or not self._ready():
            return []
        results = (INT * len(keys))()
        self._native_sessions().mc_store_get_session_start(
            self._handle, len(keys), _lib.key_array(keys), results
        )
        return results[:]

    def _ranges(self, fn: str, keys, all_ptrs, all_sizes, all_offsets) -> list[int]:
        n = len(keys)
        if n == 0 or not self._ready():
            return []
        if not (len(all_ptrs) == len(all_sizes) == len(all_offsets) == n):
            return [_INVALID_PARAMS] * n
        good = [i for i in range(n) if _span_rows(all_ptrs[i], all_sizes[i], all_offsets[i])]
        out = [_INVALID_PARAMS] * n
        if not good:
            return out
        counts = [len(all_ptrs[i]) for i in good]
        flat = [
            [int(v) for i in good for v in col[i]] for col in (all_ptrs, all_sizes, all_offsets)
        ]
        results = (I64 * len(good))()
        getattr(self._native_sessions(), fn)(
            self._handle,
            len(good),
            _lib.key_array([keys[i] for i in good]),
            (INT * len(counts))(*counts),
            _u64s(flat[0]),
            _u64s(flat[1]),
            _u64s(flat[2]),
            results,
        )
        for i, r in zip(good, results, strict=True):
            out[i] = r
        return out

    def batch_get_into_multi_buffer_ranges(
        self, keys, all_buffer_ptrs, all_sizes, all_src_offsets
    ) -> list[int]:
        """Per key with a read session, fill buffer j with ``all_sizes[i][j]`` bytes
        from object offset ``all_src_offsets[i][j]``; no master query.

        Per key: total bytes read, or -600 (no session, lists of unequal
        length, a range past the object's end), -707 (lease expired: the
        session is dropped), -800 (no replica could be read).
        """
        return self._ranges(
            "mc_store_get_session_ranges", keys, all_buffer_ptrs, all_sizes, all_src_offsets
        )

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        """Drop read sessions: 0, or -1 for a store not set up."""
        if not self._ready():
            return -1
        if not keys:
            return 0
        return self._native_sessions().mc_store_get_session_end(
            self._handle, len(keys), _lib.key_array(keys)
        )

    # -- write sessions ----------------------------------------------------

    def batch_put_session_start(
        self, keys: Sequence[str], sizes: Sequence[int], config: Any = None
    ) -> list[int]:
        """Reserve replicas per key (PutStart only); per key 0 or an error number.

        -600: size 0, a session already open for the key, ``group_ids``
        not one per key; -705 the key exists; -200 no space. The object is
        invisible until `batch_put_session_end`.
        """
        n = len(keys)
        if n == 0 or not self._ready():
            return []
        if len(sizes) != n or not _valid_u64s(sizes):
            return [_INVALID_PARAMS] * n
        try:
            cfg = config._json() if config is not None else None
        except (TypeError, ValueError):
            return [_INVALID_PARAMS] * n
        results = (INT * n)()
        self._native_sessions().mc_store_put_session_start(
            self._handle, n, _lib.key_array(keys), _u64s(sizes), cfg, results
        )
        return results[:]

    def batch_put_from_multi_buffer_ranges(
        self, keys, all_buffer_ptrs, all_sizes, all_dst_offsets
    ) -> list[int]:
        """Per key with a write session, write buffer j at object offset
        ``all_dst_offsets[i][j]`` of every reserved replica.

        Per key: total bytes written, or -600 (no session, unequal lists, a
        range past the object's end) or the transfer's error (the session
        end then revokes the object).
        """
        return self._ranges(
            "mc_store_put_session_ranges", keys, all_buffer_ptrs, all_sizes, all_dst_offsets
        )

    def _session_codes(self, fn: str, keys: Sequence[str]) -> list[int]:
        if not keys or not self._ready():
            return []
        results = (INT * len(keys))()
        getattr(self._native_sessions(), fn)(self._handle, len(keys), _lib.key_array(keys), results)
        return results[:]

    def batch_put_session_end(self, keys: Sequence[str]) -> list[int]:
        """Wait for each session's ranged writes, then publish (PutEnd).

        Per key 0 or an error: -600 no session; a failed ranged write's
        error (the object is revoked instead).
        """
        return self._session_codes("mc_store_put_session_end", keys)

    def batch_put_session_revoke(self, keys: Sequence[str]) -> list[int]:
        """Wait for each session's ranged writes, then cancel (PutRevoke); -600 no session."""
        return self._session_codes("mc_store_put_session_revoke", keys)

    # -- replica management ------------------------------------------------

    def batch_replica_clear(self, keys: Sequence[str], segment_name: str = "") -> list[str]:
        """Clear this client's objects; the keys cleared, in input order.

        With ``segment_name=""`` whole objects go (all replicas must be
        COMPLETE); otherwise only their replicas on that segment (the object
        goes with its last one). Keys written by other clients, with an
        active read lease, empty or missing are skipped.
        """
        keys = list(keys)
        if not keys or not self._ready():
            return []
        cleared = (INT * len(keys))()
        rc = self._native_sessions().mc_store_replica_clear(
            self._handle, len(keys), _lib.key_array(keys), str(segment_name).encode(), cleared
        )
        if rc != 0:
            return []
        return [k for k, c in zip(keys, cleared, strict=True) if c]

    def create_copy_task(self, key: str, targets: Sequence[str]) -> tuple[tuple[int, int], int]:
        """Copy `key` to the segments named in `targets`: ``(task_id, 0)`` or ``((0, 0), err)``.

        -704 missing key, -600 no targets or an unknown segment. A target
        that holds a replica already is skipped. Poll `query_task`.
        """
        if not self._ready():
            return (0, 0), _INVALID_PARAMS
        targets = [targets] if isinstance(targets, str) else [str(t) for t in targets]
        hi, lo = U64(), U64()
        rc = self._native_sessions().mc_store_create_copy_task(
            self._handle,
            str(key).encode(),
            len(targets),
            _lib.key_array(targets),
            ctypes.byref(hi),
            ctypes.byref(lo),
        )
        return ((hi.value, lo.value), 0) if rc == 0 else ((0, 0), rc)

    def create_move_task(self, key: str, source: str, target: str) -> tuple[tuple[int, int], int]:
        """Move `key`'s replica on segment `source` to `target`.

        ``(task_id, 0)`` or ``((0, 0), err)``: -704 missing key; -600
        unknown segment, ``source == target``, or no replica on `source`.
        """
        if not self._ready():
            return (0, 0), _INVALID_PARAMS
        hi, lo = U64(), U64()
        rc = self._native_sessions().mc_store_create_move_task(
            self._handle,
            str(key).encode(),
            str(source).encode(),
            str(target).encode(),
            ctypes.byref(hi),
            ctypes.byref(lo),
        )
        return ((hi.value, lo.value), 0) if rc == 0 else ((0, 0), rc)

    def query_task(self, task_id: Sequence[int]) -> tuple[QueryTaskResponse | None, int]:
        """``(QueryTaskResponse, 0)``, or ``(None, err)``: -1400 unknown task (finished
        tasks are kept 10 minutes), -600 a malformed id or a store not set up."""
        try:
            hi, lo = (int(x) for x in task_id)
        except (TypeError, ValueError):
            return None, _INVALID_PARAMS
        if not self._ready() or not _valid_u64s((hi, lo)):
            return None, _INVALID_PARAMS
        raw = _lib.take_string(self._native_sessions().mc_store_query_task(self._handle, hi, lo))
        d = json.loads(raw or '{"error_code": -1}')
        if d["error_code"] != 0:
            return None, d["error_code"]
        return (
            QueryTaskResponse(
                id=(d.get("id_hi", 0), d.get("id_lo", 0)),
                type=TaskType(d["type"]),
                status=TaskStatus(d["status"]),
                created_at_ms_epoch=d["created_at_ms_epoch"],
                last_updated_at_ms_epoch=d["last_updated_at_ms_epoch"],
                assigned_client=d["assigned_client"],
                message=d["message"],
            ),
            0,
        )
