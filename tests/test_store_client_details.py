"""Client-facing details of issue 35: the master's /get_all_segments in
upstream's plain-text form (SGLang's check_server), BufferHandle views that
index and iterate (format "B"), ReplicateConfig.session_ids, and the
process-wide `mooncake.allocator` module."""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import urllib.request

import numpy as np
import pytest

import mooncake.allocator as allocator_module
from mooncake._store_types import take_buffer
from mooncake.store import BufferHandle, ReplicateConfig


def _get_all_segments(master) -> tuple[int, str]:
    with urllib.request.urlopen(master.admin + "/get_all_segments", timeout=3) as r:
        return r.status, r.read().decode()


def test_get_all_segments_is_plain_text_names(master_factory, stores):
    m = master_factory()
    assert _get_all_segments(m) == (200, "")  # check_server keeps waiting
    a, b = stores(m), stores(m)
    status, body = _get_all_segments(m)
    assert status == 200
    assert sorted(body.splitlines()) == sorted([a.get_hostname(), b.get_hostname()])
    assert body.endswith("\n")
    # The details (mode included) are at /api/v1/segments/status.
    assert {s["name"] for s in m.segments()} == {a.get_hostname(), b.get_hostname()}
    assert all(s["mode"] == "ACTIVE" for s in m.segments())


def test_buffer_handle_memoryview_indexes_and_iterates():
    src = (ctypes.c_ubyte * 6)(*b"mooncake"[:6])
    freed: list[int] = []
    h = take_buffer(ctypes.addressof(src), 6, freed.append)
    view = memoryview(h)
    assert view.format == "B" and view.ndim == 1 and view.shape == (6,) and view.itemsize == 1
    assert view[0] == ord("m") and view[-1] == ord("a")
    assert list(view) == list(b"moonca") == list(memoryview(h))
    assert bytes(h) == b"moonca" == view.tobytes() and view[1:3] == b"oo"
    view[0] = ord("M")  # writable, and it is the handle's memory
    assert src[0] == ord("M") and h.size() == h.len() == len(h) == 6
    assert h.ptr() == ctypes.addressof(src)
    assert np.frombuffer(h, dtype=np.uint8).tobytes() == b"Moonca"
    # The view keeps the handle, so the memory is freed after the last view.
    del h
    gc.collect()
    assert freed == [] and view[2] == ord("o")
    view.release()
    gc.collect()
    assert freed == [ctypes.addressof(src)]


def test_buffer_handle_of_size_zero_is_an_empty_view():
    h = take_buffer(0, 0, lambda _ptr: None)
    view = memoryview(h)
    assert view.format == "B" and view.shape == (0,) and list(view) == [] and bytes(h) == b""
    with pytest.raises(IndexError):
        view[0]


def test_get_buffer_views_index_like_bytes(store_master, stores):
    s = stores(store_master)
    payload = os.urandom(4096)
    assert s.put("details-buf", payload) == 0
    h = s.get_buffer("details-buf")
    assert isinstance(h, BufferHandle)
    view = memoryview(h)
    assert view[0] == payload[0] and view[4095] == payload[4095]
    assert list(view) == list(payload)
    assert [bytes(x) for x in s.batch_get_buffer(["details-buf"])] == [payload]


def test_replicate_config_session_ids():
    c = ReplicateConfig()
    assert c.session_ids == []
    c.session_ids = []
    c.session_ids = ()
    assert c.session_ids == [] and "session_ids=[]" in str(c)
    with pytest.raises(TypeError, match="session_ids must be a list of str"):
        c.session_ids = "s1"
    with pytest.raises(TypeError, match="session_ids must be a list of str"):
        c.session_ids = [1]
    # This store has no write sessions to route to: refused, not ignored.
    with pytest.raises(ValueError, match="session_ids is not supported"):
        c.session_ids = ["s1"]
    assert c.session_ids == []


@pytest.fixture
def fresh_allocator(monkeypatch):
    """`mooncake.allocator` with its process-wide allocator not yet made."""
    monkeypatch.setattr(allocator_module, "_allocator", None)
    return allocator_module


def test_allocator_module_uses_one_process_wide_allocator(fresh_allocator, monkeypatch):
    monkeypatch.delenv("MC_STORE_USE_HUGEPAGE", raising=False)
    mod = importlib.import_module("mooncake.allocator")
    assert mod is fresh_allocator
    a = mod.host_allocator()
    assert a is mod.host_allocator() and not a.use_hugepage
    ptr = mod.alloc(8192)
    ctypes.memmove(ptr, b"allocator", 9)
    assert ctypes.string_at(ptr, 9) == b"allocator"
    assert a.free(ptr) == 0 and mod.free(ptr) == -1
    with pytest.raises(RuntimeError, match="Invalid argument"):
        mod.alloc(0)
    c_alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(mod.get_alloc_func_addr())
    c_free = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(mod.get_free_func_addr())
    p = c_alloc(4096)
    assert p and mod.free(p) == 0 and c_free(p) == -1
    assert c_alloc(0) is None
    assert mod.get_alloc_func_addr() == a.get_alloc_func_addr()


def test_allocator_module_follows_hugepage_environment(fresh_allocator, monkeypatch):
    monkeypatch.setenv("MC_STORE_USE_HUGEPAGE", "1")
    monkeypatch.setenv("MC_STORE_HUGEPAGE_SIZE", "1gb")
    a = fresh_allocator.host_allocator()
    assert a.use_hugepage and a.hugepage_size == "1GB"
    monkeypatch.setattr(fresh_allocator, "_allocator", None)
    monkeypatch.setenv("MC_STORE_HUGEPAGE_SIZE", "3MB")
    with pytest.raises(ValueError, match="MC_STORE_HUGEPAGE_SIZE"):
        fresh_allocator.host_allocator()
