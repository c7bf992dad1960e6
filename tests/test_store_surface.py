"""The store names real clients import or call beyond put/get.

ObjectDataType and ReplicateConfig.data_type / group_ids (vLLM's encoder
cache), get_buffer / batch_get_buffer and BufferHandle (LMCache's default
retrieve path), get_replica_desc and the descriptor types,
bind_to_numa_node, soft_pin_ttl_ms validation, setup after close, calls on
a closed store, and setup options this build refuses instead of ignoring.
"""

from __future__ import annotations

import ctypes
import gc
import os
import time

import numpy as np
import pytest

from conftest import LOOPBACK
from mooncake.store import (
    BufferHandle,
    ErrorCode,
    MooncakeDistributedStore,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicateConfig,
    bind_to_numa_node,
)

INVALID = int(ErrorCode.INVALID_PARAMS)
NOT_SUPPORTED = int(ErrorCode.NOT_SUPPORTED)


def test_object_data_type_values():
    assert [(m.name, int(m)) for m in ObjectDataType] == [
        ("UNKNOWN", 0),
        ("KVCACHE", 1),
        ("TENSOR", 2),
        ("WEIGHT", 3),
        ("SAMPLE", 4),
        ("ACTIVATION", 5),
        ("GRADIENT", 6),
        ("OPTIMIZER_STATE", 7),
        ("METADATA", 8),
        ("GENERAL", 9),
    ]
    cfg = ReplicateConfig()
    assert cfg.data_type == ObjectDataType.UNKNOWN and cfg.group_ids is None
    assert "data_type=UNKNOWN" in str(cfg)


def test_data_type_and_group_id_are_kept_as_metadata(store_master, stores):
    s = stores(store_master)
    cfg = ReplicateConfig()
    cfg.data_type = ObjectDataType.KVCACHE
    cfg.group_ids = ["layer-7"]
    assert s.put("typed-key", b"kv", cfg) == 0
    info = store_master.query_key("typed-key")
    assert info["data_type"] == 1 and info["group_id"] == "layer-7"
    # a batch needs one group id per key
    cfg.group_ids = ["g1"]
    assert s.put_batch(["gk1", "gk2"], [b"1", b"2"], cfg) == INVALID
    cfg.group_ids = ["g1", ""]
    assert s.put_batch(["gk1", "gk2"], [b"1", b"2"], cfg) == 0
    assert store_master.query_key("gk1")["group_id"] == "g1"
    assert store_master.query_key("gk2")["group_id"] == ""
    cfg = ReplicateConfig()
    cfg.data_type = 42  # not an ObjectDataType
    assert s.put("bad-type", b"x", cfg) == INVALID


def test_soft_pin_ttl_validation():
    cfg = ReplicateConfig()
    cfg.soft_pin_ttl_ms = 0
    cfg.soft_pin_ttl_ms = (1 << 64) - 1
    cfg.soft_pin_ttl_ms = None
    for bad in (-1, 1 << 64, 1.5, "10", True):
        with pytest.raises(TypeError):
            cfg.soft_pin_ttl_ms = bad
    assert cfg.soft_pin_ttl_ms is None


def test_get_buffer_handles(store_master, stores):
    s = stores(store_master)
    payload = os.urandom(10_000)
    assert s.put("buf-key", payload) == 0
    assert s.put("empty-ish", b"\x00") == 0
    h = s.get_buffer("buf-key")
    assert isinstance(h, BufferHandle)
    assert h.size() == len(payload) == h.len() == len(h)
    assert bytes(h) == payload
    view = memoryview(h)
    assert view.ndim == 1 and view.nbytes == len(payload) and view.itemsize == 1
    arr = np.frombuffer(h, dtype=np.uint8)
    assert arr.tobytes() == payload
    assert ctypes.string_at(h.ptr(), 16) == payload[:16]
    del h
    gc.collect()
    assert arr.tobytes() == payload  # the view keeps the memory alive
    got = s.batch_get_buffer(["buf-key", "missing-key", "empty-ish"])
    assert got[1] is None
    assert bytes(got[0]) == payload and bytes(got[2]) == b"\x00"
    assert s.get_buffer("missing-key") is None
    assert s.batch_get_buffer([]) == []
    del got, view, arr
    gc.collect()


def test_replica_descriptors(store_master, stores):
    writer = stores(store_master)
    reader = stores(store_master, segment=0)
    assert writer.put("desc-key", b"d" * 333) == 0
    reps = reader.get_replica_desc("desc-key")
    assert len(reps) == 1 and isinstance(reps[0], ReplicaDescriptor)
    r = reps[0]
    assert r.status == ReplicaStatus.COMPLETE
    assert r.is_memory_replica() and not r.is_disk_replica() and not r.is_local_disk_replica()
    d = r.get_memory_descriptor().buffer_descriptor
    assert d.size == 333 and d.buffer_address != 0
    mine = writer.get_hostname()
    endpoints = {sg["te_endpoint"] for sg in store_master.segments() if sg["name"] == mine}
    assert d.transport_endpoint in endpoints
    assert not hasattr(r, "type")
    assert reader.get_replica_desc("no-such-key") == []
    both = reader.batch_get_replica_desc(["desc-key", "no-such-key"])
    assert list(both) == ["desc-key"] and both["desc-key"][0].get_memory_descriptor()
    assert reader.batch_get_replica_desc([]) == {}


def test_bind_to_numa_node():
    before = os.sched_getaffinity(0)
    try:
        bind_to_numa_node(0)
        cpus = os.sched_getaffinity(0)
        with open("/sys/devices/system/node/node0/cpulist") as f:
            from mooncake._numa import parse_cpulist

            assert cpus == parse_cpulist(f.read())
    finally:
        os.sched_setaffinity(0, before)
    with pytest.raises(ValueError, match="does not exist"):
        bind_to_numa_node(4095)
    with pytest.raises(ValueError):
        bind_to_numa_node(-1)


def test_parse_cpulist():
    from mooncake._numa import parse_cpulist

    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpulist("") == set()


def test_setup_after_close_and_calls_on_a_closed_store(store_master):
    s = MooncakeDistributedStore()
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    assert s.setup(*args) == 0
    assert s.put("reopen-key", b"1") == 0
    assert s.close() == 0
    assert s.close() == 0
    # every call on a closed store answers at once with an error
    start = time.monotonic()
    assert s.get("reopen-key") == b""
    assert s.put("reopen-key2", b"1") == INVALID
    assert s.is_exist("reopen-key") == INVALID
    assert s.get_buffer("reopen-key") is None
    assert s.get_replica_desc("reopen-key") == []
    assert s.health_check() == 1
    assert time.monotonic() - start < 5
    # setup again re-initialises it
    assert s.setup(*args) == 0
    assert s.health_check() == 0
    assert s.put("reopen-key2", b"2") == 0 and s.get("reopen-key2") == b"2"
    s.close()


@pytest.mark.parametrize(
    "option",
    [
        {"enable_client_http_server": True},
    ],
)
def test_unimplemented_options_fail_loudly(store_master, option, caplog):
    s = MooncakeDistributedStore()
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    with caplog.at_level("ERROR", logger="mooncake.store"):
        assert s.setup(*args, **option) == NOT_SUPPORTED
    assert "this build" in caplog.text
    cfg = {"local_hostname": LOOPBACK, "metadata_server": store_master.metadata_url}
    cfg.update({k: str(v) for k, v in option.items()})
    assert s.setup(cfg) == NOT_SUPPORTED
    cfg = {"local_hostname": LOOPBACK, "metadata_server": "x", "ipc_socket_path": "/tmp/s"}
    assert s.setup(cfg) == NOT_SUPPORTED
    # the same options switched off are fine
    assert s.setup(*args, enable_ssd_offload=False, enable_client_http_server=False) == 0
    s.close()


def test_setup_argument_errors(store_master):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.setup(LOOPBACK, "m", 0, 0, "tcp", "", "x", no_such_option=1)
    with pytest.raises(TypeError, match="missing"):
        s.setup(LOOPBACK, "m")
    with pytest.raises(TypeError, match="multiple values"):
        s.setup(LOOPBACK, "m", 0, 0, "tcp", "", "x", protocol="tcp")
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    assert s.setup(*args, client_http_port=0) == INVALID
    assert s.setup(LOOPBACK, "m", "50%", "1MB", "tcp", "", "x") == INVALID


def _hugepages_available() -> int:
    base = "/sys/kernel/mm/hugepages/hugepages-2048kB/"
    with open(base + "free_hugepages") as f, open(base + "resv_hugepages") as r:
        return int(f.read()) - int(r.read())


def test_setup_on_huge_pages(store_master, huge_pages_2mb, monkeypatch):
    huge_pages_2mb(16)
    before = _hugepages_available()
    s = MooncakeDistributedStore()
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    assert s.setup(*args, use_hugepage=True, hugepage_size="2MB") == 0
    # 8 pages of segment and 8 of local buffer are taken from the pool
    assert before - _hugepages_available() == 16
    assert s.put("huge-key", b"h" * 5000) == 0 and s.get("huge-key") == b"h" * 5000
    s.close()
    assert _hugepages_available() == before
    # the upstream variables select the same
    monkeypatch.setenv("MC_STORE_USE_HUGEPAGE", "1")
    monkeypatch.setenv("MC_STORE_HUGEPAGE_SIZE", "2MB")
    assert s.setup(*args) == 0
    assert before - _hugepages_available() == 16
    s.close()


def test_setup_on_huge_pages_without_reserved_ones(store_master, capfd):
    if _hugepages_available() >= 16:
        pytest.skip("this host has huge pages reserved")
    s = MooncakeDistributedStore()
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    assert s.setup(*args, use_hugepage=True) == INVALID
    err = capfd.readouterr().err
    assert "huge pages of 2048 KiB needed" in err and "nr_hugepages" in err, err
    assert s.setup(*args, use_hugepage=True, hugepage_size="4KB") == INVALID
    assert s.setup(*args, use_hugepage=False) == 0  # and the store is still usable
    s.close()
