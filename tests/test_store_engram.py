"""`mooncake.store.EngramStore` / `EngramStoreConfig` (upstream's multi-layer,
byte-row form: ``EngramStore({layer_id: config}, store=None)``).

One real `mooncake_master` per module and one client contributing 64 MiB.
Tables are random uint8 arrays; what the store holds is compared byte for
byte with the NumPy arrays, and lookups with NumPy fancy indexing of them.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import uuid
import weakref
from contextlib import contextmanager

import numpy as np
import pytest

from mooncake.store import (
    EngramStore,
    EngramStoreConfig,
    MooncakeDistributedStore,
    ReplicateConfig,
)

SIZES = [17, 19, 23, 29]
ROW = 24
_layers = itertools.count(uuid.uuid4().int & 0xFFFFFF)


def config(sizes=SIZES, row_bytes=ROW) -> EngramStoreConfig:
    cfg = EngramStoreConfig()
    cfg.table_vocab_sizes = list(sizes)
    cfg.row_bytes = row_bytes
    return cfg


@pytest.fixture(scope="module")
def store(store_master):
    s = MooncakeDistributedStore()
    rc = s.setup(
        "127.0.0.1", store_master.metadata_url, "64MB", "16MB", "tcp", "", store_master.rpc
    )
    assert rc == 0
    yield s
    assert s.close() == 0


@pytest.fixture
def layer(store):
    """make(sizes, row_bytes) -> (EngramStore, layer id); keys removed after the test."""
    made: list[tuple[EngramStore, int]] = []

    def make(sizes=SIZES, row_bytes=ROW) -> tuple[EngramStore, int]:
        lid = next(_layers)
        es = EngramStore({lid: config(sizes, row_bytes)}, store)
        made.append((es, lid))
        return es, lid

    yield make
    for es, lid in made:
        es.remove_from_store(lid, force=True)


def tables_for(es: EngramStore, lid: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rb = es.get_row_bytes(lid)
    return [
        rng.integers(0, 256, size=(n, rb), dtype=np.uint8) for n in es.get_table_vocab_sizes(lid)
    ]


@contextmanager
def registered(store, shape, row_bytes):
    out = np.empty((*shape, row_bytes), dtype=np.uint8)
    assert store.register_buffer(out.ctypes.data, out.nbytes) == 0
    try:
        yield out
    finally:
        assert store.unregister_buffer(out.ctypes.data) == 0


def expected_rows(tables, ids):
    return np.stack([tables[h][ids[..., h]] for h in range(len(tables))], axis=-2)


# -- configuration and metadata -------------------------------------------------


def test_config_is_assigned_field_by_field():
    cfg = EngramStoreConfig()
    assert cfg.table_vocab_sizes == [] and cfg.row_bytes == 0
    cfg.table_vocab_sizes = [3, 4]
    cfg.row_bytes = 0  # invalid values are checked by EngramStore, not on assignment
    assert "row_bytes=0" in repr(cfg)


@pytest.mark.parametrize(
    "layers",
    [
        {},
        {-1: config()},
        {1: config(row_bytes=0)},
        {1: config(row_bytes=-1)},
        {1: config(sizes=[])},
        {1: config(sizes=[3, 0])},
        {1: config(sizes=[2**63 - 1], row_bytes=264)},  # size overflows 64 bits
        {1: "not a config"},
    ],
)
def test_invalid_layers_raise_value_error(layers):
    with pytest.raises(ValueError):
        EngramStore(layers)


def test_metadata_of_several_layers_without_store():
    cfg = config()
    es = EngramStore({14: config([7, 11], 264), 3: cfg})
    cfg.row_bytes = 1  # later changes to the config do not reach the store object
    assert es.get_layer_ids() == [3, 14]
    assert es.get_num_heads(3) == 4 and es.get_num_heads(14) == 2
    assert es.get_row_bytes(3) == ROW and es.get_row_bytes(14) == 264
    assert es.get_table_vocab_sizes(14) == [7, 11]
    assert es.get_store_keys(14) == ["engram:l14:h0", "engram:l14:h1"]
    for op in (es.get_store_keys, es.get_row_bytes, es.get_num_heads, es.remove_from_store):
        with pytest.raises(ValueError, match="Unknown Engram layer"):
            op(15)
    with pytest.raises(ValueError, match="Unknown Engram layer"):
        es.populate(15, [])
    with pytest.raises(RuntimeError, match="no store"):
        es.populate(3, [np.zeros((n, ROW), np.uint8) for n in SIZES])
    with pytest.raises(RuntimeError, match="no store"):
        es.remove_from_store(3)


def test_exported_by_store_module_without_import_cycle():
    import mooncake._engram as engram
    import mooncake.store as store_module

    assert store_module.EngramStore is engram.EngramStore
    assert store_module.EngramStoreConfig is engram.EngramStoreConfig
    code = (
        "import sys, mooncake._engram as e; "
        "c = e.EngramStoreConfig(); c.table_vocab_sizes = [2]; c.row_bytes = 2; "
        "e.EngramStore({0: c}); "
        "assert 'mooncake.store' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- local tables -----------------------------------------------------------------


def test_bind_local_serves_lookups_and_keeps_tables_alive():
    cfg = config(row_bytes=264)
    es = EngramStore({1: cfg, 14: cfg})
    arrays = [np.arange(n * 264, dtype=np.uint32).astype(np.uint8).reshape(n, 264) for n in SIZES]
    last = np.stack([a[-1].copy() for a in arrays])
    refs = [weakref.ref(a) for a in arrays]
    for a in arrays:
        a.flags.writeable = False  # read-only tables are fine
    es.bind_local(1, arrays)
    del arrays, a
    gc.collect()
    assert all(r() is not None for r in refs)
    ids = (np.array(SIZES, dtype=np.int64) - 1)[None, None]
    out = np.empty((1, 1, len(SIZES), 264), dtype=np.uint8)
    assert es.lookup_into(1, ids, out) is None
    np.testing.assert_array_equal(out[0, 0], last)
    with pytest.raises(RuntimeError, match="no tables"):
        es.lookup_into(14, ids, out)  # not bound, no store
    ids[0, 0, 0] += 1
    with pytest.raises(RuntimeError, match="outside"):
        es.lookup_into(1, ids, out)
    assert not out.any()  # a failed lookup zeroes the output
    del es
    gc.collect()
    assert all(r() is None for r in refs)


def test_bind_local_rejects_tables_it_would_have_to_convert():
    es = EngramStore({1: config()})
    good = [np.zeros((n, ROW), np.uint8) for n in SIZES]
    for bad in (
        good[:-1],
        [good[0].astype(np.float32)] + good[1:],
        [np.zeros((SIZES[0], 2 * ROW), np.uint8)[:, ::2]] + good[1:],
        [good[0][:-1]] + good[1:],
    ):
        with pytest.raises(RuntimeError):
            es.bind_local(1, bad)


# -- populate ---------------------------------------------------------------------


def test_populate_stores_row_major_tables_with_replicate_config(store, store_master, layer):
    es, lid = layer()
    tables = tables_for(es, lid)
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    assert es.populate(lid, tables, cfg) is None
    for key, table in zip(es.get_store_keys(lid), tables, strict=True):
        assert store.get(key) == table.tobytes()
    assert es.remove_from_store(lid, force=True) == len(SIZES)
    assert es.remove_from_store(lid, force=True) == 0
    assert [store.is_exist(k) for k in es.get_store_keys(lid)] == [0] * len(SIZES)


def test_populate_is_create_only(store, layer):
    es, lid = layer()
    first = tables_for(es, lid, seed=1)
    es.populate(lid, first)
    with pytest.raises(RuntimeError, match="already exist"):
        es.populate(lid, tables_for(es, lid, seed=2))
    for key, table in zip(es.get_store_keys(lid), first, strict=True):
        assert store.get(key) == table.tobytes()


def test_populate_does_not_cast_and_writes_nothing_on_bad_tables(store, layer):
    es, lid = layer()
    good = tables_for(es, lid)
    for bad in (
        [t.astype(np.float32) for t in good],
        [np.repeat(t, 2, axis=1)[:, ::2] for t in good],  # strided views
        [good[0][:-1]] + good[1:],
        good[:-1],
    ):
        with pytest.raises(RuntimeError):
            es.populate(lid, bad)
        assert [store.is_exist(k) for k in es.get_store_keys(lid)] == [0] * len(SIZES)


def test_populate_partial_failure_removes_written_heads(store, layer):
    # head 1 (96 MiB) cannot fit the 64 MiB pool, head 0 fits
    es, lid = layer(sizes=[16, 96 << 11], row_bytes=512)
    tables = [np.ones((n, 512), np.uint8) for n in es.get_table_vocab_sizes(lid)]
    with pytest.raises(RuntimeError, match=r"h1 \(-") as info:
        es.populate(lid, tables)
    assert "written heads were removed" in str(info.value)
    assert [store.is_exist(k) for k in es.get_store_keys(lid)] == [0, 0]


# -- lookup_into ------------------------------------------------------------------


def test_lookup_into_matches_numpy_reference(store, layer):
    es, lid = layer()
    tables = tables_for(es, lid, seed=5)
    es.populate(lid, tables)
    rng = np.random.default_rng(9)
    ids = np.stack([rng.integers(0, n, size=(3, 7)) for n in SIZES], axis=2).astype(np.int64)
    ids[0, 0] = [n - 1 for n in SIZES]
    ids[0, 1] = ids[0, 0]  # repeated rows
    with registered(store, ids.shape, ROW) as out:
        for _ in range(2):
            out.fill(99)
            assert es.lookup_into(lid, ids, out) is None
            np.testing.assert_array_equal(out, expected_rows(tables, ids))


def test_lookup_into_errors(store, layer):
    es, lid = layer()
    tables = tables_for(es, lid)
    es.populate(lid, tables)
    ids = np.zeros((1, 2, len(SIZES)), dtype=np.int64)
    with registered(store, ids.shape, ROW) as out:
        for bad_ids in (ids.tolist(), ids.astype(np.int32), ids[..., ::-1]):
            with pytest.raises(TypeError):
                es.lookup_into(lid, bad_ids, out)
        with pytest.raises(RuntimeError):
            es.lookup_into(lid, np.zeros((1, 1, len(SIZES) - 1), np.int64), out)
        es.lookup_into(lid, ids, out)
        for bad_out in (out[..., ::-1], out.astype(np.float32), out[..., :-1]):
            with pytest.raises(RuntimeError):
                es.lookup_into(lid, ids, bad_out)
        with pytest.raises(ValueError, match="Unknown Engram layer"):
            es.lookup_into(lid + 1, ids, out)
        np.testing.assert_array_equal(out, expected_rows(tables, ids))  # untouched
        bad = ids.copy()
        bad[0, 0, 0] = -1
        with pytest.raises(RuntimeError, match="outside"):
            es.lookup_into(lid, bad, out)
        assert not out.any()
        es.lookup_into(lid, ids, out)  # the caller's registration still works
        np.testing.assert_array_equal(out, expected_rows(tables, ids))
        out.setflags(write=False)
        with pytest.raises(RuntimeError, match="read-only"):
            es.lookup_into(lid, ids, out)
        out.setflags(write=True)


def test_lookup_of_unpopulated_layer_raises_and_zeroes(store, layer):
    es, lid = layer()
    ids = np.zeros((1, 1, len(SIZES)), dtype=np.int64)
    with registered(store, ids.shape, ROW) as out:
        out.fill(7)
        with pytest.raises(RuntimeError, match="reading failed"):
            es.lookup_into(lid, ids, out)
        assert not out.any()


def test_empty_batch_is_a_no_op(layer):
    es, lid = layer()  # not populated, output not registered
    ids = np.zeros((1, 0, len(SIZES)), dtype=np.int64)
    assert es.lookup_into(lid, ids, np.empty((1, 0, len(SIZES), ROW), np.uint8)) is None


def test_layers_share_the_backend_and_are_isolated(store):
    first, second = next(_layers), next(_layers)
    configs = {first: config(), second: config([7, 11], 264)}
    es = EngramStore(configs, store)
    try:
        for lid, cfg in configs.items():
            fill = [
                np.full((n, cfg.row_bytes), h + 31 + (lid - first) * 50, np.uint8)
                for h, n in enumerate(cfg.table_vocab_sizes)
            ]
            es.populate(lid, fill)
        peer = EngramStore(configs, store)  # reads the same keys, populates nothing
        for lid, cfg in configs.items():
            assert es.get_store_keys(lid) == peer.get_store_keys(lid)
            ids = np.zeros((1, 2, len(cfg.table_vocab_sizes)), dtype=np.int64)
            with registered(store, ids.shape, cfg.row_bytes) as out:
                for reader in (es, peer):
                    out.fill(0)
                    reader.lookup_into(lid, ids, out)
                    for h in range(ids.shape[-1]):
                        assert np.all(out[..., h, :] == h + 31 + (lid - first) * 50)
        assert es.remove_from_store(first, force=True) == len(SIZES)
        ids = np.zeros((1, 1, 2), dtype=np.int64)
        with registered(store, ids.shape, 264) as out:
            peer.lookup_into(second, ids, out)
            assert np.all(out[..., 0, :] == 81)
    finally:
        for lid in configs:
            es.remove_from_store(lid, force=True)
