"""mooncake.buffer_pool: registered buffers for zero-copy puts and gets.

`BufferPool(store)` leases ranges of the store client's local buffer, the
memory `setup` allocated and registered with the Transfer Engine, so a
lease is ready for ``put_from``/``get_into`` with no registration on the
hot path. When the local buffer is full, a lease is an *overflow* region:
memory allocated for it (aligned to `alignment`) and registered with
``store.register_buffer``; it is unregistered and freed on release.
`prewarm(size, count)` registers overflow regions ahead of time; overflow
leases reuse them before allocating.

`MooncakeHostMemAllocator` allocates shared host memory (memfd + shared
mmap, optionally on huge pages) that the caller then registers itself.

Example::

    pool = BufferPool(store)
    with pool.acquire(4096) as lease:
        lease.buffer[:5] = b"hello"
        store.put_from("k", lease.ptr, 5)
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from mooncake import _lib
from mooncake._buffers import MemoryView, sized
from mooncake._hugepages import free_pages, page_shift

CAPSULE_NAME = b"mooncake.PyClient.shared_ptr"
LOCAL_ALIGNMENT = 64  # alignment of leases carved from the local buffer

_u64 = ctypes.c_uint64
_SIGNATURES = {
    "mc_store_local_buffer": ([_u64, ctypes.POINTER(_u64), ctypes.POINTER(_u64)], ctypes.c_int),
    "mc_store_local_alloc": ([_u64, _u64, _u64], _u64),
    "mc_store_local_free": ([_u64, _u64], ctypes.c_int),
}

# The C library's functions through the process's own symbols (dlopen(NULL)):
# Python is linked against it, so no search (ctypes.util.find_library runs
# subprocesses and imports a dozen modules) is needed to find it.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.posix_memalign.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int

_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid.restype = ctypes.c_int
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer.restype = ctypes.c_void_p


def _client_handle(store: Any) -> int:
    """The native client handle behind `store`, checked as upstream checks it."""
    if store is None:
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    get = getattr(store, "_get_pyclient_capsule", None)
    if get is None:
        raise RuntimeError(
            "BufferPool store must be a PyClient or store wrapper that implements "
            "_get_pyclient_capsule()"
        )
    capsule = get()
    if capsule is None:
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    if not _capsule_valid(capsule, CAPSULE_NAME):
        raise RuntimeError("_get_pyclient_capsule() must return a mooncake.PyClient.shared_ptr")
    return int(_capsule_pointer(capsule, CAPSULE_NAME))


class _Region:
    """Memory behind one lease. It returns itself to the pool once: on
    release, or when the last view of it and its lease are gone."""

    __slots__ = ("pool", "ptr", "size", "overflow", "returned", "__weakref__")

    def __init__(self, pool: BufferPool, ptr: int, size: int, overflow: bool) -> None:
        self.pool, self.ptr, self.size, self.overflow = pool, ptr, size, overflow
        self.returned = False

    def give_back(self) -> None:
        if not self.returned:
            self.returned = True
            self.pool._give_back(self)

    def __del__(self) -> None:
        try:
            self.give_back()
        except Exception:  # interpreter shutdown
            pass


class BufferLeaseView(MemoryView):
    """The memory behind a lease's views: ``lease.buffer`` is a memoryview
    whose ``.obj`` is one of these (1-D bytes, writable). A view keeps the
    lease's memory alive (through `region`), and a lease cannot be released
    while one exists.
    """

    __slots__ = ()
    _extra_slots = ("region",)


class BufferLease:
    """A leased range of registered memory: `ptr`, `size`, `buffer`.

    `buffer` is a new writable 1-D memoryview (format "B") of `size` bytes
    each time. `release()` is idempotent and refused while views of the
    lease are alive; the lease is a context manager that releases on exit.
    """

    def __init__(self, region: _Region, size: int) -> None:
        self._region: _Region | None = region
        self._size = size
        self._bytes: Any = None
        self._refs = 0
        if size > 0:
            self._bytes = sized(BufferLeaseView, size).from_address(region.ptr)
            self._bytes.region = region  # views keep the memory alive
            self._refs = sys.getrefcount(self._bytes)

    @property
    def ptr(self) -> int:
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        return self._region.ptr

    @property
    def size(self) -> int:
        return self._size

    @property
    def buffer(self) -> memoryview:
        if self._region is None:
            raise RuntimeError("buffer lease is closed")
        if self._bytes is None:
            return memoryview(bytearray())
        return memoryview(self._bytes).cast("B")

    def _exported(self) -> bool:
        return self._bytes is not None and sys.getrefcount(self._bytes) > self._refs

    def copy_from_buffers(self, buffers: Sequence[Any]) -> int:
        """Copy `buffers` back to back into the lease; the bytes copied."""
        view, off = self.buffer, 0
        try:
            for b in buffers:
                m = memoryview(b).cast("B")
                if off + m.nbytes > self._size:
                    raise ValueError(f"buffers hold more than the lease's {self._size} bytes")
                view[off : off + m.nbytes] = m
                off += m.nbytes
        finally:
            view.release()
        return off

    def release(self) -> None:
        region = self._region
        if region is None:
            return
        if self._exported():
            raise RuntimeError("cannot release buffer while exported views exist")
        self._region, self._bytes = None, None
        region.give_back()

    def __enter__(self) -> BufferLease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "closed" if self._region is None else f"ptr={self._region.ptr:#x}"
        return f"BufferLease({state}, size={self._size})"


class BufferPool:
    """Leases of registered memory for a set-up `MooncakeDistributedStore`.

    Capacity is ``2 * local_buffer_size`` when `max_bytes` is 0, else
    ``max(max_bytes, local_buffer_size)``; leases beyond the local buffer are
    overflow regions (registered on demand, aligned to `alignment`).
    `max_regions` bounds the number of live leases. `acquire` blocks while
    the pool is full when `block_on_exhaustion` (default) or ``block=True``,
    up to `timeout` seconds (`default_timeout`; None waits for a release).
    `min_size_class`/`max_size_class` are validated only: every lease is
    exactly its requested size (as upstream). `prewarm_size`/`prewarm_count`
    call `prewarm` at construction. All errors are RuntimeError.
    """

    def __init__(
        self,
        store: Any,
        max_bytes: int = 0,
        min_size_class: int = 65536,
        max_size_class: int | None = None,
        alignment: int = 8388608,
        block_on_exhaustion: bool = True,
        default_timeout: float | None = None,
        max_regions: int | None = None,
        prewarm_size: int | None = None,
        prewarm_count: int = 0,
    ) -> None:
        self._handle = _client_handle(store)
        self._store = store
        if min_size_class <= 0 or alignment <= 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment & (alignment - 1) or alignment < ctypes.sizeof(ctypes.c_void_p):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        if max_bytes < 0:
            raise RuntimeError("max_bytes must be non-negative")
        if max_regions is not None and max_regions <= 0:
            raise RuntimeError("max_regions must be positive")
        if default_timeout is not None and default_timeout < 0:
            raise RuntimeError("timeout must be non-negative")
        self._lib = _lib.bind(_SIGNATURES)
        base, size = _u64(), _u64()
        if self._lib.mc_store_local_buffer(self._handle, ctypes.byref(base), ctypes.byref(size)):
            raise RuntimeError("MooncakeDistributedStore is not initialized")
        if size.value == 0:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        self.local_buffer_size = size.value
        self.capacity = 2 * size.value if max_bytes == 0 else max(max_bytes, size.value)
        self.max_bytes = self.capacity
        self.min_size_class = min_size_class
        self.max_size_class = self.capacity if max_size_class is None else max_size_class
        if self.max_size_class < min_size_class:
            raise RuntimeError("max_size_class must be at least min_size_class")
        self.alignment = alignment
        self.block_on_exhaustion = block_on_exhaustion
        self.default_timeout = default_timeout
        self.max_regions = max_regions
        self._cond = threading.Condition(threading.RLock())
        self._used = 0  # bytes of live and reserving leases
        self._active = 0
        self._reserving = 0
        self._closing = self._closed = False
        self._prewarmed: list[tuple[int, int]] = []  # overflow regions kept (ptr, size)
        self._idle: list[tuple[int, int]] = []  # the prewarmed ones not leased now
        self.overflow_registrations = 0  # overflow regions registered so far
        if prewarm_size is not None and prewarm_count > 0:
            self.prewarm(prewarm_size, prewarm_count)

    # -- leases ----------------------------------------------------------------

    def acquire(
        self, size: int, block: bool | None = None, timeout: float | None = None
    ) -> BufferLease:
        """A lease of `size` bytes (at least 1 byte of memory behind it)."""
        if block is None:
            block = self.block_on_exhaustion
        if timeout is None:
            timeout = self.default_timeout
        if timeout is not None and timeout < 0:
            raise RuntimeError("timeout must be non-negative")
        if not isinstance(size, int) or size < 0:
            raise RuntimeError("size must be a non-negative integer")
        n = max(size, 1)
        if n > self.capacity:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_open()
                if self._admissible(n):
                    break
                if not block:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for buffer")
                self._cond.wait(left)
            self._used += n
            self._reserving += 1
        try:
            region = self._allocate(n)
        except BaseException:
            with self._cond:
                self._used -= n
                self._reserving -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._reserving -= 1
            self._active += 1
            self._cond.notify_all()
        return BufferLease(region, size)

    buffer = acquire

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("buffer pool is closed")
        if self._closing:
            raise RuntimeError("buffer pool is closing")

    def _admissible(self, n: int) -> bool:
        if self._used + n > self.capacity:
            return False
        return self.max_regions is None or self._active + self._reserving < self.max_regions

    def _allocate(self, n: int) -> _Region:
        ptr = self._lib.mc_store_local_alloc(self._handle, n, LOCAL_ALIGNMENT)
        if ptr:
            return _Region(self, ptr, n, overflow=False)
        with self._cond:
            fit = next((i for i, (_, s) in enumerate(self._idle) if s >= n), None)
            if fit is not None:
                p, s = self._idle.pop(fit)
                return _Region(self, p, s, overflow=True)
        return _Region(self, self._register_overflow(n), n, overflow=True)

    def _register_overflow(self, n: int) -> int:
        p = ctypes.c_void_p()
        if _libc.posix_memalign(ctypes.byref(p), self.alignment, n) != 0 or not p.value:
            raise RuntimeError(f"overflow buffer allocation of {n} bytes failed")
        if self._store.register_buffer(p.value, n) != 0:
            _libc.free(p.value)
            raise RuntimeError("overflow buffer registration failed")
        self.overflow_registrations += 1
        return p.value

    def _free_overflow(self, ptr: int) -> None:
        self._store.unregister_buffer(ptr)
        _libc.free(ptr)

    def _give_back(self, region: _Region) -> None:
        with self._cond:
            self._active -= 1
            self._used -= region.size
            if not region.overflow:
                self._lib.mc_store_local_free(self._handle, region.ptr)
            elif any(p == region.ptr for p, _ in self._prewarmed):
                self._idle.append((region.ptr, region.size))
            else:
                self._free_overflow(region.ptr)
            self._cond.notify_all()

    # -- prewarm and lifecycle -------------------------------------------------

    def prewarm(self, size: int, count: int = 1) -> None:
        """Register `count` overflow regions of `size` bytes now, for later overflow leases."""
        if size <= 0 or count < 0:
            raise RuntimeError("prewarm size must be positive and count non-negative")
        with self._cond:
            self._check_open()
        for _ in range(count):
            ptr = self._register_overflow(size)
            with self._cond:
                self._prewarmed.append((ptr, size))
                self._idle.append((ptr, size))

    @property
    def active_leases(self) -> int:
        with self._cond:
            return self._active

    @property
    def used_bytes(self) -> int:
        with self._cond:
            return self._used

    def close(self) -> None:
        """Close the pool; refused (RuntimeError) while leases are live. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            try:
                while self._reserving:
                    self._cond.wait()
                if self._active:
                    raise RuntimeError("cannot close buffer pool with active leases")
                for ptr, _ in self._prewarmed:
                    self._free_overflow(ptr)
                self._prewarmed.clear()
                self._idle.clear()
                self._closed = True
            finally:
                self._closing = False

    def __enter__(self) -> BufferPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView

# -- shared host memory ---------------------------------------------------------

_MAP_SHARED = 0x01
_MAP_POPULATE = 0x08000
_MAP_FAILED = ctypes.c_void_p(-1).value
_ALLOC_FUNC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_FREE_FUNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_MFD_HUGETLB = 0x0004
_MFD_HUGE_SHIFT = 26


_ALLOCATORS: weakref.WeakSet[MooncakeHostMemAllocator] = weakref.WeakSet()


def shared_file_of(ptr: int, size: int) -> tuple[int, int] | None:
    """(memfd, offset of ptr in it) when [ptr, ptr+size) lies in memory of a live
    `MooncakeHostMemAllocator`, else None (a dummy client passes the memfd to its daemon)."""
    for allocator in list(_ALLOCATORS):
        with allocator._lock:
            for base, (fd, length) in allocator._maps.items():
                if base <= ptr and ptr + size <= base + length:
                    return fd, ptr - base
    return None


class MooncakeHostMemAllocator:
    """Shared host memory: each `alloc` is a new memfd mapped MAP_SHARED|MAP_POPULATE.

    With ``use_hugepage=True`` the memfd is on huge pages of
    `hugepage_size` ("2MB" or "1GB") and sizes round up to whole pages; the
    kernel must have such pages reserved (``vm.nr_hugepages`` or
    ``/sys/kernel/mm/hugepages``), else `alloc` raises a RuntimeError that
    says so. The memory is not registered: pass it to
    ``store.register_buffer`` for zero-copy calls.
    """

    def __init__(self, use_hugepage: bool = False, hugepage_size: str = "2MB") -> None:
        page_shift(hugepage_size)  # ValueError for a size there are no pages of
        self.use_hugepage = bool(use_hugepage)
        self.hugepage_size = hugepage_size
        self._lock = threading.Lock()
        self._maps: dict[int, tuple[int, int]] = {}  # ptr -> (fd, length)
        self._c_funcs: tuple[Any, Any] | None = None
        _ALLOCATORS.add(self)

    def alloc(self, size: int) -> int:
        """Map `size` bytes of a new memfd; the address. RuntimeError on failure."""
        if not isinstance(size, int) or size <= 0:
            raise RuntimeError("Failed to map shared memory: Invalid argument")
        flags, length = 0, size
        if self.use_hugepage:
            shift = page_shift(self.hugepage_size)
            page = 1 << shift
            length = (size + page - 1) // page * page
            if free_pages(page) < length // page:
                raise RuntimeError(
                    f"no {self.hugepage_size} huge pages reserved for {length} bytes "
                    f"(free: {free_pages(page)}); reserve them with "
                    "`sysctl vm.nr_hugepages=N` or /sys/kernel/mm/hugepages"
                )
            flags = _MFD_HUGETLB | (shift << _MFD_HUGE_SHIFT)
        try:
            fd = os.memfd_create("mooncake_shm", flags | os.MFD_ALLOW_SEALING)
        except OSError as e:
            raise RuntimeError(f"Failed to create shared memory: {e.strerror}") from e
        try:
            os.ftruncate(fd, length)
            # A mooncake_client daemon maps only memfds that cannot shrink
            # under its mapping (a truncated one would kill it with SIGBUS).
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            ptr = _libc.mmap(
                None,
                length,
                mmap.PROT_READ | mmap.PROT_WRITE,
                _MAP_SHARED | _MAP_POPULATE,
                fd,
                0,
            )
            if ptr is None or ptr == _MAP_FAILED:
                err = ctypes.get_errno()
                raise RuntimeError(f"Failed to map shared memory: {os.strerror(err)}")
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._maps[ptr] = (fd, length)
        return ptr

    def free(self, ptr: int) -> int:
        """Unmap memory from `alloc`: 0, or -1 for an unknown (or already freed) address."""
        with self._lock:
            entry = self._maps.pop(ptr, None)
        if entry is None:
            return -1
        fd, length = entry
        _libc.munmap(ptr, length)
        os.close(fd)
        return 0

    def get_alloc_func_addr(self) -> int:
        """Address of a C function ``void *alloc(size_t size)`` that allocates
        as `alloc` does (NULL on failure), for pluggable allocators. It stays
        valid while this allocator lives."""
        return self._c_functions()[0]

    def get_free_func_addr(self) -> int:
        """Address of a C function ``int free(void *ptr)`` that frees as
        `free` does (0, or -1 for an unknown pointer)."""
        return self._c_functions()[1]

    def _c_functions(self) -> tuple[int, int]:
        with self._lock:
            if self._c_funcs is None:

                def c_alloc(size: int) -> int | None:
                    try:
                        return self.alloc(size)
                    except RuntimeError:
                        return None

                def c_free(ptr: int | None) -> int:
                    return self.free(ptr or 0)

                # The callbacks are kept on the instance: C may call them as long as it lives.
                self._c_funcs = (_ALLOC_FUNC(c_alloc), _FREE_FUNC(c_free))
            alloc, free = self._c_funcs
        return (
            ctypes.cast(alloc, ctypes.c_void_p).value or 0,
            ctypes.cast(free, ctypes.c_void_p).value or 0,
        )
