"""BufferPool and MooncakeHostMemAllocator against a real mooncake_master."""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest

import mooncake
from mooncake import buffer_pool
from mooncake import store as st
from mooncake._hugepages import free_pages
from mooncake.buffer_pool import BufferLeaseView, BufferPool, MooncakeHostMemAllocator
from mooncake.store import MooncakeDistributedStore

MiB = 1 << 20


def test_exports():
    import mooncake.store as st

    assert st.BufferPool is BufferPool and st.RegisteredBufferPool is BufferPool
    assert st.BufferLease is buffer_pool.BufferLease
    assert st.MooncakeHostMemAllocator is MooncakeHostMemAllocator
    assert mooncake.BufferPool is mooncake.RegisteredBufferPool is BufferPool


def test_store_checks():
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(None)
    with pytest.raises(RuntimeError, match="_get_pyclient_capsule"):
        BufferPool(object())
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(MooncakeDistributedStore())  # never set up


def test_parameter_checks(store_master, stores):
    s = stores(store_master, buffer="4MB")
    with pytest.raises(RuntimeError, match="must be positive"):
        BufferPool(s, min_size_class=0)
    with pytest.raises(RuntimeError, match="must be positive"):
        BufferPool(s, alignment=0)
    for bad in (3, 4, 12):
        with pytest.raises(RuntimeError, match="power of two"):
            BufferPool(s, alignment=bad)
    pool = BufferPool(s)
    with pytest.raises(RuntimeError, match="timeout must be non-negative"):
        pool.acquire(1, timeout=-1)
    with pytest.raises(RuntimeError, match="exceeds pool capacity"):
        pool.acquire(2**64 - 1)


def test_requires_local_buffer(store_master, stores):
    s = stores(store_master, buffer=0)
    with pytest.raises(RuntimeError, match="requires a store configured with a local buffer"):
        BufferPool(s)


def test_closed_store_capsule_is_none(store_master, stores):
    s = stores(store_master, buffer="4MB")
    assert s._get_pyclient_capsule() is not None
    s.close()
    assert s._get_pyclient_capsule() is None
    with pytest.raises(RuntimeError, match="not initialized"):
        BufferPool(s)


def test_capacity_rules(store_master, stores):
    s = stores(store_master, buffer="4MB")
    assert BufferPool(s).capacity == 8 * MiB
    assert BufferPool(s, 1 * MiB).capacity == 4 * MiB
    assert BufferPool(s, 16 * MiB).capacity == 16 * MiB
    assert BufferPool(s).max_size_class == 8 * MiB


def test_lease_in_local_buffer_put_get(store_master, stores):
    writer = stores(store_master, buffer="4MB")
    reader = stores(store_master, buffer="4MB")
    pool = BufferPool(writer)
    data = np.random.default_rng(1).integers(0, 256, 1 * MiB, dtype=np.uint8).tobytes()
    with pool.acquire(len(data)) as lease:
        assert lease.size == len(data) and lease.ptr % 64 == 0
        view = lease.buffer
        assert view.format == "B" and view.ndim == 1 and not view.readonly
        view[:] = data
        view.release()
        assert writer.put_from("pool-k", lease.ptr, lease.size) == 0
        assert pool.overflow_registrations == 0  # the local buffer held it
    assert reader.get("pool-k") == data
    rpool = BufferPool(reader)
    with rpool.acquire(len(data)) as lease:
        assert reader.get_into("pool-k", lease.ptr, lease.size) == len(data)
        assert bytes(lease.buffer) == data


def test_zero_size_and_copy_from_buffers(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"))
    with pool.acquire(0) as empty:
        assert empty.size == 0 and len(empty.buffer) == 0 and empty.ptr != 0
        assert pool.used_bytes == 1  # one byte behind an empty lease
    with pool.acquire(6) as lease:
        assert lease.copy_from_buffers([b"ab", memoryview(b"cd"), bytearray(b"ef")]) == 6
        assert bytes(lease.buffer) == b"abcdef"
        with pytest.raises(ValueError):
            lease.copy_from_buffers([b"1234567"])


def test_release_idempotent_refused_with_views(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"))
    lease = pool.acquire(4096)
    view = lease.buffer
    arr = np.frombuffer(lease.buffer, dtype=np.uint8)  # a second export
    with pytest.raises(RuntimeError, match="exported views exist"):
        lease.release()
    view.release()
    with pytest.raises(RuntimeError, match="exported views exist"):
        lease.release()
    del arr
    lease.release()
    lease.release()
    with pytest.raises(RuntimeError, match="buffer lease is closed"):
        _ = lease.ptr
    assert pool.active_leases == 0 and pool.used_bytes == 0


def test_dropped_lease_returns_memory(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"))
    lease = pool.acquire(MiB)
    view = lease.buffer
    del lease
    gc.collect()
    assert pool.active_leases == 1  # the view keeps the memory
    view[0] = 7
    del view
    gc.collect()
    assert pool.active_leases == 0 and pool.used_bytes == 0


def test_exhaustion_and_overflow(store_master, stores):
    s = stores(store_master, buffer="4MB")
    pool = BufferPool(s, block_on_exhaustion=False)  # capacity 8 MiB
    local = pool.acquire(4 * MiB)
    assert pool.overflow_registrations == 0
    over = pool.acquire(3 * MiB)  # the local buffer is full: an overflow region
    assert pool.overflow_registrations == 1
    assert over.ptr % pool.alignment == 0
    over.buffer[:3] = b"xyz"
    assert s.put_from("overflow-k", over.ptr, 3) == 0
    # Zero-copy into the registered overflow region (a copying get would
    # wait for a staging chunk of the full local buffer).
    assert s.get_into("overflow-k", over.ptr + MiB, 3) == 3
    assert bytes(over.buffer[MiB : MiB + 3]) == b"xyz"
    with pytest.raises(RuntimeError, match="buffer pool is exhausted"):
        pool.acquire(2 * MiB)
    over.release()
    local.release()
    assert pool.used_bytes == 0


def test_max_regions(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"), max_regions=2)
    a, b = pool.acquire(10, block=False), pool.acquire(10, block=False)
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(10, block=False)
    a.release()
    pool.acquire(10, block=False).release()
    b.release()


def test_blocking_timeout_and_wakeup(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"), default_timeout=0.2)
    held = pool.acquire(8 * MiB)
    with pytest.raises(RuntimeError, match="timed out waiting for buffer"):
        pool.acquire(MiB)  # default timeout
    with pytest.raises(RuntimeError, match="timed out waiting for buffer"):
        pool.acquire(MiB, block=True, timeout=0)
    got: list = []
    started = threading.Event()

    def waiter():
        started.set()
        got.append(pool.acquire(MiB, timeout=30))

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    held.release()
    t.join(30)
    assert not t.is_alive() and got and got[0].size == MiB
    got[0].release()


def test_prewarm_reuses_registered_overflow(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"), prewarm_size=2 * MiB, prewarm_count=1)
    assert pool.overflow_registrations == 1
    local = pool.acquire(4 * MiB)
    for _ in range(3):
        with pool.acquire(MiB) as over:  # served by the prewarmed region
            over.buffer[0] = 1
    assert pool.overflow_registrations == 1
    local.release()
    pool.close()


def test_close_refused_with_live_leases(store_master, stores):
    pool = BufferPool(stores(store_master, buffer="4MB"))
    lease = pool.acquire(100)
    with pytest.raises(RuntimeError, match="cannot close buffer pool with active leases"):
        pool.close()
    pool.acquire(1).release()  # still open and usable
    lease.release()
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="buffer pool is closed"):
        pool.acquire(1)


def test_pool_and_staging_share_the_local_buffer(store_master, stores):
    """Copying puts stage through the local buffer around live leases."""
    s = stores(store_master, buffer="8MB")
    pool = BufferPool(s)
    lease = pool.acquire(3 * MiB)
    pattern = bytes(range(256)) * (3 * MiB // 256)
    lease.buffer[:] = pattern
    big = np.random.default_rng(2).integers(0, 256, 6 * MiB, dtype=np.uint8).tobytes()
    assert s.put("staged-big", big) == 0
    assert s.get("staged-big") == big
    assert bytes(lease.buffer) == pattern
    lease.release()


def test_a_lease_of_the_whole_local_buffer_starves_no_copying_call(store_master, stores):
    """Issue 35: with one lease holding all of the local buffer (a DataProto
    array kept alive, say), copying puts and gets waited for a staging chunk
    until the transfer timeout, failed, and get returned b"". They now stage
    through a reserve of their own; the lease keeps working."""
    s = stores(store_master, buffer="4MB")
    pool = BufferPool(s)
    lease = pool.acquire(4 * MiB)
    assert pool.overflow_registrations == 0  # the lease is the whole local buffer
    pattern = bytes(range(256)) * (4 * MiB // 256)
    lease.buffer[:] = pattern
    small = b"manifest of a structured object"
    big = np.random.default_rng(3).integers(0, 256, 9 * MiB + 13, dtype=np.uint8).tobytes()
    assert s.put("leased-small", small) == 0
    assert s.get("leased-small") == small
    assert s.put("leased-big", big) == 0  # larger than the whole local buffer
    assert s.get("leased-big") == big
    assert s.get_batch(["leased-small", "leased-big"]) == [small, big]
    assert bytes(lease.buffer) == pattern  # staging never wrote into the lease
    # The lease itself still works, zero-copy both ways.
    assert s.put_from("leased-lease", lease.ptr, lease.size) == 0
    lease.buffer[:] = bytes(4 * MiB)
    assert s.get_into("leased-lease", lease.ptr, lease.size) == 4 * MiB
    assert bytes(lease.buffer) == pattern
    lease.release()
    # Released, the whole buffer is free again for a lease (staging kept none of it).
    with pool.acquire(4 * MiB):
        assert pool.overflow_registrations == 0
        assert s.get("leased-small") == small


def test_host_mem_allocator():
    a = MooncakeHostMemAllocator()
    ptr = a.alloc(MiB)
    assert ptr and ptr % 4096 == 0
    import ctypes

    ctypes.memset(ptr, 0x5A, MiB)
    assert ctypes.string_at(ptr + MiB - 2, 2) == b"ZZ"
    assert a.free(ptr) == 0
    assert a.free(ptr) == -1
    assert a.free(12345) == -1
    with pytest.raises(RuntimeError, match="Invalid argument"):
        a.alloc(0)
    with pytest.raises(ValueError):
        MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="4MB")


def test_host_mem_registered_with_store(store_master, stores):
    s = stores(store_master, buffer=0)
    a = MooncakeHostMemAllocator()
    ptr = a.alloc(64 * 1024)
    try:
        import ctypes

        ctypes.memmove(ptr, b"shared!", 7)
        assert s.register_buffer(ptr, 64 * 1024) == 0
        assert s.put_from("hostmem", ptr, 7) == 0
        assert s.get_into("hostmem", ptr + 100, 7) == 7
        assert ctypes.string_at(ptr + 100, 7) == b"shared!"
        assert s.unregister_buffer(ptr) == 0
    finally:
        a.free(ptr)


@pytest.mark.parametrize("size", ["2MB", "1GB"])
def test_hugepage_allocator_without_reserved_pages(size):
    page = {"2MB": 2 * MiB, "1GB": 1 << 30}[size]
    if free_pages(page):
        pytest.skip(f"this host has {size} huge pages reserved")
    a = MooncakeHostMemAllocator(use_hugepage=True, hugepage_size=size)
    with pytest.raises(RuntimeError, match=f"no {size} huge pages reserved"):
        a.alloc(1)


def test_hugepage_allocator(huge_pages_2mb):
    huge_pages_2mb(2)
    a = MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="2MB")
    ptr = a.alloc(1)
    assert ptr % (2 * MiB) == 0
    ctypes.memmove(ptr, b"huge", 4)
    assert ctypes.string_at(ptr, 4) == b"huge"
    assert a.free(ptr) == 0
    with pytest.raises(ValueError):
        MooncakeHostMemAllocator(use_hugepage=True, hugepage_size="4KB")


def test_lease_views_are_buffer_lease_views(store_master, stores):
    s = stores(store_master, buffer="4MB")
    pool = BufferPool(s)
    lease = pool.acquire(100)
    view = lease.buffer
    assert isinstance(view.obj, BufferLeaseView) and isinstance(view.obj, st.BufferLeaseView)
    assert st.RegisteredBufferLeaseView is BufferLeaseView
    assert view.obj.ptr() == lease.ptr and view.obj.size() == 100
    view[:3] = b"abc"
    with pytest.raises(RuntimeError, match="exported views exist"):
        lease.release()
    del view
    gc.collect()
    lease.release()
    pool.close()


def test_allocator_c_function_addresses():
    a = MooncakeHostMemAllocator()
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(a.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(a.get_free_func_addr())
    ptr = alloc(4096)
    assert ptr
    ctypes.memmove(ptr, b"from C", 6)
    assert ctypes.string_at(ptr, 6) == b"from C"
    assert free(ptr) == 0
    assert free(ptr) == -1  # already freed
    assert alloc(0) is None  # a failed allocation is NULL
    assert a.get_alloc_func_addr() == a.get_alloc_func_addr()
