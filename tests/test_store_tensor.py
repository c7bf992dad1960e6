"""Tensor API of `mooncake.store`: the 304-byte header, byte-exact, and TP shards.

Expected headers are built here by hand with `struct` from the layout in
spec store_te.md §1.5 (upstream `TensorMetadata`), independently of
mooncake/_tensor.py, and compared with what the store holds (read back as
raw bytes with `get`).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mooncake.store import (  # noqa: E402
    ParallelAxis,
    ReadTarget,
    TensorParallelism,
    _deserialize_tensor,
    _serialize_tensor,
    _tensor_metadata_size,
)
from tensor_cases import (  # noqa: E402
    DTYPES,
    HEADER,
    INVALID,
    expected_header,
    key,
    raw,
    same,
    sample,
    tensor_client,
    tp_axis,
)


@pytest.fixture(scope="module")
def store(store_master):
    yield from tensor_client(store_master)


def test_metadata_size():
    assert _tensor_metadata_size() == 304


@pytest.mark.parametrize("code", list(DTYPES))
def test_header_byte_exact_all_dtypes(store, code):
    t = sample(code, (3, 5))
    k = key(f"dt{code}")
    assert store.put_tensor(k, t) == 0
    stored = store.get(k)
    assert stored[:HEADER] == expected_header(code, [3, 5])
    assert stored[HEADER:] == raw(t)
    assert same(store.get_tensor(k), t)
    # the helper functions agree
    header, ptr, nbytes, owner = _serialize_tensor(t)
    assert header == expected_header(code, [3, 5]) and nbytes == t.numel() * t.element_size()
    assert ptr == owner.data_ptr()
    assert same(_deserialize_tensor(stored), t)


@pytest.mark.parametrize("shape", [(), (0,), (4, 0, 3), (7,), (1, 2, 3, 4, 5, 1, 1, 2)])
def test_shapes_and_zero_elements(store, shape):
    t = sample(0, shape)
    k = key("shape")
    assert store.put_tensor(k, t) == 0
    stored = store.get(k)
    assert len(stored) == HEADER + t.numel() * 4
    assert stored[:HEADER] == expected_header(0, list(shape))
    got = store.get_tensor(k)
    assert same(got, t)


def test_more_than_eight_dims_rejected(store):
    t = torch.zeros([1] * 9)
    assert store.put_tensor(key("9d"), t) == INVALID


def test_non_contiguous_inputs(store):
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    for t in (base.t(), base[:, ::2], base[1:5, 2:7]):
        assert not t.is_contiguous()
        k = key("nc")
        assert store.put_tensor(k, t) == 0
        stored = store.get(k)
        assert stored[:HEADER] == expected_header(0, list(t.shape))
        assert stored[HEADER:] == raw(t.contiguous())
        assert torch.equal(store.get_tensor(k), t)


def test_batch_put_and_get_tensor(store):
    tensors = [
        sample(0, (4, 4)),
        sample(12, (10,)),
        sample(10, (2, 3)),
        torch.empty(0, dtype=torch.int64),
    ]
    keys = [key("b") for _ in tensors]
    assert store.batch_put_tensor(keys, tensors) == [0, 0, 0, 0]
    got = store.batch_get_tensor([*keys, key("missing")])
    assert all(same(g, t) for g, t in zip(got, tensors, strict=False))
    assert got[-1] is None
    assert store.batch_put_tensor(keys, tensors[:1]) == [INVALID] * 4
    assert store.batch_get_tensor([]) == []


def test_bad_tensors(store):
    assert store.put_tensor(key("bad"), b"not a tensor") == INVALID
    assert (
        store.put_tensor(key("bad"), torch.zeros(2, dtype=torch.complex64)) == INVALID
    )  # no dtype code
    assert store.get_tensor(key("missing")) is None


def _corrupt(header: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(header)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


@pytest.mark.parametrize(
    "field,offset,fmt,value",
    [
        ("magic", 0, "<I", 0x12345678),
        ("version", 4, "<H", 2),
        ("header_size", 6, "<H", 256),
        ("dtype", 8, "<i", 15),
        ("dtype_negative", 8, "<i", -1),
        ("ndim", 12, "<i", 9),
        ("ndim_mismatch", 12, "<i", 1),
        ("layout_kind", 16, "<I", 7),
        ("data_offset", 24, "<Q", 100),
        ("data_bytes", 32, "<Q", 4 * 15 + 4),
        ("data_bytes_short", 32, "<Q", 8),
        ("local_shape", 104, "<q", 4),
        ("trailing_dim", 104 + 2 * 8, "<q", 3),
        ("axis_count", 168, "<I", 5),
    ],
)
def test_strict_validation_on_read(store, field, offset, fmt, value):
    t = sample(0, (3, 5))
    good = expected_header(0, [3, 5])
    k = key("good")
    assert store.put(k, good + raw(t)) == 0  # a hand-built object reads back
    assert same(store.get_tensor(k), t)
    k = key(field)
    assert store.put(k, _corrupt(good, offset, fmt, value) + raw(t)) == 0
    assert store.get_tensor(k) is None
    assert store.batch_get_tensor([k]) == [None]


def test_truncated_objects_invalid(store):
    t = sample(0, (3, 5))
    good = expected_header(0, [3, 5]) + raw(t)
    for cut in (10, 303, 304, len(good) - 1):
        k = key("cut")
        assert store.put(k, good[:cut]) == 0
        assert store.get_tensor(k) is None
    k = key("extra")
    assert store.put(k, good + b"\0") == 0  # data_bytes no longer matches
    assert store.get_tensor(k) is None


# -- tensor parallelism ------------------------------------------------------------


@pytest.mark.parametrize("split_dim", [0, 1])
def test_put_tensor_with_tp_writes_all_shards(store, split_dim):
    t = sample(0, (4, 6))
    k = key("tp")
    tp = 2
    assert store.put_tensor_with_tp(k, t, tp_rank=1, tp_size=tp, split_dim=split_dim) == 0
    assert store.is_exist(k) == 0  # no full object
    for r in range(tp):
        shard = t.chunk(tp, dim=split_dim)[r].contiguous()
        stored = store.get(f"{k}_tp_{r}")
        axis = (
            1,
            0,
            r,
            tp,
            split_dim,
            0,
            shard.shape[split_dim],
        )  # TP, axis 0, rank, count, split, 0, extent
        assert stored[:HEADER] == expected_header(0, list(shard.shape), [4, 6], [axis])
        assert stored[HEADER:] == raw(shard)
        got = store.get_tensor_with_tp(k, tp_rank=r, tp_size=tp, split_dim=split_dim)
        assert torch.equal(got, shard)
    # get_tensor_with_tp ignores split_dim (no reassembly)
    assert torch.equal(store.get_tensor_with_tp(k, tp_rank=0, tp_size=tp, split_dim=1 - split_dim),
                       t.chunk(tp, dim=split_dim)[0])  # fmt: skip
    target = ReadTarget()
    target.mode = "FULL"  # case-insensitive
    target.parallelism = TensorParallelism([tp_axis(1, tp, split_dim)])  # the rank is irrelevant
    assert torch.equal(store.get_tensor_with_parallelism(k, target), t)
    # without parallelism "full" looks for writer partitions, then the plain key
    assert store.get_tensor_with_parallelism(k, ReadTarget("full")) is None
    assert store.get_tensor_with_parallelism(k) is None  # default: as_stored, i.e. get_tensor(k)


def test_tp_size_one_is_plain_put(store):
    t = sample(6, (5, 3))
    k = key("tp1")
    assert store.put_tensor_with_tp(k, t, tp_rank=0, tp_size=1) == 0
    assert store.get(k)[:HEADER] == expected_header(6, [5, 3])
    assert store.is_exist(f"{k}_tp_0") == 0
    assert torch.equal(store.get_tensor_with_tp(k, tp_size=1), t)
    assert torch.equal(store.get_tensor_with_tp(k, tp_rank=3, tp_size=0), t)
    assert torch.equal(store.get_tensor_with_parallelism(k, ReadTarget("full")), t)
    assert torch.equal(store.get_tensor_with_parallelism(k), t)


def test_tp_non_uniform_and_bad_dims_rejected(store):
    t = sample(0, (5, 4))
    k = key("tpbad")
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=0) == INVALID  # 5 % 2
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=2) == INVALID  # no dim 2
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=-1) == INVALID
    assert store.is_exist(f"{k}_tp_0") == 0 and store.is_exist(f"{k}_tp_1") == 0
    assert store.put_tensor_with_tp(k, torch.tensor(1.0), tp_size=2) == INVALID  # 0-d


def test_batch_tp(store):
    ts = [sample(0, (8, 2)), sample(11, (4, 4))]
    keys = [key("btp"), key("btp")]
    assert store.batch_put_tensor_with_tp(keys, ts, tp_rank=0, tp_size=4, split_dim=0) == [0, 0]
    for r in range(4):
        got = store.batch_get_tensor_with_tp(keys, tp_rank=r, tp_size=4)
        for g, t in zip(got, ts, strict=True):
            assert torch.equal(g, t.chunk(4, dim=0)[r])
    # one bad tensor fails only its key
    bad = [sample(0, (8, 2)), sample(0, (3, 3))]
    keys2 = [key("btp2"), key("btp2")]
    assert store.batch_put_tensor_with_tp(keys2, bad, tp_size=2) == [0, INVALID]
    assert store.batch_get_tensor_with_tp(keys2, tp_rank=1, tp_size=2)[1] is None
    # tp_size 1 reads the plain keys, which were never written
    assert store.batch_get_tensor_with_tp(keys, 0, 1) == [None, None]


def test_parallelism_shard_mode(store):
    t = sample(1, (6, 4))
    k = key("par")
    assert store.put_tensor_with_tp(k, t, tp_size=2, split_dim=0) == 0
    # a TP size other than the stored one: re-sliced from the stored shards
    target = ReadTarget("shard", TensorParallelism([tp_axis(2, 3, 0)]))
    assert torch.equal(store.get_tensor_with_parallelism(k, target), t[4:6])
    as_stored = ReadTarget("as_stored", TensorParallelism([tp_axis(0, 2, 0)]))
    assert torch.equal(store.get_tensor_with_parallelism(k, as_stored), t[:3])
    full = ReadTarget("full", TensorParallelism([tp_axis(0, 2, 0)]))
    assert store.get_tensor_with_parallelism(key("none"), full) is None
    # a missing shard makes the full read fail
    assert store.remove(f"{k}_tp_1", force=True) == 0
    assert store.get_tensor_with_parallelism(k, full) is None
    with pytest.raises(RuntimeError, match="Unsupported ReadTarget mode"):
        ReadTarget("everything")
    bad_kind = ReadTarget("shard", TensorParallelism([ParallelAxis("xx", 0, 1)]))
    assert store.get_tensor_with_parallelism(k, bad_kind) is None  # checked on use


def test_tensor_roundtrip_large(store):
    t = torch.from_numpy(
        np.random.default_rng(1).standard_normal((1024, 1100)).astype(np.float32)
    )  # ~4.3 MiB
    k = key("large")
    assert store.put_tensor(k, t) == 0
    assert torch.equal(store.get_tensor(k), t)
