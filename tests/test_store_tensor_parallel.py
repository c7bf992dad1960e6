"""Unified parallel tensor I/O (spec store_ext.md §6.2–§6.4): TP/DP/EP/PP layouts written
by N writer clients, read back by another client as shard, as stored and as full, into
new tensors and into registered and unregistered caller buffers.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mooncake.store import ParallelAxis, ReadTarget, ReplicateConfig, TensorParallelism  # noqa: E402
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

N_WRITERS = 4
TP, DP, EP, PP = 1, 0, 2, 3  # LayoutAxis kinds


@pytest.fixture(scope="module")
def writers(store_master):
    gens = [tensor_client(store_master, "64MB") for _ in range(N_WRITERS)]
    clients = [next(g) for g in gens]
    yield clients
    for g in gens:
        next(g, None)


@pytest.fixture(scope="module")
def reader(store_master):
    yield from tensor_client(store_master, "0")


@dataclasses.dataclass
class WriterPartition:
    rank: int
    size: int
    split_dim: int


def axis(kind: str, rank: int, size: int, **fields) -> ParallelAxis:
    a = ParallelAxis()
    a.kind, a.rank, a.size = kind, rank, size
    for name, value in fields.items():
        setattr(a, name, value)
    return a


def par(*axes) -> TensorParallelism:
    p = TensorParallelism()
    p.axes = list(axes)
    return p


def target(mode: str, *axes) -> ReadTarget:
    t = ReadTarget()
    t.mode = mode
    t.parallelism = par(*axes) if axes else None
    return t


def manifest(code, shape, split_dim, count) -> bytes:
    """Upstream's 96-byte manifest, packed field by field."""
    m = struct.pack("<IHH", 0x574D414E, 1, 96)
    m += struct.pack("<iiiii", code, len(shape), split_dim, count, 0) + bytes(4)
    m += struct.pack("<8q", *(list(shape) + [-1] * (8 - len(shape))))
    assert len(m) == 96
    return m


def read_into(reader, k, tgt, nbytes, registered=False):
    """get_tensor_with_parallelism_into a fresh buffer; (tensor, buffer)."""
    buf = np.zeros(HEADER + nbytes, dtype=np.uint8)
    if registered:
        assert reader.register_buffer(ptr(buf), buf.nbytes) == 0
    try:
        got = reader.get_tensor_with_parallelism_into(k, ptr(buf), buf.nbytes, tgt)
    finally:
        if registered:
            assert reader.unregister_buffer(ptr(buf)) == 0
    if got is not None:
        assert got.data_ptr() == ptr(buf) + HEADER  # straight into the caller's buffer
    return got, buf


# -- types and validation ------------------------------------------------------------


def test_types_construct_without_arguments():
    a = ParallelAxis()
    assert (a.kind, a.rank, a.size, a.split_dim, a.expert_id, a.stage_id) == (
        "",
        0,
        1,
        None,
        None,
        None,
    )
    assert TensorParallelism().axes == []
    t = ReadTarget()
    assert t.mode == "as_stored" and t.parallelism is None
    t.mode = "Shard"
    assert t.mode == "shard"
    with pytest.raises(RuntimeError, match="Unsupported ReadTarget mode"):
        t.mode = "partial"


BAD_SPECS = {
    "no axes": [],
    "five axes": [axis("tp", 0, 2, split_dim=0)] * 5,
    "duplicate kind": [axis("dp", 0, 2), axis("dp", 1, 2)],
    "unknown kind": [axis("sp", 0, 2)],
    "rank >= size": [axis("dp", 2, 2)],
    "size 0": [axis("dp", 0, 0)],
    "tp without split_dim": [axis("tp", 0, 2)],
    "dp with split_dim": [axis("dp", 0, 2, split_dim=0)],
    "ep without expert_id": [axis("ep", 0, 2)],
    "ep with split_dim": [axis("ep", 0, 2, expert_id=1, split_dim=0)],
    "pp without stage_id": [axis("pp", 0, 2)],
}


@pytest.mark.parametrize("name", list(BAD_SPECS))
def test_invalid_parallelism(writers, reader, name):
    t = sample(0, (4, 4))
    k = key("bad")
    spec = par(*BAD_SPECS[name])
    w = writers[0]
    assert w.put_tensor_with_parallelism(k, t, spec) == INVALID
    obj = tensor_object(t)
    assert w.put_tensor_with_parallelism_from(k, ptr(obj), obj.nbytes, spec) == INVALID
    for mode in ("shard", "full", "as_stored"):
        assert reader.get_tensor_with_parallelism(k, target(mode, *BAD_SPECS[name])) is None


def test_parallelism_and_writer_partition_together(writers):
    t = sample(0, (4, 4))
    spec, wp = par(axis("tp", 0, 2, split_dim=0)), WriterPartition(0, 2, 0)
    k = key("both")
    assert writers[0].put_tensor_with_parallelism(k, t, spec, None, wp) == INVALID
    assert writers[0].batch_put_tensor_with_parallelism([k], [t], [spec], None, [wp]) == [INVALID]
    assert (
        writers[0].put_tensor_with_parallelism(k, t, None, None, WriterPartition(2, 2, 0))
        == INVALID
    )
    assert (
        writers[0].put_tensor_with_parallelism(k, t, None, None, WriterPartition(0, 3, 0))
        == INVALID
    )


def test_no_parallelism_is_a_plain_put(writers, reader):
    t = sample(8, (3, 3))
    k = key("plain")
    assert writers[0].put_tensor_with_parallelism(k, t) == 0
    assert reader.get(k)[:HEADER] == expected_header(8, [3, 3])
    assert same(reader.get_tensor_with_parallelism(k), t)
    assert same(reader.get_tensor_with_parallelism(k, target("full")), t)  # no writer manifest
    assert reader.get_tensor_with_parallelism(k, target("shard")) is None  # shard needs axes


# -- TP written by N writers --------------------------------------------------------------


@pytest.mark.parametrize("split_dim", [0, 1])
def test_tp_shards_from_n_writers(writers, reader, split_dim):
    full = sample(0, (8, 12))
    shards = full.chunk(N_WRITERS, dim=split_dim)
    k = key("tpn")
    for r, w in enumerate(writers):  # each writer passes its own shard
        spec = par(axis("tp", r, N_WRITERS, split_dim=split_dim))
        assert w.put_tensor_with_parallelism(k, shards[r].contiguous(), spec) == 0
    for r in range(N_WRITERS):
        s = shards[r].contiguous()
        layout = (TP, 0, r, N_WRITERS, split_dim, 0, s.shape[split_dim])
        assert reader.get(f"{k}_tp_{r}") == expected_header(
            0, list(s.shape), [8, 12], [layout]
        ) + raw(s)
    assert reader.get(f"{k}__parallelism_manifest") == manifest(0, [8, 12], split_dim, N_WRITERS)
    for r in range(N_WRITERS):
        tp = axis("tp", r, N_WRITERS, split_dim=split_dim)
        assert same(
            reader.get_tensor_with_parallelism(k, target("shard", tp)), shards[r].contiguous()
        )
        assert same(
            reader.get_tensor_with_parallelism(k, target("as_stored", tp)), shards[r].contiguous()
        )
    # full: whatever rank asks
    for r in (0, 3):
        tp = axis("tp", r, N_WRITERS, split_dim=split_dim)
        assert same(reader.get_tensor_with_parallelism(k, target("full", tp)), full)
    # read with another TP size: re-sliced from the stored shards
    for size in (1, 2):
        for r in range(size):
            tp = axis("tp", r, size, split_dim=split_dim)
            want = full.chunk(size, dim=split_dim)[r].contiguous()
            assert same(reader.get_tensor_with_parallelism(k, target("shard", tp)), want)
    # a split dimension other than the stored one, or a size that does not divide it
    assert (
        reader.get_tensor_with_parallelism(
            k, target("full", axis("tp", 0, 4, split_dim=1 - split_dim))
        )
        is None
    )
    assert (
        reader.get_tensor_with_parallelism(
            k, target("shard", axis("tp", 0, 5, split_dim=split_dim))
        )
        is None
    )


@pytest.mark.parametrize("registered", [False, True])
def test_tp_full_and_shard_into_buffers(writers, reader, registered):
    full = sample(11, (8, 6))
    k = key("tpinto")
    for r, w in enumerate(writers):
        spec = par(axis("tp", r, N_WRITERS, split_dim=0))
        assert w.put_tensor_with_parallelism(k, full[2 * r : 2 * r + 2], spec) == 0
    nbytes = full.numel() * 2
    got, buf = read_into(
        reader, k, target("full", axis("tp", 0, 4, split_dim=0)), nbytes, registered
    )
    assert same(got, full)
    assert buf[:HEADER].tobytes() == expected_header(11, [8, 6])  # a FULL header before the data
    # a shard of another TP size: header says which
    got, buf = read_into(
        reader, k, target("shard", axis("tp", 1, 2, split_dim=0)), nbytes // 2, registered
    )
    assert same(got, full[4:])
    assert buf[:HEADER].tobytes() == expected_header(11, [4, 6], [8, 6], [(TP, 0, 1, 2, 0, 0, 4)])
    # too small by one byte, null pointer
    got, _ = read_into(
        reader, k, target("full", axis("tp", 0, 4, split_dim=0)), nbytes - 1, registered
    )
    assert got is None
    assert (
        reader.get_tensor_with_parallelism_into(
            k, 0, 4096, target("full", axis("tp", 0, 4, split_dim=0))
        )
        is None
    )


def test_tp_full_without_manifest_uses_rank0_header(writers, reader):
    full = sample(6, (4, 8))
    k = key("nomani")
    assert writers[0].put_tensor_with_tp(k, full, 0, 4, 1) == 0  # no manifest
    assert reader.is_exist(f"{k}__parallelism_manifest") == 0
    assert same(
        reader.get_tensor_with_parallelism(k, target("full", axis("tp", 2, 4, split_dim=1))), full
    )
    assert same(
        reader.get_tensor_with_parallelism(k, target("full", axis("tp", 0, 2, split_dim=1))), full
    )


def test_tp_full_checks_every_shard_header(writers, reader):
    full = sample(0, (4, 4))
    k = key("check")
    assert writers[0].put_tensor_with_tp(k, full, 0, 2, 0) == 0
    tgt = target("full", axis("tp", 0, 2, split_dim=0))
    assert same(reader.get_tensor_with_parallelism(k, tgt), full)
    # shard 1 replaced by a plain tensor of the right size: its header no longer matches
    assert writers[0].remove(f"{k}_tp_1", force=True) == 0
    assert writers[0].put_tensor(f"{k}_tp_1", full[2:].contiguous()) == 0
    assert reader.get_tensor_with_parallelism(k, tgt) is None
    # ... and a shard read of rank 1 checks its axes too (then re-slicing fails as well)
    assert (
        reader.get_tensor_with_parallelism(k, target("shard", axis("tp", 1, 2, split_dim=0)))
        is None
    )


@pytest.mark.parametrize("code", list(DTYPES))
def test_tp_round_trip_every_dtype(writers, reader, code):
    full = sample(code, (4, 6))
    k = key(f"tpdt{code}")
    for r in range(2):
        spec = par(axis("tp", r, 2, split_dim=1))
        assert (
            writers[r].put_tensor_with_parallelism(k, full[:, 3 * r : 3 * r + 3].contiguous(), spec)
            == 0
        )
    tgt = target("full", axis("tp", 0, 2, split_dim=1))
    assert same(reader.get_tensor_with_parallelism(k, tgt), full)
    got, _ = read_into(reader, k, tgt, full.numel() * full.element_size())
    assert same(got, full)
    shard = target("shard", axis("tp", 1, 3, split_dim=1))
    assert same(reader.get_tensor_with_parallelism(k, shard), full[:, 2:4].contiguous())


# -- TP with DP, EP, PP --------------------------------------------------------------------------


def test_dp_tp_layout(writers, reader):
    """2 DP replicas x 2 TP ranks, one writer each; every writer passes the full tensor."""
    replicas = [sample(0, (4, 6)), sample(0, (4, 6)) + 1000]
    k = key("dptp")
    for i, w in enumerate(writers):
        dp, tp = divmod(i, 2)
        spec = par(axis("tp", tp, 2, split_dim=1), axis("dp", dp, 2))  # order given does not matter
        assert w.put_tensor_with_parallelism(k, replicas[dp], spec) == 0
        stored = reader.get(f"{k}__dp_{dp}of2__tp_{tp}of2_sd1")
        s = replicas[dp][:, 3 * tp : 3 * tp + 3].contiguous()
        axes = [(DP, 0, dp, 2, -1, 0, 0), (TP, 1, tp, 2, 1, 0, 3)]
        assert stored == expected_header(0, [4, 3], [4, 6], axes) + raw(s)
    assert reader.get(f"{k}__parallelism_manifest") == manifest(0, [4, 6], 1, 2)
    for dp in range(2):
        tgt = target("full", axis("dp", dp, 2), axis("tp", 1, 2, split_dim=1))
        assert same(reader.get_tensor_with_parallelism(k, tgt), replicas[dp])
        got, _ = read_into(reader, k, tgt, 4 * 6 * 4, registered=True)
        assert same(got, replicas[dp])
        for tp in range(2):
            tgt = target("shard", axis("dp", dp, 2), axis("tp", tp, 2, split_dim=1))
            assert same(
                reader.get_tensor_with_parallelism(k, tgt), replicas[dp][:, 3 * tp : 3 * tp + 3]
            )
        resliced = target("shard", axis("dp", dp, 2), axis("tp", 2, 3, split_dim=1))
        assert same(reader.get_tensor_with_parallelism(k, resliced), replicas[dp][:, 4:])
    wrong_dp = target("full", axis("dp", 0, 3), axis("tp", 0, 2, split_dim=1))
    assert reader.get_tensor_with_parallelism(k, wrong_dp) is None


def test_ep_layout(writers, reader):
    """Each writer stores its experts' weights whole under an EP axis."""
    experts = {e: sample(0, (3, 2)) + 10 * e for e in range(N_WRITERS * 2)}
    k = key("ep")
    for r, w in enumerate(writers):
        for e in (2 * r, 2 * r + 1):
            spec = par(axis("ep", r, N_WRITERS, expert_id=e))
            assert w.put_tensor_with_parallelism(k, experts[e], spec) == 0
    for e, want in experts.items():
        r = e // 2
        stored = reader.get(f"{k}__ep_{r}of{N_WRITERS}_eid{e}")
        assert stored == expected_header(
            0, [3, 2], [3, 2], [(EP, 0, r, N_WRITERS, -1, e, 0)]
        ) + raw(want)
        ep = axis("ep", r, N_WRITERS, expert_id=e)
        assert same(reader.get_tensor_with_parallelism(k, target("shard", ep)), want)
        assert same(reader.get_tensor_with_parallelism(k, target("as_stored", ep)), want)
        assert reader.get_tensor_with_parallelism(k, target("full", ep)) is None  # full needs TP
    assert reader.is_exist(f"{k}__parallelism_manifest") == 0  # none without TP
    wrong = axis("ep", 1, N_WRITERS, expert_id=0)  # expert 0 lives on rank 0
    assert reader.get_tensor_with_parallelism(k, target("shard", wrong)) is None


def test_ep_tp_layout(writers, reader):
    """One expert, TP-split over 4 writers that all pass the expert's full weight."""
    w_full = sample(1, (8, 4))
    k = key("eptp")
    for r, w in enumerate(writers):
        spec = par(axis("ep", 1, 2, expert_id=5), axis("tp", r, N_WRITERS, split_dim=0))
        assert w.put_tensor_with_parallelism(k, w_full, spec) == 0
    assert reader.is_exist(f"{k}__tp_3of4_sd0__ep_1of2_eid5") == 1
    tgt = target("full", axis("tp", 0, 4, split_dim=0), axis("ep", 1, 2, expert_id=5))
    assert same(reader.get_tensor_with_parallelism(k, tgt), w_full)
    shard = target("shard", axis("tp", 3, 4, split_dim=0), axis("ep", 1, 2, expert_id=5))
    assert same(reader.get_tensor_with_parallelism(k, shard), w_full[6:])
    other_expert = target("full", axis("tp", 0, 4, split_dim=0), axis("ep", 1, 2, expert_id=6))
    assert reader.get_tensor_with_parallelism(k, other_expert) is None


def test_pp_layout(writers, reader):
    stages = [sample(2, (5,)) + s for s in range(N_WRITERS)]
    k = key("pp")
    for s, w in enumerate(writers):
        assert (
            w.put_tensor_with_parallelism(k, stages[s], par(axis("pp", s, N_WRITERS, stage_id=s)))
            == 0
        )
    for s in range(N_WRITERS):
        stored = reader.get(f"{k}__pp_{s}of{N_WRITERS}_sid{s}")
        assert stored[:HEADER] == expected_header(2, [5], [5], [(PP, 0, s, N_WRITERS, -1, s, 0)])
        got, _ = read_into(reader, k, target("shard", axis("pp", s, N_WRITERS, stage_id=s)), 5)
        assert same(got, stages[s])


def test_pp_dp_tp_layout(writers, reader):
    """Three axes: PP stage 1 of 2, DP 2 replicas, TP 2 ranks (one writer per DP x TP)."""
    reps = [sample(0, (2, 8)), sample(0, (2, 8)) * -1]
    k = key("pdt")
    for i, w in enumerate(writers):
        dp, tp = divmod(i, 2)
        spec = par(axis("pp", 1, 2, stage_id=1), axis("tp", tp, 2, split_dim=1), axis("dp", dp, 2))
        assert w.put_tensor_with_parallelism(k, reps[dp], spec) == 0
    assert reader.is_exist(f"{k}__dp_1of2__tp_0of2_sd1__pp_1of2_sid1") == 1
    for dp in range(2):
        tgt = target(
            "full", axis("dp", dp, 2), axis("tp", 0, 2, split_dim=1), axis("pp", 1, 2, stage_id=1)
        )
        assert same(reader.get_tensor_with_parallelism(k, tgt), reps[dp])
        shard = target(
            "shard", axis("dp", dp, 2), axis("tp", 1, 4, split_dim=1), axis("pp", 1, 2, stage_id=1)
        )
        assert same(reader.get_tensor_with_parallelism(k, shard), reps[dp][:, 2:4])


def test_dp_only_layout(writers, reader):
    t = sample(0, (2, 2))
    k = key("dp")
    assert writers[1].put_tensor_with_parallelism(k, t, par(axis("dp", 1, 2))) == 0
    assert reader.get(f"{k}__dp_1of2")[:HEADER] == expected_header(
        0, [2, 2], [2, 2], [(DP, 0, 1, 2, -1, 0, 0)]
    )
    assert same(reader.get_tensor_with_parallelism(k, target("shard", axis("dp", 1, 2))), t)
    assert reader.get_tensor_with_parallelism(k, target("shard", axis("dp", 0, 2))) is None


# -- writer partitions ---------------------------------------------------------------------------


@pytest.mark.parametrize("split_dim", [0, 1])
def test_writer_partitions(writers, reader, split_dim):
    full = sample(0, (8, 8))
    k = key("wp")
    for r, w in enumerate(writers):  # each writer passes the full tensor
        assert (
            w.put_tensor_with_parallelism(
                k, full, None, None, WriterPartition(r, N_WRITERS, split_dim)
            )
            == 0
        )
    for r in range(N_WRITERS):
        s = full.chunk(N_WRITERS, dim=split_dim)[r].contiguous()
        layout = (TP, 0, r, N_WRITERS, split_dim, 0, 2)
        want = expected_header(0, list(s.shape), [8, 8], [layout]) + raw(s)
        assert reader.get(f"{k}__writer_{r}of{N_WRITERS}_sd{split_dim}") == want
        # a single-TP shard read accepts the writer's shard
        tp = axis("tp", r, N_WRITERS, split_dim=split_dim)
        assert same(reader.get_tensor_with_parallelism(k, target("shard", tp)), s)
    assert reader.get(f"{k}__writer_manifest") == manifest(0, [8, 8], split_dim, N_WRITERS)
    assert same(reader.get_tensor_with_parallelism(k, target("full")), full)  # no parallelism
    got, buf = read_into(reader, k, target("full"), 8 * 8 * 4, registered=True)
    assert same(got, full) and buf[:HEADER].tobytes() == expected_header(0, [8, 8])
    assert reader.remove(f"{k}__writer_2of{N_WRITERS}_sd{split_dim}", force=True) == 0
    assert reader.get_tensor_with_parallelism(k, target("full")) is None  # not the plain key


# -- _from forms ----------------------------------------------------------------------------


def test_from_forms(writers, reader):
    full = sample(12, (4, 6))
    obj = tensor_object(full)
    p, n = ptr(obj), obj.nbytes
    w = writers[0]
    k = key("pf")  # no request: stored as it is
    assert w.put_tensor_with_parallelism_from(k, p, n) == 0
    assert reader.get(k) == obj.tobytes()
    k = key("pf")  # single TP: all shards from the full buffer, no manifest
    assert w.put_tensor_with_parallelism_from(k, p, n, par(axis("tp", 1, 3, split_dim=1))) == 0
    for r in range(3):
        assert same(reader.get_tensor(f"{k}_tp_{r}"), full[:, 2 * r : 2 * r + 2])
    assert reader.is_exist(f"{k}__parallelism_manifest") == 0
    assert same(
        reader.get_tensor_with_parallelism(k, target("full", axis("tp", 0, 3, split_dim=1))), full
    )
    k = key("pf")  # multi-axis TP: all TP shards of this DP rank
    spec = par(axis("dp", 1, 2), axis("tp", 0, 2, split_dim=0))
    assert w.put_tensor_with_parallelism_from(k, p, n, spec) == 0
    assert (
        reader.is_exist(f"{k}__dp_1of2__tp_0of2_sd0") == 1
        and reader.is_exist(f"{k}__dp_1of2__tp_1of2_sd0") == 1
    )
    tgt = target("full", axis("dp", 1, 2), axis("tp", 1, 2, split_dim=0))
    assert same(reader.get_tensor_with_parallelism(k, tgt), full)
    k = key("pf")  # writer partition: one shard and the manifest
    assert w.put_tensor_with_parallelism_from(k, p, n, None, None, WriterPartition(1, 2, 1)) == 0
    assert same(reader.get_tensor(f"{k}__writer_1of2_sd1"), full[:, 3:])
    assert reader.is_exist(f"{k}__writer_0of2_sd1") == 0
    assert reader.get(f"{k}__writer_manifest") == manifest(12, [4, 6], 1, 2)
    k = key("pf")  # no TP: under the axes' key
    assert w.put_tensor_with_parallelism_from(k, p, n, par(axis("pp", 0, 2, stage_id=3))) == 0
    assert same(
        reader.get_tensor_with_parallelism(k, target("shard", axis("pp", 0, 2, stage_id=3))), full
    )
    # invalid buffers, uneven split
    assert w.put_tensor_with_parallelism_from(key("pf"), p, n - 2) == INVALID
    assert (
        w.put_tensor_with_parallelism_from(key("pf"), p, n, par(axis("tp", 0, 5, split_dim=1)))
        == INVALID
    )


def test_upsert_forms_overwrite(writers, reader):
    a, b = sample(0, (4, 2)), sample(0, (4, 2)) + 50
    k = key("upar")
    spec = par(axis("dp", 0, 2), axis("tp", 0, 2, split_dim=0))
    tgt = target("full", axis("dp", 0, 2), axis("tp", 0, 2, split_dim=0))
    w = writers[0]
    assert (
        w.put_tensor_with_parallelism_from(k, ptr(tensor_object(a)), tensor_object(a).nbytes, spec)
        == 0
    )
    ob = tensor_object(b)
    assert w.put_tensor_with_parallelism_from(k, ptr(ob), ob.nbytes, spec) == 0  # put keeps a
    assert same(reader.get_tensor_with_parallelism(k, tgt), a)
    assert w.upsert_tensor_with_parallelism_from(k, ptr(ob), ob.nbytes, spec) == 0
    assert same(reader.get_tensor_with_parallelism(k, tgt), b)
    for r in range(2):
        spec_r = par(axis("dp", 0, 2), axis("tp", r, 2, split_dim=0))
        assert w.upsert_tensor_with_parallelism(k, a, spec_r) == 0
    assert same(reader.get_tensor_with_parallelism(k, tgt), a)
    ks = [k, key("upar")]
    assert w.batch_upsert_tensor_with_parallelism_from(
        ks, [ptr(ob)] * 2, [ob.nbytes] * 2, [spec, spec]
    ) == [0, 0]
    assert same(reader.get_tensor_with_parallelism(k, tgt), b)
    assert w.batch_upsert_tensor_with_parallelism(
        ks, [a, a], None, None, [WriterPartition(0, 1, 0)] * 2
    ) == [0, 0]
    assert same(reader.get_tensor_with_parallelism(ks[1], target("full")), a)


# -- batch forms ----------------------------------------------------------------------------------


def test_batch_forms(writers, reader):
    w = writers[0]
    ts = [sample(0, (4, 4)), sample(1, (2, 4))]
    ks = [key("bp"), key("bp")]
    specs = [
        par(axis("tp", 0, 2, split_dim=0), axis("dp", 0, 1)),
        par(axis("ep", 0, 1, expert_id=3)),
    ]
    assert w.batch_put_tensor_with_parallelism(ks, ts, specs) == [0, 0]
    tgts = [
        target("full", axis("tp", 0, 2, split_dim=0), axis("dp", 0, 1)),
        target("shard", axis("ep", 0, 1, expert_id=3)),
    ]
    got = reader.batch_get_tensor_with_parallelism(ks, tgts)
    # only rank 0's shard of key 0 was written: its full read fails, its shard reads
    assert got[0] is None and same(got[1], ts[1])
    shard0 = target("shard", axis("tp", 0, 2, split_dim=0), axis("dp", 0, 1))
    assert same(reader.batch_get_tensor_with_parallelism(ks[:1], [shard0])[0], ts[0][:2])
    # None: plain batch put and get
    ks2 = [key("bp"), key("bp")]
    assert w.batch_put_tensor_with_parallelism(ks2, ts) == [0, 0]
    assert all(
        same(g, t) for g, t in zip(reader.batch_get_tensor_with_parallelism(ks2), ts, strict=True)
    )
    # lengths
    assert w.batch_put_tensor_with_parallelism(ks2, ts[:1]) == [INVALID, INVALID]
    assert w.batch_put_tensor_with_parallelism(ks2, ts, specs[:1]) == [INVALID, INVALID]
    assert (
        w.batch_put_tensor_with_parallelism(ks2, ts, None, None, [WriterPartition(0, 1, 0)])
        == [INVALID] * 2
    )
    assert reader.batch_get_tensor_with_parallelism(ks2, tgts[:1]) == [None, None]
    cfg = ReplicateConfig()
    cfg.group_ids = ["one"]
    assert (
        w.batch_put_tensor_with_parallelism([key("g"), key("g")], ts, specs, cfg) == [INVALID] * 2
    )
    cfg.group_ids = ["ga", "gb"]  # each key's shards and manifest go to its group
    assert w.batch_put_tensor_with_parallelism([key("g"), key("g")], ts, specs, cfg) == [0, 0]
    # _from batch
    objs = [tensor_object(t) for t in ts]
    ks3 = [key("bpf"), key("bpf")]
    tp_specs = [par(axis("tp", 0, 2, split_dim=0))] * 2
    assert w.batch_put_tensor_with_parallelism_from(
        ks3, [ptr(o) for o in objs], [o.nbytes for o in objs], tp_specs
    ) == [0, 0]
    tgt = target("full", axis("tp", 0, 2, split_dim=0))
    bufs = [np.zeros(HEADER + t.numel() * t.element_size(), dtype=np.uint8) for t in ts]
    got = reader.batch_get_tensor_with_parallelism_into(
        ks3, [ptr(b) for b in bufs], [b.nbytes for b in bufs], [tgt, tgt]
    )
    assert same(got[0], ts[0]) and same(got[1], ts[1])
    assert got[1].data_ptr() == ptr(bufs[1]) + HEADER
    assert reader.batch_get_tensor_with_parallelism_into(ks3, [ptr(bufs[0])], [1], [tgt, tgt]) == [
        None,
        None,
    ]
    plain = reader.batch_get_tensor_with_parallelism_into(
        ks2, [ptr(b) for b in bufs], [b.nbytes for b in bufs]
    )
    assert same(plain[0], ts[0]) and same(plain[1], ts[1])
