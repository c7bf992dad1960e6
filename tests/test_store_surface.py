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
import subprocess
import sys
import threading

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


def test_a_put_without_config_is_placed_as_one_with_the_default_config(store_master, stores):
    """put(key, value) passes no config to the library (its default); the
    master records the object exactly as for put(key, value, ReplicateConfig())."""
    s = stores(store_master)
    assert s.put("cfg-none", b"v" * 100) == 0
    assert s.put("cfg-default", b"v" * 100, ReplicateConfig()) == 0
    assert s.put_batch(["cfg-none-b"], [b"v" * 100]) == 0
    infos = [store_master.query_key(k) for k in ("cfg-none", "cfg-default", "cfg-none-b")]
    assert all(infos), infos
    varying = ("key", "replicas", "lease", "created", "time", "id")

    def stable(info):
        return {k: v for k, v in info.items() if not any(w in k for w in varying)}

    assert stable(infos[0]) == stable(infos[1]) == stable(infos[2]), infos
    assert [len(i.get("replicas", [])) for i in infos] == [len(infos[1].get("replicas", []))] * 3


# The public names of upstream's `store` module (a pybind11 module, so a star
# import takes every one of them); upstream's scripts/test_engram_store.py
# imports the module's names this way.
UPSTREAM_STORE_NAMES = (
    "ObjectDataType SoftPinAction ReplicateConfig ReplicaStatus MemoryDescriptor "
    "DiskDescriptor ReplicaDescriptor Descriptor TaskType TaskStatus QueryTaskResponse "
    "BufferHandle BufferLeaseView BufferLease BufferPool RegisteredBufferPool "
    "RegisteredBufferLease RegisteredBufferLeaseView MooncakeHostMemAllocator "
    "MooncakeDistributedStore EngramStoreConfig EngramStore bind_to_numa_node "
    "get_alloc_func_addr get_free_func_addr"
).split()


def test_star_import_brings_upstream_public_names():
    names: dict = {}
    exec("from mooncake.store import *", names)  # noqa: S102
    missing = [n for n in UPSTREAM_STORE_NAMES if n not in names]
    assert missing == []
    assert names["RegisteredBufferPool"] is names["BufferPool"]
    assert callable(names["get_alloc_func_addr"]) and callable(names["get_free_func_addr"])


def test_star_import_brings_enum_members_as_upstream():
    names: dict = {}
    exec("from mooncake.store import *", names)  # noqa: S102
    odt, rs = names["ObjectDataType"], names["ReplicaStatus"]
    tt, ts = names["TaskType"], names["TaskStatus"]
    for enum_type in (odt, rs, tt, ts):
        for member in enum_type:
            if member.name not in ("PROCESSING", "FAILED"):
                assert names[member.name] is member
    # in both ReplicaStatus and TaskStatus: upstream exports TaskStatus last
    assert names["PROCESSING"] is ts.PROCESSING
    assert names["FAILED"] is ts.FAILED


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


# Modules `import mooncake.store` must not pull in: ctypes.util runs programs
# to find libraries and brings subprocess, shutil, tempfile, bz2 and lzma;
# numpy, dataclasses (inspect, ast, dis), logging and pathlib are loaded by
# the calls that use them. Each was once imported and made up most of the time.
_NOT_IMPORTED_BY_STORE = (
    "ctypes.util",
    "subprocess",
    "shutil",
    "tempfile",
    "bz2",
    "lzma",
    "numpy",
    "dataclasses",
    "inspect",
    "logging",
    "pathlib",
    "uuid",
    "platform",
)


def test_importing_the_store_loads_no_heavy_modules():
    probe = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import mooncake.store\n"
        f"heavy = {_NOT_IMPORTED_BY_STORE!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules and m not in before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_store_works_after_a_lean_import(store_master):
    """The modules left out of the import are loaded where they are used:
    a fresh interpreter sets up a client, logs a setup error, and uses the
    NUMA, task and tensor types without importing anything by hand."""
    probe = (
        "import sys\n"
        "import mooncake.store as s\n"
        "st = s.MooncakeDistributedStore()\n"
        f"args = ({LOOPBACK!r}, {store_master.metadata_url!r}, '16MB', '16MB', 'tcp', '')\n"
        f"assert st.setup(*args[:2], 'lots', *args[3:], {store_master.rpc!r}) == -600\n"
        "assert 'logging' in sys.modules\n"
        f"assert st.setup(*args, {store_master.rpc!r}) == 0\n"
        "assert st.put('lean-import', b'v' * 5000) == 0\n"
        "assert st.get('lean-import') == b'v' * 5000\n"
        "st.close()\n"
        "r = s.QueryTaskResponse((1, 2), s.TaskType(0), s.TaskStatus(2), 3, 4, 'h:1', '')\n"
        "assert r == s.QueryTaskResponse((1, 2), s.TaskType(0), s.TaskStatus(2), 3, 4, 'h:1', '')\n"
        "assert hash(r) == hash(s.QueryTaskResponse(*[getattr(r, n) for n in r.__slots__]))\n"
        "try:\n"
        "    r.message = 'x'\n"
        "    raise SystemExit('QueryTaskResponse accepted an assignment')\n"
        "except AttributeError:\n"
        "    pass\n"
        "assert s.ReadTarget('shard').mode == 'shard'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


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
    # every call on a closed store answers with an error instead of blocking
    answers = {}

    def closed_calls():
        answers["get"] = s.get("reopen-key")
        answers["put"] = s.put("reopen-key2", b"1")
        answers["is_exist"] = s.is_exist("reopen-key")
        answers["get_buffer"] = s.get_buffer("reopen-key")
        answers["get_replica_desc"] = s.get_replica_desc("reopen-key")
        answers["health_check"] = s.health_check()

    caller = threading.Thread(target=closed_calls, daemon=True)
    caller.start()
    caller.join(60)
    assert not caller.is_alive(), "a call on a closed store blocked"
    assert answers == {
        "get": b"",
        "put": INVALID,
        "is_exist": INVALID,
        "get_buffer": None,
        "get_replica_desc": [],
        "health_check": 1,
    }
    # setup again re-initialises it
    assert s.setup(*args) == 0
    assert s.health_check() == 0
    assert s.put("reopen-key2", b"2") == 0 and s.get("reopen-key2") == b"2"
    s.close()


def test_unimplemented_options_fail_loudly(store_master, caplog):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": LOOPBACK, "metadata_server": "x", "ipc_socket_path": "/tmp/s"}
    with caplog.at_level("ERROR", logger="mooncake.store"):
        assert s.setup(cfg) == NOT_SUPPORTED
    assert "this build" in caplog.text
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    assert s.setup(*args, enable_ssd_offload=False, enable_client_http_server=False) == 0
    assert s.metrics_server_address() is None
    s.close()


def _http_get(url: str) -> tuple[int, str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


@pytest.mark.parametrize("form", ["keywords", "dict"])
def test_client_http_server_serves_metrics(store_master, form):
    """enable_client_http_server=True serves the client's metrics on
    client_http_port; close (and stop_metrics_server) stop it; a port in use
    fails setup."""
    import socket

    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]
    s = MooncakeDistributedStore()
    args = (LOOPBACK, store_master.metadata_url, "16MB", "16MB", "tcp", "", store_master.rpc)
    if form == "keywords":
        rc = s.setup(*args, enable_client_http_server=True, client_http_port=port)
    else:
        cfg = {
            "local_hostname": LOOPBACK,
            "metadata_server": store_master.metadata_url,
            "master_server_address": store_master.rpc,
            "enable_client_http_server": "true",
            "client_http_port": str(port),
        }
        rc = s.setup(cfg)
    assert rc == 0
    try:
        assert s.metrics_server_address() == f"{LOOPBACK}:{port}"
        assert s.put("metrics-key", b"v") == 0 and s.get("metrics-key") == b"v"
        code, text = _http_get(f"http://{LOOPBACK}:{port}/metrics")
        assert code == 200 and "# TYPE" in text, text[:200]
        # A second client cannot take the same port: its setup fails and
        # leaves it closed.
        other = MooncakeDistributedStore()
        assert other.setup(*args, enable_client_http_server=True, client_http_port=port) < 0
        assert other.health_check() == 1
    finally:
        s.close()
    with pytest.raises(OSError):
        _http_get(f"http://{LOOPBACK}:{port}/metrics")


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
