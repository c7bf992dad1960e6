"""Dummy mode of `MooncakeDistributedStore`: a client of a standalone
``mooncake_client`` daemon on this host (upstream ``setup_dummy``).

The daemon is the real client (its segment, its place in the cluster); a
dummy forwards every store call to it over a Unix socket, and bulk data
moves through shared memory: the dummy's local buffer and the buffers it
registers are memfd regions the daemon maps. See docs/store-deployment.md
("Deployment").
"""

from __future__ import annotations

import os
import threading
from typing import Any

from mooncake import _lib
from mooncake._lib import INT, PTR, STR, U64
from mooncake._store_types import parse_size

_SIGNATURES = {
    "mc_store_setup_dummy": ([U64, STR, U64, STR, STR], INT),
    "mc_store_alloc_from_mem_pool": ([U64, U64], U64),
    "mc_store_dummy_metrics": ([U64], PTR),
    "mc_store_dummy_register_fd": ([U64, U64, U64, INT, U64], INT),
}


def _native() -> Any:
    return _lib.bind(_SIGNATURES)


def _scope_for(keyspace: str | None, worker_scope: str | None) -> str:
    """The worker scope a dummy joins: worker_scope, else keyspace, else a
    scope of its own (so that omitted scopes never share a hot cache)."""
    if worker_scope:
        return str(worker_scope)
    if keyspace:
        return str(keyspace)
    return f"worker-{os.getpid()}-{os.urandom(6).hex()}"


class _DummyMode:
    """`setup_dummy` and the calls that only a dummy client has."""

    _handle: int
    _lib: Any

    def setup_dummy(
        self,
        mem_pool_size: int | str,
        local_buffer_size: int | str,
        server_address: str,
        *,
        keyspace: str | None = None,
        worker_scope: str | None = None,
    ) -> int:
        """Connect to the ``mooncake_client`` at `server_address` ("host:port",
        its ``--port``) on this host; 0, or a negative error number.

        `local_buffer_size` bytes of shared memory stage calls on memory
        that is not registered (0: such calls fail with -600).
        `mem_pool_size` bounds the total of `alloc_from_mem_pool` (0: no
        bound). `worker_scope` names the hot cache domain: dummies of one
        scope share the daemon's hot cache; it defaults to `keyspace`, else
        to a scope of this client alone. A `keyspace` must equal the
        daemon's ``--tenant_id`` (-600 otherwise). Bad argument types or
        values raise (TypeError, ValueError); a daemon that cannot be
        reached is -900 (RPC_FAIL).
        """
        pool = parse_size(mem_pool_size)
        buffer = parse_size(local_buffer_size)
        if not isinstance(server_address, str) or ":" not in server_address:
            raise ValueError(f"server_address {server_address!r}: want 'host:port'")
        for name, value in (("keyspace", keyspace), ("worker_scope", worker_scope)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        if not self._handle:
            self._handle = self._lib.mc_store_create()
        rc = _native().mc_store_setup_dummy(
            self._handle,
            server_address.encode(),
            buffer,
            _scope_for(keyspace, worker_scope).encode(),
            (keyspace or "").encode(),
        )
        if rc == 0:
            self._dummy_pool = (pool, 0)
            self._dummy_lock = threading.Lock()
        return rc

    def _is_dummy(self) -> bool:
        return getattr(self, "_dummy_pool", None) is not None and bool(self._handle)

    def alloc_from_mem_pool(self, size: int) -> int:
        """Shared memory of `size` bytes to `register_buffer` (dummy mode);
        its address, or 0 on failure (not a dummy, past `mem_pool_size`)."""
        if not self._is_dummy() or isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            return 0
        with self._dummy_lock:
            bound, used = self._dummy_pool
            if bound and used + size > bound:
                return 0
            ptr = _native().mc_store_alloc_from_mem_pool(self._handle, size)
            if ptr:
                self._dummy_pool = (bound, used + size)
        return int(ptr)

    def metrics_text(self) -> str:
        """The dummy client's metrics and its scope's hot cache counters, in
        Prometheus' text format. RuntimeError outside dummy mode (this build
        serves a real client's metrics only through a mooncake_client's
        --enable_http_server)."""
        if not self._is_dummy():
            raise RuntimeError("metrics_text: only a dummy client (setup_dummy) has metrics here")
        return _lib.take_string(_native().mc_store_dummy_metrics(self._handle)) or ""

    def _register_dummy_buffer(self, ptr: int, size: int) -> int:
        """register_buffer in dummy mode: memory of a MooncakeHostMemAllocator
        goes with its memfd (no /proc/self/map_files lookup, which needs
        privileges); other memory is found by the library."""
        from mooncake.buffer_pool import shared_file_of

        found = shared_file_of(int(ptr), int(size)) if ptr and size > 0 else None
        if found is None:
            return self._lib.mc_store_register_buffer(self._handle, ptr, size)
        fd, offset = found
        return _native().mc_store_dummy_register_fd(self._handle, ptr, size, fd, offset)

    def _forget_dummy(self) -> None:
        self._dummy_pool = None
