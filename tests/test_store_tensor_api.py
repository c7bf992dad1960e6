"""Tensor API breadth of `mooncake.store`: pub/upsert forms, `_into` reads into caller
memory, `_from` writes of tensor objects held in caller memory, the TP `_into`/`_from`
forms, safetensors files and `mooncake.async_store` (spec store_ext.md §6.1, §6.5, §6.10).
"""

from __future__ import annotations

import asyncio
import json
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mooncake.async_store import MooncakeDistributedStoreAsync  # noqa: E402
from mooncake.store import ReplicateConfig  # noqa: E402
from tensor_cases import (  # noqa: E402
    DTYPES,
    HEADER,
    INVALID,
    expected_header,
    key,
    ptr,
    raw,
    same,
    sample,
    tensor_client,
    tensor_object,
)

FILE_NOT_FOUND = -1100


@pytest.fixture(scope="module")
def store(store_master):
    yield from tensor_client(store_master)


# -- pub / upsert ---------------------------------------------------------------------


@pytest.mark.parametrize("code", list(DTYPES))
def test_write_forms_round_trip_every_dtype(store, code):
    t = sample(code, (3, 4))
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    writes = {
        "put": lambda k: store.put_tensor(k, t),
        "upsert": lambda k: store.upsert_tensor(k, t),
        "pub": lambda k: store.pub_tensor(k, t, cfg),
        "upsert_pub": lambda k: store.upsert_pub_tensor(k, t, cfg),
        "batch_put": lambda k: store.batch_put_tensor([k], [t])[0],
        "batch_upsert": lambda k: store.batch_upsert_tensor([k], [t])[0],
        "batch_pub": lambda k: store.batch_pub_tensor([k], [t], cfg)[0],
        "batch_upsert_pub": lambda k: store.batch_upsert_pub_tensor([k], [t], cfg)[0],
    }
    for name, write in writes.items():
        k = key(name)
        assert write(k) == 0, name
        stored = store.get(k)
        assert stored[:HEADER] == expected_header(code, [3, 4]), name
        assert stored[HEADER:] == raw(t), name
        assert same(store.get_tensor(k), t), name


def test_upsert_overwrites_put_does_not(store):
    a, b = sample(0, (4,)), sample(0, (2, 3)) + 100
    k = key("ups")
    assert store.put_tensor(k, a) == 0
    assert store.put_tensor(k, b) == 0  # an existing key is left as it is
    assert same(store.get_tensor(k), a)
    assert store.upsert_tensor(k, b) == 0
    assert same(store.get_tensor(k), b)
    assert store.upsert_pub_tensor(k, a, ReplicateConfig()) == 0
    assert same(store.get_tensor(k), a)
    keys = [key("bups"), key("bups")]
    assert store.batch_put_tensor(keys, [a, a]) == [0, 0]
    assert store.batch_upsert_tensor(keys, [b, b]) == [0, 0]
    assert all(same(g, b) for g in store.batch_get_tensor(keys))


def test_batch_write_forms_check_lengths_and_tensors(store):
    t = sample(0, (2,))
    keys = [key("bl"), key("bl")]
    cfg = ReplicateConfig()
    assert store.batch_pub_tensor(keys, [t], cfg) == [INVALID, INVALID]
    assert store.batch_upsert_tensor(keys, [t]) == [INVALID, INVALID]
    assert store.batch_upsert_pub_tensor(keys, [t, t, t], cfg) == [INVALID, INVALID]
    assert store.batch_pub_tensor(keys, [t, "x"], cfg) == [0, INVALID]
    assert store.batch_pub_tensor([], [], cfg) == []
    cfg.group_ids = ["g"]  # one group id for two keys
    assert store.batch_pub_tensor([key("g"), key("g")], [t, t], cfg) == [INVALID, INVALID]
    cfg.group_ids = ["g", ""]
    assert store.batch_pub_tensor([key("g"), key("g")], [t, t], cfg) == [0, 0]


def test_pub_tensor_preferred_segments_must_match_replica_num(store):
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.preferred_segments = [store.get_hostname(), store.get_hostname()]
    assert store.pub_tensor(key("pref"), sample(0, (2,)), cfg) == INVALID


def test_zero_element_tensors_every_path(store):
    t = torch.empty(0, 3, dtype=torch.float16)
    k = key("zero")
    assert store.upsert_pub_tensor(k, t, ReplicateConfig()) == 0
    assert same(store.get_tensor(k), t)
    buf = np.zeros(HEADER, dtype=np.uint8)
    got = store.get_tensor_into(k, ptr(buf), HEADER)
    assert same(got, t)
    obj = tensor_object(t)
    k2 = key("zero_from")
    assert store.put_tensor_from(k2, ptr(obj), obj.nbytes) == 0
    assert same(store.get_tensor(k2), t)


# -- get_tensor_into -------------------------------------------------------------------


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("code", list(DTYPES))
def test_get_tensor_into_views_the_buffer(store, code, registered):
    t = sample(code, (5, 3))
    k = key("into")
    assert store.put_tensor(k, t) == 0
    size = HEADER + t.numel() * t.element_size()
    buf = np.full(size + 64, 0xAB, dtype=np.uint8)
    if registered:
        assert store.register_buffer(ptr(buf), buf.nbytes) == 0
    try:
        got = store.get_tensor_into(k, ptr(buf), buf.nbytes)
        assert same(got, t)
        assert got.data_ptr() == ptr(buf) + HEADER  # a view, not a copy
        assert buf[:HEADER].tobytes() == expected_header(code, [5, 3])
        assert (buf[size:] == 0xAB).all()  # nothing written past the object
        buf[HEADER] ^= 0xFF  # the view sees the buffer
        assert raw(got)[0] == buf[HEADER]
    finally:
        if registered:
            assert store.unregister_buffer(ptr(buf)) == 0


@pytest.mark.parametrize("registered", [False, True])
def test_get_tensor_into_failures_are_none(store, registered):
    t = sample(0, (8,))
    k = key("intof")
    assert store.put_tensor(k, t) == 0
    buf = np.zeros(HEADER + 31, dtype=np.uint8)  # one byte short
    if registered:
        assert store.register_buffer(ptr(buf), buf.nbytes) == 0
    try:
        assert store.get_tensor_into(k, ptr(buf), buf.nbytes) is None
        assert store.get_tensor_into(key("missing"), ptr(buf), buf.nbytes) is None
        assert store.get_tensor_into(k, 0, 1024) is None
        bad = key("notatensor")
        assert store.put(bad, b"x" * 40) == 0
        assert store.get_tensor_into(bad, ptr(buf), buf.nbytes) is None
    finally:
        if registered:
            assert store.unregister_buffer(ptr(buf)) == 0


def test_batch_get_tensor_into(store):
    ts = [sample(0, (4,)), sample(12, (2, 2))]
    keys = [key("bi"), key("bi")]
    assert store.batch_put_tensor(keys, ts) == [0, 0]
    bufs = [np.zeros(HEADER + 16, dtype=np.uint8) for _ in range(3)]
    got = store.batch_get_tensor_into(
        [*keys, key("missing")], [ptr(b) for b in bufs], [b.nbytes for b in bufs]
    )
    assert same(got[0], ts[0]) and same(got[1], ts[1]) and got[2] is None
    assert got[0].data_ptr() == ptr(bufs[0]) + HEADER
    p = [ptr(b) for b in bufs[:2]]
    assert store.batch_get_tensor_into(keys, p[:1], [16]) == [INVALID, INVALID]
    assert store.batch_get_tensor_into(keys, [p[0], 0], [32, 32]) == [INVALID, INVALID]
    assert store.batch_get_tensor_into([], [], []) == []


# -- put_tensor_from --------------------------------------------------------------------


@pytest.mark.parametrize("code", list(DTYPES))
def test_put_tensor_from_every_dtype(store, code):
    t = sample(code, (2, 3, 2))
    obj = tensor_object(t)
    k = key("from")
    assert store.put_tensor_from(k, ptr(obj), obj.nbytes) == 0
    assert store.get(k) == obj.tobytes()
    assert same(store.get_tensor(k), t)


def test_from_forms_validate_and_overwrite(store):
    a, b = sample(0, (6,)), sample(0, (6,)) * 2
    oa, ob = tensor_object(a), tensor_object(b)
    k = key("fromv")
    assert store.put_tensor_from(k, ptr(oa), oa.nbytes - 1) == INVALID  # data_bytes mismatch
    assert store.put_tensor_from(k, ptr(oa), 100) == INVALID  # shorter than a header
    assert store.put_tensor_from(k, 0, oa.nbytes) == INVALID
    garbage = np.arange(oa.nbytes, dtype=np.uint8)
    assert store.put_tensor_from(k, ptr(garbage), garbage.nbytes) == INVALID
    assert store.is_exist(k) == 0
    assert store.put_tensor_from(k, ptr(oa), oa.nbytes) == 0
    assert store.put_tensor_from(k, ptr(ob), ob.nbytes) == 0  # put leaves it
    assert same(store.get_tensor(k), a)
    assert store.upsert_tensor_from(k, ptr(ob), ob.nbytes) == 0
    assert same(store.get_tensor(k), b)
    keys = [key("bfrom"), key("bfrom"), key("bfrom")]
    ptrs, sizes = [ptr(oa), ptr(ob), ptr(garbage)], [oa.nbytes, ob.nbytes, garbage.nbytes]
    assert store.batch_put_tensor_from(keys, ptrs, sizes) == [0, 0, INVALID]
    assert same(store.get_tensor(keys[1]), b)
    assert store.batch_upsert_tensor_from(keys[:2], ptrs[1::-1], sizes[1::-1]) == [0, 0]
    assert same(store.get_tensor(keys[0]), b) and same(store.get_tensor(keys[1]), a)
    assert store.batch_put_tensor_from(keys, ptrs[:1], sizes) == [INVALID] * 3


# -- TP _from / _into / pub -----------------------------------------------------------------


@pytest.mark.parametrize("split_dim", [0, 1, 2])
def test_put_tensor_with_tp_from_equals_put_tensor_with_tp(store, split_dim):
    t = sample(1, (4, 6, 2))
    obj = tensor_object(t)
    a, b = key("tpf"), key("tp")
    assert store.put_tensor_with_tp_from(a, ptr(obj), obj.nbytes, 0, 2, split_dim) == 0
    assert store.put_tensor_with_tp(b, t, 0, 2, split_dim) == 0
    for r in range(2):
        assert store.get(f"{a}_tp_{r}") == store.get(f"{b}_tp_{r}")
        assert same(store.get_tensor_with_tp(a, r, 2), t.chunk(2, dim=split_dim)[r].contiguous())
    assert store.put_tensor_with_tp_from(key("tpf"), ptr(obj), obj.nbytes, 0, 4, 0) == 0
    assert store.put_tensor_with_tp_from(key("tpf"), ptr(obj), obj.nbytes, 0, 3, 0) == INVALID
    assert store.put_tensor_with_tp_from(key("tpf"), ptr(obj), 10, 0, 2, 0) == INVALID
    k1 = key("tpf1")  # tp_size 1: stored as it is
    assert store.put_tensor_with_tp_from(k1, ptr(obj), obj.nbytes, 0, 1, 0) == 0
    assert store.get(k1) == obj.tobytes()
    ks = [key("btpf"), key("btpf")]
    o2 = tensor_object(sample(0, (2, 2)))
    assert store.batch_put_tensor_with_tp_from(
        ks, [ptr(obj), ptr(o2)], [obj.nbytes, o2.nbytes], 0, 2, 0
    ) == [0, 0]
    assert same(store.get_tensor(f"{ks[1]}_tp_1"), sample(0, (2, 2))[1:])


def test_pub_tensor_with_tp(store):
    t = sample(6, (6, 2))
    cfg = ReplicateConfig()
    k = key("ptp")
    assert store.pub_tensor_with_tp(k, t, cfg, 0, 3, 0) == 0
    for r in range(3):
        assert same(store.get_tensor(f"{k}_tp_{r}"), t[2 * r : 2 * r + 2])
    ks = [key("bptp"), key("bptp")]
    assert store.batch_pub_tensor_with_tp(ks, [t, t[:5]], cfg, 0, 2, 0) == [0, INVALID]
    assert same(store.get_tensor(f"{ks[0]}_tp_1"), t[3:])
    k1 = key("ptp1")
    assert store.pub_tensor_with_tp(k1, t, cfg) == 0  # tp_size 1: one plain object
    assert same(store.get_tensor(k1), t)


def test_get_tensor_with_tp_into(store):
    t = sample(0, (4, 4))
    k = key("tpi")
    assert store.put_tensor_with_tp(k, t, 0, 2, 1) == 0
    buf = np.zeros(HEADER + 32, dtype=np.uint8)
    got = store.get_tensor_with_tp_into(k, ptr(buf), buf.nbytes, 1, 2, 1)
    assert same(got, t[:, 2:].contiguous()) and got.data_ptr() == ptr(buf) + HEADER
    assert store.get_tensor_with_tp_into(k, ptr(buf), 100, 1, 2, 1) is None  # too small
    bufs = [np.zeros(HEADER + 32, dtype=np.uint8) for _ in range(2)]
    k2 = key("tpi")
    assert store.put_tensor_with_tp(k2, t * 2, 0, 2, 1) == 0
    got = store.batch_get_tensor_with_tp_into(
        [k, k2], [ptr(b) for b in bufs], [b.nbytes for b in bufs], 0, 2
    )
    assert same(got[0], t[:, :2].contiguous()) and same(got[1], (t * 2)[:, :2].contiguous())
    k3 = key("tpi1")
    assert store.put_tensor(k3, t) == 0
    big = np.zeros(HEADER + 64, dtype=np.uint8)
    assert same(store.get_tensor_with_tp_into(k3, ptr(big), big.nbytes), t)  # tp_size 1


# -- safetensors ---------------------------------------------------------------------------


def read_safetensors_by_hand(path) -> tuple[dict, bytes]:
    """The published format: u64 LE header length, JSON header, data."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data)
    assert n % 8 == 0  # padded to 8 bytes
    return json.loads(data[8 : 8 + n]), data[8 + n :]


ST_NAMES = {
    0: "F32", 1: "F64", 2: "I8", 3: "U8", 4: "I16", 5: "U16", 6: "I32", 7: "U32", 8: "I64",
    9: "U64", 10: "BOOL", 11: "F16", 12: "BF16", 13: "F8_E4M3", 14: "F8_E5M2",
}  # fmt: skip


@pytest.mark.parametrize("code", list(DTYPES))
def test_save_tensor_to_safetensor_every_dtype(store, tmp_path, code):
    t = sample(code, (3, 2))
    k = key("st")
    assert store.put_tensor(k, t) == 0
    path = tmp_path / "t.safetensors"
    assert store.save_tensor_to_safetensor(k, str(path)) == 0
    header, data = read_safetensors_by_hand(path)
    assert header == {k: {"dtype": ST_NAMES[code], "shape": [3, 2], "data_offsets": [0, len(data)]}}
    assert data == raw(t)
    # and it loads back under a new key
    k2 = key("st_back")
    back = store.load_tensor_from_safetensor(k2, file_name=str(path))
    assert same(back, t) and same(store.get_tensor(k2), t)


def test_safetensors_package_reads_and_writes_our_files(store, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    ts = {code: sample(code, (4, 3)) for code in DTYPES}
    for code, t in ts.items():
        k = key(f"stp{code}")
        path = tmp_path / f"{code}.safetensors"
        assert store.put_tensor(k, t) == 0
        assert store.save_tensor_to_safetensor(k, str(path)) == 0
        loaded = st.load_file(str(path))
        assert list(loaded) == [k] and same(loaded[k], t)
        # a file the package wrote, with several tensors: the one named by the key is taken
        other = tmp_path / f"pkg{code}.safetensors"
        st.save_file({"a": torch.zeros(2), "wanted": t}, str(other))
        got = store.load_tensor_from_safetensor("wanted", file_name=str(other))
        assert same(got, t) and same(store.get_tensor("wanted"), t)
        assert store.remove("wanted", force=True) == 0


def test_safetensor_helpers_failures(store, tmp_path):
    assert store.save_tensor_to_safetensor(key("missing"), str(tmp_path / "x")) == FILE_NOT_FOUND
    k = key("stf")
    assert store.put_tensor(k, sample(0, (2,))) == 0
    assert store.save_tensor_to_safetensor(k, str(tmp_path / "no" / "dir" / "x")) == INVALID
    assert store.load_tensor_from_safetensor(k, file_name=str(tmp_path / "nofile")) is None
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert store.load_tensor_from_safetensor(key("e"), file_name=str(empty)) is None
    bad = tmp_path / "bad"
    bad.write_bytes(struct.pack("<Q", 8) + b"{notjson")
    assert store.load_tensor_from_safetensor(key("b"), file_name=str(bad)) is None
    # no key: stored under the file name; the first tensor is taken when none has that name
    two = tmp_path / "two.safetensors"
    assert store.put_tensor(k, sample(0, (2,))) == 0
    assert store.save_tensor_to_safetensor(k, str(two)) == 0
    got = store.load_tensor_from_safetensor(file_name=str(two))
    assert same(got, sample(0, (2,))) and same(store.get_tensor(str(two)), got)


def test_save_tensor_to_safetensor_key_names_a_file_in_the_working_dir(
    store, tmp_path, monkeypatch
):
    """Issue 33 #10: without file_name the key was the path, so "../../x" escaped."""
    work = tmp_path / "work" / "dir"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    t = sample(0, (3,))
    # default file name: the key, a plain name in the working directory
    assert store.put_tensor("bykey", t) == 0
    assert store.save_tensor_to_safetensor("bykey") == 0
    assert read_safetensors_by_hand(work / "bykey")[1] == raw(t)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (work / "link").symlink_to(victim)
    for k in ("../escape", "../../escape", str(tmp_path / "abs"), "sub/x", "..", ".", "link"):
        assert store.put_tensor(k, t) == 0
        assert store.save_tensor_to_safetensor(k) == INVALID, k
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bykey", "dir", "link", "victim", "work"]
    assert victim.read_bytes() == b"keep"
    # an explicit file_name is the caller's choice, as upstream's
    assert store.save_tensor_to_safetensor("../escape", str(tmp_path / "chosen")) == 0
    assert (tmp_path / "chosen").exists()


def test_load_tensor_from_safetensor_crafted_headers_are_none(store, tmp_path):
    """Issue 33 #10: a crafted header raised TypeError/RuntimeError instead of None."""
    from test_store_tensor_safetensors import CRAFTED

    for i, (name, data) in enumerate(CRAFTED.items()):
        path = tmp_path / f"crafted{i}"
        path.write_bytes(data)
        assert store.load_tensor_from_safetensor(key("crafted"), file_name=str(path)) is None, name


def test_load_tensor_from_safetensor_takes_file_name_positionally(store, tmp_path):
    """Issue 35 #4: upstream's tests call (key, file_name); ours took file_name keyword-only."""
    t = sample(6, (2, 3))
    k, k2 = key("pos"), key("pos_back")
    path = str(tmp_path / "pos.safetensors")
    assert store.put_tensor(k, t) == 0
    assert store.save_tensor_to_safetensor(k, path) == 0
    back = store.load_tensor_from_safetensor(k2, path)
    assert same(back, t) and same(store.get_tensor(k2), t)
    assert store.load_tensor_from_safetensor(k2, str(tmp_path / "missing")) is None
    with pytest.raises(TypeError, match="file_name"):
        store.load_tensor_from_safetensor(k2)


# -- async_store --------------------------------------------------------------------------------


def test_async_store(store_master):
    s = MooncakeDistributedStoreAsync()
    assert s.setup(
        "127.0.0.1", store_master.metadata_url, "64MB", "16MB", "tcp", "", store_master.rpc
    ) == 0  # fmt: skip
    try:
        t = sample(0, (3, 3))
        k, kt = key("async"), key("async_t")

        async def flow():
            assert await s.async_put(k, b"value") == 0
            assert await s.async_get(k) == b"value"
            assert await s.async_is_exist(k) == 1
            assert await s.async_put_tensor(kt, t) == 0
            got = await s.async_get_tensor(kt)
            puts = await asyncio.gather(*(s.async_put(f"{k}/{i}", b"x") for i in range(8)))
            assert await s.async_put_batch([f"{k}/b"], [b"y"]) == 0  # a single int
            return got, puts, await s.async_remove(k, force=True)  # kwargs pass through

        got, puts, removed = asyncio.run(flow())
        assert same(got, t) and puts == [0] * 8 and removed == 0
        assert s.async_put is s.async_put  # made once, kept on the instance
        for name in ("async_no_such_method", "async_", "put_async", "async__handle"):
            with pytest.raises(AttributeError):
                getattr(s, name)
    finally:
        s.close()
