"""Process-wide host memory allocator for pluggable-allocator hooks.

Upstream's `MooncakeHostMemAllocator` wraps one process-wide shared-memory
helper: every `alloc(size)` is a new memfd mapped ``MAP_SHARED |
MAP_POPULATE``, on huge pages when ``MC_STORE_USE_HUGEPAGE`` is set, and
``get_alloc_func_addr()`` / ``get_free_func_addr()`` hand the C addresses
of that hugepage alloc/free to code that plugs in its own allocator (a C
library taking ``void *(*)(size_t)`` and ``int (*)(void *)``).

This module is that process-wide allocator, built on
`mooncake.buffer_pool.MooncakeHostMemAllocator`:

* `host_allocator()`: the allocator itself, created on first use with
  ``use_hugepage`` from ``MC_STORE_USE_HUGEPAGE`` (1/true/yes/on) and the
  page size from ``MC_STORE_HUGEPAGE_SIZE`` ("2MB" or "1GB", default
  "2MB"), read at that moment;
* `alloc(size) -> int` / `free(ptr) -> int`: through it (RuntimeError on a
  failed allocation, size 0 included; `free` is 0, or -1 for an unknown or
  already freed address);
* `get_alloc_func_addr()` / `get_free_func_addr()`: C functions
  ``void *alloc(size_t)`` (NULL on failure) and ``int free(void *)`` over
  the same allocator, valid for the life of the process. They take the
  GIL when called, so C may call them from any thread.

Memory from here is what a dummy client passes to its ``mooncake_client``
daemon (sealed memfds), and it can be registered with
``store.register_buffer`` for zero-copy calls.
"""

from __future__ import annotations

import os
import threading

from mooncake._hugepages import page_shift
from mooncake.buffer_pool import MooncakeHostMemAllocator

__all__ = [
    "MooncakeHostMemAllocator",
    "alloc",
    "free",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "host_allocator",
]

_lock = threading.Lock()
_allocator: MooncakeHostMemAllocator | None = None


def _settings() -> tuple[bool, str]:
    use = os.environ.get("MC_STORE_USE_HUGEPAGE", "").strip().lower() in ("1", "true", "yes", "on")
    size = (os.environ.get("MC_STORE_HUGEPAGE_SIZE") or "2MB").strip().upper()
    try:
        page_shift(size)
    except ValueError as e:
        raise ValueError(f"MC_STORE_HUGEPAGE_SIZE={size!r}: {e}") from None
    return use, size


def host_allocator() -> MooncakeHostMemAllocator:
    """The process-wide allocator (created on first call from the
    MC_STORE_USE_HUGEPAGE / MC_STORE_HUGEPAGE_SIZE environment; ValueError
    for a page size there are no huge pages of)."""
    global _allocator
    with _lock:
        if _allocator is None:
            use, size = _settings()
            _allocator = MooncakeHostMemAllocator(use_hugepage=use, hugepage_size=size)
        return _allocator


def alloc(size: int) -> int:
    """Map `size` bytes of a new memfd through `host_allocator()`; the address."""
    return host_allocator().alloc(size)


def free(ptr: int) -> int:
    """Unmap memory from `alloc`: 0, or -1 for an unknown or already freed address."""
    return host_allocator().free(ptr)


def get_alloc_func_addr() -> int:
    """Address of C ``void *alloc(size_t size)`` over `host_allocator()` (NULL on failure)."""
    return host_allocator().get_alloc_func_addr()


def get_free_func_addr() -> int:
    """Address of C ``int free(void *ptr)`` over `host_allocator()` (0, or -1)."""
    return host_allocator().get_free_func_addr()
