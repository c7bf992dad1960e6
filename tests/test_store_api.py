"""`mooncake.store.MooncakeDistributedStore`: every method from Python.

One real `mooncake_master` (embedded HTTP metadata server) per module and
one storage client contributing 128 MiB with a 4 MiB local buffer, so that
the largest values here (6 MiB + odd) do not fit the local buffer and must
be staged in chunks. Return conventions as upstream (spec store_te.md §1,
§7.8): ints with ErrorCode numbers, b"" on a missing get, per-key lists for
batch calls.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import uuid

import numpy as np
import pytest

from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig, SoftPinAction

INVALID = -600
NOT_FOUND = -704
HAS_LEASE = -706

LOCAL_BUFFER = 4 << 20
SIZES = [1, 4096, (1 << 20) + 13, LOCAL_BUFFER + (2 << 20) + 7]  # the last exceeds the local buffer
_ids = itertools.count()


def key(tag: str = "k") -> str:
    return f"api/{tag}/{next(_ids)}/{uuid.uuid4().hex[:8]}"


def data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed + n).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def store(store_master):
    s = MooncakeDistributedStore()
    assert (
        s.setup(
            "127.0.0.1",
            store_master.metadata_url,
            "128MB",
            LOCAL_BUFFER,
            "tcp",
            "",
            store_master.rpc,
        )
        == 0
    )
    yield s
    assert s.close() == 0


# -- setup forms ---------------------------------------------------------------


def test_setup_positional_and_hostname(store_master):
    s = MooncakeDistributedStore()
    try:
        assert (
            s.setup(
                "127.0.0.1",
                store_master.metadata_url,
                16 << 20,
                16 << 20,
                "tcp",
                "",
                store_master.rpc,
            )
            == 0
        )
        host, port = s.get_hostname().rsplit(":", 1)
        assert host == "127.0.0.1"
        assert 12300 <= int(port) <= 14300  # MC_STORE_CLIENT_MIN_PORT..MAX_PORT
        assert s.health_check() == 0
        # a second setup of the same object is refused
        assert (
            s.setup("127.0.0.1", store_master.metadata_url, 0, 0, "tcp", "", store_master.rpc)
            == INVALID
        )
    finally:
        s.close()


def test_setup_keeps_explicit_port(store_master):
    from conftest import free_port

    port = free_port()
    s = MooncakeDistributedStore()
    try:
        assert (
            s.setup(
                f"127.0.0.1:{port}",
                store_master.metadata_url,
                0,
                "1MB",
                "tcp",
                "",
                store_master.rpc,
            )
            == 0
        )
        assert s.get_hostname() == f"127.0.0.1:{port}"
    finally:
        s.close()


@pytest.mark.parametrize("size", ["16MB", "16 MB", "16mb", "16MiB", str(16 << 20)])
def test_setup_dict_form_human_sizes(store_master, size):
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            {
                "local_hostname": "127.0.0.1",
                "metadata_server": store_master.metadata_url,
                "global_segment_size": size,
                "local_buffer_size": size,
                "protocol": "tcp",
                "master_server_addr": store_master.rpc,
            }
        )
        assert rc == 0
        k = key("dict")
        assert s.put(k, b"dict-form") == 0
        assert s.get(k) == b"dict-form"
        # the segment is 16 MiB: the master sees it under our hostname
        seg = [x for x in store_master.segments() if x["name"] == s.get_hostname()]
        assert [x["size"] for x in seg] == [16 << 20]
    finally:
        s.close()


@pytest.mark.parametrize("bad", ["50%", "lots", "-1", "16 XB"])
def test_setup_bad_sizes_rejected(store_master, bad):
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            {"local_hostname": "127.0.0.1", "metadata_server": store_master.metadata_url,
             "global_segment_size": bad, "master_server_addr": store_master.rpc}
        )  # fmt: skip
        assert rc < 0
        assert s.health_check() == 1
    finally:
        s.close()


def test_setup_missing_args(store_master):
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1"}) == INVALID  # no metadata_server
    assert s.setup({"metadata_server": store_master.metadata_url}) == INVALID
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", store_master.metadata_url)  # positional form: the first 7 are required
    assert s.health_check() == 1
    s.close()


def test_dict_form_defaults_to_16mib(store_master):
    s = MooncakeDistributedStore()
    try:
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": store_master.metadata_url,
                        "master_server_addr": store_master.rpc}) == 0  # fmt: skip
        seg = [x for x in store_master.segments() if x["name"] == s.get_hostname()]
        assert [x["size"] for x in seg] == [16 << 20]
    finally:
        s.close()


def test_close_idempotent_and_health(store_master):
    s = MooncakeDistributedStore()
    assert s.health_check() == 1  # not set up
    assert (
        s.setup("127.0.0.1", store_master.metadata_url, "8MB", "1MB", "tcp", "", store_master.rpc)
        == 0
    )
    assert s.health_check() == 0
    k = key("closed")
    assert s.put(k, b"x") == 0
    name = s.get_hostname()
    assert s.close() == 0
    assert s.close() == 0
    assert s.health_check() == 1
    # calls after close fail with codes, not exceptions
    assert s.put(key(), b"x") < 0
    assert s.get(k) == b""
    assert s.is_exist(k) < 0
    # the client unmounted its segment on close: its objects are gone
    assert all(x["name"] != name for x in store_master.segments())
    assert store_master.query_key(k) is None


def test_zero_local_buffer_is_pure_server(store_master):
    s = MooncakeDistributedStore()
    try:
        assert (
            s.setup("127.0.0.1", store_master.metadata_url, "8MB", 0, "tcp", "", store_master.rpc)
            == 0
        )
        assert s.put(key(), b"needs the local buffer") == INVALID
        buf = np.frombuffer(data(100), dtype=np.uint8).copy()
        k = key("zc")
        assert s.put_from(k, buf.ctypes.data, buf.nbytes) == 0  # zero-copy still works
        out = np.zeros(100, dtype=np.uint8)
        assert s.get_into(k, out.ctypes.data, out.nbytes) == 100
        assert out.tobytes() == buf.tobytes()
    finally:
        s.close()


# -- bytes API -----------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_put_get_roundtrip(store, size):
    k, v = key("pg"), data(size)
    assert store.put(k, v) == 0
    assert store.get_size(k) == size
    got = store.get(k)
    assert len(got) == size and got == v
    # bytearray and memoryview inputs work too
    k2 = key("pg2")
    assert store.put(k2, memoryview(bytearray(v))) == 0
    assert store.get(k2) == v


def test_large_copying_get_needs_no_local_buffer_room(store):
    """A copying get of a large value reads into its result directly: it
    works while the whole local buffer is leased (staging would wait for a
    chunk until the transfer timeout and fail)."""
    from mooncake import _lib

    lib = _lib.bind(
        {
            "mc_store_local_alloc": ([_lib.U64, _lib.U64, _lib.U64], _lib.U64),
            "mc_store_local_free": ([_lib.U64, _lib.U64], _lib.INT),
        }
    )
    k, v = key("direct"), data((1 << 20) + 13, 3)
    assert store.put(k, v) == 0
    ptr = lib.mc_store_local_alloc(store._handle, LOCAL_BUFFER, 64)
    assert ptr != 0, "the local buffer is not free"
    try:
        assert store.get(k) == v
        assert store.get_batch([k, k]) == [v, v]
    finally:
        assert lib.mc_store_local_free(store._handle, ptr) == 0


def test_get_missing_is_empty(store):
    assert store.get(key("missing")) == b""
    assert store.get_batch([key("m1"), key("m2")]) == [b"", b""]
    assert store.get_batch([]) == []


def test_get_batch_against_get_buffer(store, monkeypatch):
    """The copying get_batch (one allocation call per batch, on the calling
    thread) against get_buffer's library-allocated reads, the reference:
    sizes around the staging threshold (256 KiB) and past the local buffer,
    missing keys between found ones, a key twice, and the empty batch."""
    import threading

    import mooncake.store as store_module

    sizes = [1, 63, 4096, 4097, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (3 << 20) + 5]
    keys = [key(f"sized{n}") for n in sizes]
    values = [data(n, i) for i, n in enumerate(sizes)]
    assert store.put_batch(keys, values) == 0
    asked = [keys[0], key("gone"), *keys[1:], key("gone2"), keys[2]]
    want = [values[0], b"", *values[1:], b"", values[2]]
    calls = []
    made = store_module._ALLOC_ALL_FN

    def recording(fn):
        def wrapped(first, count, sizes_p, addrs_p):
            calls.append((first, count, threading.get_ident()))
            fn(first, count, sizes_p, addrs_p)

        return made(wrapped)

    monkeypatch.setattr(store_module, "_ALLOC_ALL_FN", recording)
    got = store.get_batch(asked)
    assert [len(g) for g in got] == [len(w) for w in want]
    assert got == want
    assert got == [bytes(b) if b is not None else b"" for b in store.batch_get_buffer(asked)]
    assert calls == [(0, len(asked), threading.get_ident())]
    calls.clear()
    assert store.get_batch([]) == [] and calls == []
    assert store.get_batch([key("none")]) == [b""]


def test_put_existing_key_does_not_overwrite(store):
    k = key("exists")
    assert store.put(k, b"first") == 0
    assert store.put(k, b"second value") == 0  # silent success
    assert store.get(k) == b"first"
    assert store.put_batch([k], [b"third"]) == 0
    assert store.get(k) == b"first"


@pytest.mark.parametrize("new_size", [5, 4096, (1 << 20) + 3])
def test_upsert_overwrites(store, new_size):
    k = key("upsert")
    assert store.upsert(k, b"abcde") == 0  # insert
    assert store.get(k) == b"abcde"
    v = data(new_size, 7)
    assert store.upsert(k, v) == 0  # same size (5) or different size
    assert store.get(k) == v
    assert store.get_size(k) == new_size


def test_put_batch_and_get_batch(store):
    keys = [key("pb") for _ in range(5)]
    values = [data(s, i) for i, s in enumerate([1, 10, 4096, 70000, (1 << 20) + 1])]
    assert store.put_batch(keys, values) == 0
    got = store.get_batch([*keys, key("nope")])
    assert got[:5] == values and got[5] == b""
    assert store.put_batch(keys, values[:2]) == INVALID  # length mismatch
    assert store.put_batch([], []) == 0


def test_put_batch_reports_first_error(store):
    k = key("pbe")
    assert store.put_batch([k, ""], [b"ok", b"empty key"]) == INVALID


def test_put_parts_and_upsert_parts(store):
    k = key("parts")
    parts = [b"head-", bytearray(b"middle-"), memoryview(data(5000)), np.arange(10, dtype=np.uint8)]
    joined = b"".join(bytes(p) for p in parts)
    assert store.put_parts(k, *parts) == 0
    assert store.get(k) == joined
    assert store.upsert_parts(k, b"new-", b"parts") == 0
    assert store.get(k) == b"new-parts"
    k2 = key("uparts")
    assert store.upsert_parts(k2, b"a", b"b") == 0  # insert
    assert store.get(k2) == b"ab"


def test_upsert_batch(store):
    keys = [key("ub") for _ in range(3)]
    assert store.put(keys[0], b"old") == 0
    assert store.upsert_batch(keys, [b"new", b"x" * 100, data(4096)]) == 0
    assert store.get_batch(keys) == [b"new", b"x" * 100, data(4096)]
    assert store.upsert_batch(keys, [b"a"]) == INVALID


def test_upsert_from_and_batch_upsert_from(store):
    a = np.frombuffer(data(3000, 1), dtype=np.uint8).copy()
    b = np.frombuffer(data(5000, 2), dtype=np.uint8).copy()
    k = key("uf")
    assert store.upsert_from(k, a.ctypes.data, a.nbytes) == 0
    assert store.get(k) == a.tobytes()
    assert store.upsert_from(k, b.ctypes.data, b.nbytes) == 0
    assert store.get(k) == b.tobytes()
    keys = [k, key("buf")]
    assert store.batch_upsert_from(keys, [a.ctypes.data, b.ctypes.data], [a.nbytes, b.nbytes]) == [
        0,
        0,
    ]
    assert store.get_batch(keys) == [a.tobytes(), b.tobytes()]
    assert store.batch_upsert_from(keys, [a.ctypes.data], [1, 2]) == [INVALID, INVALID]


def test_is_exist_and_get_size(store):
    k = key("exist")
    assert store.is_exist(k) == 0
    assert store.get_size(k) == NOT_FOUND
    assert store.put(k, data(12345)) == 0
    assert store.is_exist(k) == 1
    assert store.get_size(k) == 12345
    assert store.batch_is_exist([k, key("no"), k]) == [1, 0, 1]
    assert store.batch_is_exist([]) == []


def test_remove_codes(store_master, store):
    k = key("rm")
    assert store.remove(k) == NOT_FOUND
    assert store.put(k, b"v") == 0
    assert store.remove(k) == 0  # a fresh put holds no lease
    assert store.is_exist(k) == 0
    assert store.put(k, b"v") == 0
    assert store.get(k) == b"v"  # grants a 10 s read lease
    assert store.remove(k) == HAS_LEASE
    assert store.remove(k, force=True) == 0
    assert store_master.query_key(k) is None
    assert store.put(k, b"v") == 0
    assert store.is_exist(k) == 1  # existence checks lease too (upstream)
    assert store.remove(k) == HAS_LEASE
    assert store.remove(k, True) == 0


def test_batch_remove(store):
    keys = [key("br") for _ in range(3)]
    assert store.put_batch(keys[:2], [b"a", b"b"]) == 0
    assert store.is_exist(keys[1]) == 1  # leased
    assert store.batch_remove(keys) == [0, HAS_LEASE, NOT_FOUND]
    assert store.batch_remove(keys, force=True) == [NOT_FOUND, 0, NOT_FOUND]
    assert store.batch_remove([]) == []


def test_remove_by_regex(store_master, store):
    tag = uuid.uuid4().hex[:8]
    keys = [f"rx/{tag}/a{i}" for i in range(4)] + [f"rx/{tag}/b0"]
    assert store.put_batch(keys, [b"v"] * 5) == 0

    def present():  # the master's view grants no lease
        return [store_master.query_key(k) is not None for k in keys]

    # search semantics: the pattern may match anywhere in the key
    assert store.remove_by_regex(f"{tag}/a[01]$") == 2
    assert present() == [False, False, True, True, True]
    assert store.is_exist(keys[2]) == 1  # lease a2
    assert store.remove_by_regex(f"{tag}/a") == 1  # a2 is leased and skipped
    assert present() == [False, False, True, False, True]
    assert store.remove_by_regex(f"{tag}/a", force=True) == 1
    assert store.remove_by_regex("no-such-key-" + tag) == 0
    assert store.remove_by_regex("^" + re.escape(f"rx/{tag}/b0") + "$") == 1
    assert present() == [False] * 5
    # RE2: ECMAScript-only syntax (backreferences) is invalid
    assert store.remove_by_regex("(a)\\1") == INVALID


def test_remove_all(store_master, stores):
    s = stores(store_master, "16MB", "1MB")
    keys = [key("ra") for _ in range(4)]
    assert s.put_batch(keys, [b"x"] * 4) == 0
    assert s.is_exist(keys[0]) == 1  # leased: skipped without force
    n = s.remove_all()
    assert n >= 3
    assert s.batch_is_exist(keys) == [1, 0, 0, 0]
    assert s.remove_all(force=True) >= 1
    assert s.is_exist(keys[0]) == 0
    assert store_master.keys() == []


# -- zero-copy API ---------------------------------------------------------------


def test_register_and_unregister_buffer(store):
    buf = np.zeros(1 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    # overlapping registration is refused
    assert store.register_buffer(buf.ctypes.data + 4096, 4096) == INVALID
    k = key("reg")
    buf[:] = np.frombuffer(data(buf.nbytes), dtype=np.uint8)
    assert store.put_from(k, buf.ctypes.data, buf.nbytes) == 0
    out = np.zeros_like(buf)
    assert store.register_buffer(out.ctypes.data, out.nbytes) == 0
    assert store.get_into(k, out.ctypes.data, out.nbytes) == buf.nbytes
    assert np.array_equal(out, buf)
    assert store.unregister_buffer(buf.ctypes.data) == 0
    assert store.unregister_buffer(out.ctypes.data) == 0
    assert store.unregister_buffer(buf.ctypes.data) == INVALID  # not registered any more


@pytest.mark.parametrize("size", SIZES)
def test_put_from_get_into_numpy(store, size):
    src = np.frombuffer(data(size, 3), dtype=np.uint8).copy()
    k = key("zc")
    assert store.put_from(k, src.ctypes.data, size) == 0
    dst = np.zeros(size + 64, dtype=np.uint8)  # capacity may exceed the object
    assert store.get_into(k, dst.ctypes.data, dst.nbytes) == size
    assert dst[:size].tobytes() == src.tobytes() and not dst[size:].any()
    assert store.get(k) == src.tobytes()


def test_put_from_get_into_ctypes(store):
    src = (ctypes.c_char * 777).from_buffer_copy(data(777))
    dst = (ctypes.c_char * 777)()
    k = key("ct")
    assert store.put_from(k, ctypes.addressof(src), 777) == 0
    assert store.get_into(k, ctypes.addressof(dst), 777) == 777
    assert bytes(dst) == bytes(src)


def test_put_from_size_zero_stores_nothing(store_master, store):
    buf = np.ones(8, dtype=np.uint8)
    k = key("zero")
    assert store.put_from(k, buf.ctypes.data, 0) == 0
    assert store.is_exist(k) == 0
    assert store_master.query_key(k) is None


def test_get_into_errors(store):
    k = key("small")
    src = np.frombuffer(data(1000), dtype=np.uint8).copy()
    assert store.put_from(k, src.ctypes.data, 1000) == 0
    dst = np.zeros(1000, dtype=np.uint8)
    assert store.get_into(k, dst.ctypes.data, 999) == INVALID  # capacity below the object size
    assert store.get_into(key("missing"), dst.ctypes.data, 1000) == NOT_FOUND
    assert store.put_from("", src.ctypes.data, 10) == INVALID  # empty key


def test_batch_put_from_and_batch_get_into(store):
    sizes = [1, 4096, (1 << 20) + 5]
    srcs = [np.frombuffer(data(n, 9), dtype=np.uint8).copy() for n in sizes]
    keys = [key("bpf") for _ in sizes]
    assert store.batch_put_from(keys, [a.ctypes.data for a in srcs], sizes) == [0, 0, 0]
    dsts = [np.zeros(n, dtype=np.uint8) for n in sizes]
    missing = np.zeros(8, dtype=np.uint8)
    res = store.batch_get_into(
        [*keys, key("x")], [d.ctypes.data for d in dsts] + [missing.ctypes.data], [*sizes, 8]
    )
    assert res == [*sizes, NOT_FOUND]
    assert all(np.array_equal(a, b) for a, b in zip(srcs, dsts, strict=True))
    # undersized buffer for one key only fails that key
    small = np.zeros(10, dtype=np.uint8)
    assert store.batch_get_into(keys[:2], [dsts[0].ctypes.data, small.ctypes.data], [1, 10]) == [
        1,
        INVALID,
    ]
    assert store.batch_put_from(keys, [srcs[0].ctypes.data], sizes) == [INVALID] * 3


def test_multi_buffers(store):
    parts = [[data(100, 1), data(4000, 2), data(1 << 20, 3)], [data(7, 4)]]
    arrays = [[np.frombuffer(p, dtype=np.uint8).copy() for p in ps] for ps in parts]
    keys = [key("mb"), key("mb")]
    ptrs = [[a.ctypes.data for a in arrs] for arrs in arrays]
    sizes = [[a.nbytes for a in arrs] for arrs in arrays]
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0]
    assert store.get(keys[0]) == b"".join(parts[0])
    assert store.get(keys[1]) == parts[1][0]
    # scatter back in different pieces
    total = sum(sizes[0])
    outs = [np.zeros(10, dtype=np.uint8), np.zeros(total - 10, dtype=np.uint8)]
    out2 = [np.zeros(3, dtype=np.uint8), np.zeros(4, dtype=np.uint8)]
    res = store.batch_get_into_multi_buffers(
        keys, [[o.ctypes.data for o in outs], [o.ctypes.data for o in out2]],
        [[o.nbytes for o in outs], [o.nbytes for o in out2]],
    )  # fmt: skip
    assert res == [total, 7]
    assert b"".join(o.tobytes() for o in outs) == b"".join(parts[0])
    assert b"".join(o.tobytes() for o in out2) == parts[1][0]
    # mismatched shapes
    assert store.batch_put_from_multi_buffers(keys, [[1, 2], [3]], [[1], [1]]) == [INVALID, INVALID]
    # capacity too small
    assert store.batch_get_into_multi_buffers([keys[1]], [[out2[0].ctypes.data]], [[3]]) == [
        INVALID
    ]


def test_get_into_ranges(store):
    obj_a, obj_b = data(10000, 1), data(300, 2)
    ka, kb = key("rg"), key("rg")
    assert store.put_batch([ka, kb], [obj_a, obj_b]) == 0
    buf0 = np.zeros(20000, dtype=np.uint8)
    buf1 = np.zeros(1000, dtype=np.uint8)
    res = store.get_into_ranges(
        [buf0.ctypes.data, buf1.ctypes.data],
        [[ka, kb], [kb, key("none")]],
        [[[0, 5000], [15000]], [[0, 200], [0]]],  # dst offsets
        [[[0, 9000], [100]], [[250, 0], [0]]],  # src offsets
        [[[4000, 1000], [200]], [[50, 60], [10]]],  # sizes
    )
    assert res == [[[4000, 1000], [200]], [[50, 60], [NOT_FOUND]]]
    assert buf0[:4000].tobytes() == obj_a[:4000]
    assert buf0[5000:6000].tobytes() == obj_a[9000:10000]
    assert buf0[15000:15200].tobytes() == obj_b[100:300]
    assert buf1[:50].tobytes() == obj_b[250:300]
    assert buf1[200:260].tobytes() == obj_b[:60]
    # a range past the object's end is -600; the other fragments still read
    res = store.get_into_ranges([buf1.ctypes.data], [[kb]], [[[0, 100]]], [[[290, 0]]], [[[11, 5]]])
    assert res == [[[INVALID, 5]]]
    res = store.get_into_ranges([buf1.ctypes.data], [[kb]], [[[0]]], [[[301]]], [[[0]]])
    assert res == [[[INVALID]]]
    # a key whose offset and size lists differ is -600; the other keys still read
    buf1[:] = 0
    res = store.get_into_ranges(
        [buf1.ctypes.data], [[kb, ka]], [[[0, 1], [10]]], [[[0], [0]]], [[[1], [4]]]
    )
    assert res == [[[INVALID], [4]]]
    assert buf1[10:14].tobytes() == obj_a[:4] and buf1[0] == 0
    with pytest.raises(ValueError):  # buffers and key lists cannot be paired
        store.get_into_ranges([buf1.ctypes.data], [[kb], [ka]], [[[0]]], [[[0]]], [[[1]]])


def test_get_into_ranges_stays_inside_registered_buffer(store):
    """A destination running out of its registered buffer is -600, nothing written (issue 35)."""
    obj = data(64, 3)
    k = key("rgb")
    assert store.put(k, obj) == 0
    guard, size = 16, 32
    mem = np.full(guard + size + guard, 0xAA, dtype=np.uint8)
    base = mem.ctypes.data + guard
    assert store.register_buffer(base, size) == 0
    try:
        # 4 bytes at offset 31 of the 32-byte buffer: 3 would land past it
        assert store.get_into_ranges([base], [[k]], [[[31]]], [[[0]]], [[[4]]]) == [[[INVALID]]]
        # before the buffer, one byte too many, and sums past 2**64
        assert store.get_into_ranges([base - 2], [[k]], [[[0]]], [[[0]]], [[[4]]]) == [[[INVALID]]]
        assert store.get_into_ranges([base], [[k]], [[[0]]], [[[0]]], [[[size + 1]]]) == [
            [[INVALID]]
        ]
        assert store.get_into_ranges([base], [[k]], [[[2**64 - 2]]], [[[0]]], [[[4]]]) == [
            [[INVALID]]
        ]
        assert store.get_into_ranges([base], [[k]], [[[0]]], [[[0]]], [[[2**64]]]) == [[[INVALID]]]
        assert store.get_into_ranges([base], [[k]], [[[-1]]], [[[0]]], [[[4]]]) == [[[INVALID]]]
        # the batch form: the fragments inside are read, the ones outside refused
        res = store.get_into_ranges(
            [base, base],
            [[k, k], [k]],
            [[[0], [31]], [[30, 20]]],
            [[[8], [0]], [[0, 0]]],
            [[[16], [4]], [[4, 2]]],
        )
        assert res == [[[16], [INVALID]], [[INVALID, 2]]]
        out = mem.tobytes()
        assert out[guard : guard + 16] == obj[8:24]
        assert out[guard + 20 : guard + 22] == obj[:2]
        untouched = out[:guard] + out[guard + 16 : guard + 20] + out[guard + 22 :]
        assert untouched == b"\xaa" * len(untouched)
    finally:
        assert store.unregister_buffer(base) == 0


# -- config types -----------------------------------------------------------------


def test_replicate_config_defaults_and_str():
    c = ReplicateConfig()
    assert c.replica_num == 1
    assert c.soft_pin_action == SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None
    assert c.with_hard_pin is False
    assert c.preferred_segments == [] and c.preferred_segment == ""
    assert c.prefer_alloc_in_same_node is False
    c.replica_num, c.with_hard_pin, c.preferred_segments = 3, True, ["a:1"]
    c.soft_pin_action, c.soft_pin_ttl_ms = SoftPinAction.ENABLE, 1000
    s = str(c)
    for frag in ("replica_num=3", "with_hard_pin=True", "ENABLE", "soft_pin_ttl_ms=1000", "a:1"):
        assert frag in s
    assert repr(c) == s


def test_replicate_config_with_soft_pin_is_soft_pin_action_enable():
    """Issue 50: upstream's earlier boolean (its test_distributed_object_store.py
    012bf0f0 reads and sets it) maps onto soft_pin_action instead of being a
    stray attribute that pins nothing."""
    c = ReplicateConfig()
    assert c.with_soft_pin is False
    c.with_soft_pin = True
    assert c.soft_pin_action == SoftPinAction.ENABLE and c.with_soft_pin is True
    assert "ENABLE" in str(c)
    c.with_soft_pin = False
    assert c.soft_pin_action == SoftPinAction.PRESERVE and c.with_soft_pin is False
    c.soft_pin_action = SoftPinAction.DISABLE
    assert c.with_soft_pin is False
    with pytest.raises(TypeError):
        c.with_soft_pin = 1
    assert c.soft_pin_action == SoftPinAction.DISABLE


def test_enum_values():
    assert [int(SoftPinAction.PRESERVE), int(SoftPinAction.ENABLE), int(SoftPinAction.DISABLE)] == [
        0,
        1,
        2,
    ]
    expected = {
        "OK": 0, "INTERNAL_ERROR": -1, "NO_AVAILABLE_HANDLE": -200, "INVALID_PARAMS": -600,
        "ILLEGAL_CLIENT": -601, "INVALID_WRITE": -700, "REPLICA_IS_NOT_READY": -703,
        "OBJECT_NOT_FOUND": -704, "OBJECT_ALREADY_EXISTS": -705, "OBJECT_HAS_LEASE": -706,
        "LEASE_EXPIRED": -707, "TRANSFER_FAIL": -800, "CHECKSUM_MISMATCH": -801, "RPC_FAIL": -900,
        "RPC_TIMEOUT": -901,
    }  # fmt: skip
    for name, value in expected.items():
        assert int(ErrorCode[name]) == value


def test_prefer_alloc_in_same_node_rejected_on_copying_put(store):
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    assert store.put(key("pn"), b"v", cfg) == INVALID
    buf = np.ones(16, dtype=np.uint8)
    assert store.put_from(key("pn"), buf.ctypes.data, 16, cfg) == 0  # zero-copy form accepts it


def test_invalid_configs(store):
    cfg = ReplicateConfig()
    cfg.replica_num = 0
    assert store.put(key("cfg"), b"v", cfg) == INVALID
    cfg = ReplicateConfig()
    cfg.soft_pin_ttl_ms = 1000  # a TTL with PRESERVE
    assert store.put(key("cfg"), b"v", cfg) == INVALID
    cfg.soft_pin_action = SoftPinAction.DISABLE
    assert store.put(key("cfg"), b"v", cfg) == INVALID
    cfg = ReplicateConfig()
    cfg.soft_pin_action, cfg.soft_pin_ttl_ms = (
        SoftPinAction.ENABLE,
        25 * 3600 * 1000,
    )  # above max 24 h
    assert store.put(key("cfg"), b"v", cfg) == INVALID


def test_preferred_segment_places_object(store_master, store):
    cfg = ReplicateConfig()
    cfg.preferred_segment = store.get_hostname()
    k = key("pref")
    assert store.put(k, b"here", cfg) == 0
    info = store_master.query_key(k)
    assert [r["segment_name"] for r in info["replicas"]] == [store.get_hostname()]


def test_hard_pin_flag_reaches_master(store_master, store):
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    k = key("hp")
    assert store.put(k, b"pinned", cfg) == 0
    assert store_master.query_key(k)["hard_pinned"] is True


def test_env_min_port(store_master, tmp_path):
    """MC_STORE_CLIENT_MIN_PORT/MAX_PORT bound the auto-picked port (checked in a subprocess:
    the Go runtime reads its environment at load time)."""
    import subprocess
    import sys

    from conftest import free_port

    port = free_port()
    code = (
        "from mooncake.store import MooncakeDistributedStore as S\n"
        "s=S()\n"
        f"rc=s.setup('127.0.0.1',{store_master.metadata_url!r},0,'1MB','tcp','',{store_master.rpc!r})\n"
        "assert rc==0\n"
        "print(s.get_hostname()); s.close()\n"
    )
    env = dict(os.environ, MC_STORE_CLIENT_MIN_PORT=str(port), MC_STORE_CLIENT_MAX_PORT=str(port))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"127.0.0.1:{port}"


def test_invalid_sizes_and_pointers(store):
    """Negative sizes and NULL pointers are -600, per key, never a crash or a wrapped size."""
    buf = np.zeros(100, dtype=np.uint8)
    k = key("inv")
    assert store.put(k, b"y" * 10) == 0
    assert store.put_from(key(), buf.ctypes.data, -1) == INVALID
    assert store.put_from(key(), 0, 100) == INVALID  # NULL with a size
    assert store.upsert_from(key(), buf.ctypes.data, -5) == INVALID
    assert store.get_into(k, buf.ctypes.data, -5) == INVALID
    assert store.get_into(k, 0, 100) == INVALID
    assert store.batch_put_from([key(), key()], [buf.ctypes.data] * 2, [-3, 5]) == [INVALID, 0]
    assert store.batch_get_into([k, k], [buf.ctypes.data] * 2, [-3, 50]) == [INVALID, 10]
    res = store.batch_get_into_multi_buffers([k], [[buf.ctypes.data, 0]], [[5, 5]])
    assert res == [INVALID]
    assert store.get_into_ranges([0], [[k]], [[[0]]], [[[0]]], [[[5]]]) == [[[INVALID]]]
    res = store.get_into_ranges(
        [buf.ctypes.data], [[k, k]], [[[0], [0]]], [[[-1], [0]]], [[[5], [5]]]
    )
    assert res == [[[INVALID], [5]]]
    assert store.get(k) == b"y" * 10
