"""`mooncake.store.EngramStore` / `EngramStoreConfig` (spec store_ext.md §11).

One real `mooncake_master` per module and one client contributing 64 MiB.
Tables are random float32 arrays; what the store holds is compared byte for
byte with the NumPy arrays, and lookups with NumPy fancy indexing of them.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import uuid

import numpy as np
import pytest

from mooncake.store import EngramStore, EngramStoreConfig, MooncakeDistributedStore

NOT_FOUND = -704
SIZES = [17, 19, 23, 29]
DIM = 8
OK_SIZES = [4]  # the valid table_vocab_sizes of the embedding_dim cases below
_layers = itertools.count(uuid.uuid4().int & 0xFFFFFF)


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
    """A fresh layer id; its keys are removed after the test."""
    made: list[EngramStore] = []

    def make(sizes=SIZES, dim=DIM) -> EngramStore:
        es = EngramStore(next(_layers), EngramStoreConfig(sizes, dim), store)
        made.append(es)
        return es

    yield make
    for es in made:
        store.batch_remove(es.get_store_keys(), True)


def tables_for(es: EngramStore, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((n, es.get_embedding_dim())).astype(np.float32)
        for n in es.get_table_vocab_sizes()
    ]


def reference(tables: list[np.ndarray], ids: np.ndarray) -> np.ndarray:
    """[B, L, H, D]: row ids[b, l, h] of tables[h]."""
    return np.stack([tables[h][ids[:, :, h]] for h in range(len(tables))], axis=2)


# -- config ---------------------------------------------------------------------


def test_config_fields_constructor_and_assignment():
    cfg = EngramStoreConfig([3, 5], 4)
    assert cfg.table_vocab_sizes == [3, 5] and cfg.embedding_dim == 4
    # upstream's form: an empty config whose fields are assigned
    cfg = EngramStoreConfig()
    assert cfg.table_vocab_sizes == [] and cfg.embedding_dim == 0
    cfg.table_vocab_sizes = (np.int64(7), 9)
    cfg.embedding_dim = np.int32(16)
    assert cfg.table_vocab_sizes == [7, 9] and cfg.embedding_dim == 16
    assert all(type(v) is int for v in cfg.table_vocab_sizes)
    cfg.table_vocab_sizes.append(11)  # a copy
    assert cfg.table_vocab_sizes == [7, 9]


@pytest.mark.parametrize(
    "sizes, dim, exc",
    [
        ([], 8, ValueError),
        ([4, 0], 8, ValueError),
        ([-1], 8, ValueError),
        ([4.0], 8, TypeError),
        ([True], 8, TypeError),
        ("17", 8, TypeError),
        (17, 8, TypeError),
        (OK_SIZES, 0, ValueError),
        (OK_SIZES, -3, ValueError),
        (OK_SIZES, 2.5, TypeError),
        (OK_SIZES, "8", TypeError),
        (OK_SIZES, False, TypeError),
    ],
)
def test_config_rejects_invalid_values(sizes, dim, exc):
    with pytest.raises(exc):
        EngramStoreConfig(sizes, dim)
    cfg = EngramStoreConfig([2], 2)
    field, value = ("embedding_dim", dim) if sizes is OK_SIZES else ("table_vocab_sizes", sizes)
    with pytest.raises(exc):
        setattr(cfg, field, value)
    assert cfg.table_vocab_sizes == [2] and cfg.embedding_dim == 2  # left as it was


def test_engram_store_rejects_bad_arguments(store):
    good = EngramStoreConfig([4], 2)
    with pytest.raises(ValueError, match="table_vocab_sizes"):
        EngramStore(1, EngramStoreConfig())
    unset_dim = EngramStoreConfig()
    unset_dim.table_vocab_sizes = [4]
    with pytest.raises(ValueError, match="embedding_dim"):
        EngramStore(1, unset_dim)
    with pytest.raises(TypeError):
        EngramStore(1, {"table_vocab_sizes": [4], "embedding_dim": 2})
    with pytest.raises(ValueError):
        EngramStore(-1, good)
    with pytest.raises(TypeError):
        EngramStore("1", good)
    with pytest.raises(TypeError):
        EngramStore(True, good)
    with pytest.raises(TypeError, match="MooncakeDistributedStore"):
        EngramStore(1, good, store=object())


# -- metadata ---------------------------------------------------------------------


def test_metadata_only_getters_work_and_data_calls_raise(store_master):
    cfg = EngramStoreConfig(SIZES, DIM)
    es = EngramStore(layer_id=42, config=cfg)
    cfg.table_vocab_sizes = [1]  # the store took a copy
    cfg.embedding_dim = 1
    assert es.get_table_vocab_sizes() == SIZES
    assert es.get_num_heads() == len(SIZES)
    assert es.get_embedding_dim() == DIM
    assert es.get_store_keys() == [f"engram:l42:h{h}" for h in range(len(SIZES))]
    tables = [np.zeros((n, DIM), np.float32) for n in SIZES]
    for call in (
        lambda: es.populate(tables),
        lambda: es.lookup([[[0, 0, 0, 0]]]),
        lambda: es.remove_from_store(force=True),
    ):
        with pytest.raises(RuntimeError, match="store=None"):
            call()
    assert not [k for k in store_master.keys() if k.startswith("engram:l42:")]


def test_exported_by_store_module_without_import_cycle():
    import mooncake._engram as engram
    import mooncake.store as store_module

    assert store_module.EngramStore is engram.EngramStore
    assert store_module.EngramStoreConfig is engram.EngramStoreConfig
    # the module loads on its own and does not pull mooncake.store in
    code = (
        "import sys, mooncake._engram as e; "
        "assert 'mooncake.store' not in sys.modules, sorted(sys.modules); "
        "e.EngramStore(0, e.EngramStoreConfig([2], 2)); "
        "assert 'mooncake.store' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- populate -------------------------------------------------------------------


def test_populate_stores_row_major_float32_tables(store, layer):
    es = layer()
    tables = tables_for(es)
    assert es.populate(tables) is None
    for key, table in zip(es.get_store_keys(), tables, strict=True):
        assert store.get_size(key) == table.nbytes
        assert store.get(key) == table.tobytes()


def test_populate_noncontiguous_tables_are_stored_row_major(store, layer):
    es = layer(sizes=[6, 5], dim=3)
    ref = tables_for(es, seed=3)
    fortran = np.asfortranarray(ref[0])
    strided = np.repeat(ref[1], 2, axis=1)[:, ::2]  # a view with column stride 8 bytes
    assert not fortran.flags.c_contiguous and not strided.flags.c_contiguous
    es.populate([fortran, strided])
    for key, table in zip(es.get_store_keys(), ref, strict=True):
        assert store.get(key) == table.tobytes()


def test_populate_is_create_only(store, layer):
    es = layer()
    first = tables_for(es, seed=1)
    es.populate(first)
    with pytest.raises(RuntimeError, match="already exist"):
        es.populate(tables_for(es, seed=2))
    for key, table in zip(es.get_store_keys(), first, strict=True):
        assert store.get(key) == table.tobytes()


def test_populate_with_one_head_present_writes_nothing(store, layer):
    es = layer()
    keys = es.get_store_keys()
    assert store.put(keys[2], b"someone else's") == 0
    with pytest.raises(RuntimeError, match=keys[2]):
        es.populate(tables_for(es))
    assert [store.is_exist(k) for k in keys] == [0, 0, 1, 0]
    assert store.get(keys[2]) == b"someone else's"


def test_populate_argument_errors_write_nothing(store, layer):
    es = layer()
    good = tables_for(es)
    cases = [
        (good[:-1], ValueError),
        (good + [good[0]], ValueError),
        ([good[0][:-1]] + good[1:], ValueError),
        ([good[0].reshape(-1)] + good[1:], ValueError),
        ([good[0].astype(np.float64)] + good[1:], TypeError),
        ([good[0].astype(">f4")] + good[1:], TypeError),
        ([good[0].tolist()] + good[1:], TypeError),
        (np.stack([good[0], good[0]]), TypeError),
        ({"h0": good[0]}, TypeError),
    ]
    for tables, exc in cases:
        with pytest.raises(exc):
            es.populate(tables)
        assert [store.is_exist(k) for k in es.get_store_keys()] == [0] * len(SIZES)
    es.populate(tuple(good))  # a tuple is accepted
    assert store.get(es.get_store_keys()[0]) == good[0].tobytes()


def test_populate_releases_its_registrations_and_keeps_the_callers(store, layer):
    es = layer()
    tables = tables_for(es)
    # the caller registered head 0's table itself: populate must still write
    # it and must leave that registration in place
    assert store.register_buffer(tables[0].ctypes.data, tables[0].nbytes) == 0
    es.populate(tables)
    assert store.unregister_buffer(tables[0].ctypes.data) == 0
    # the others were registered by populate and are released again
    for t in tables[1:]:
        assert store.unregister_buffer(t.ctypes.data) != 0
        assert store.register_buffer(t.ctypes.data, t.nbytes) == 0
        assert store.unregister_buffer(t.ctypes.data) == 0
    for key, table in zip(es.get_store_keys(), tables, strict=True):
        assert store.get(key) == table.tobytes()


def test_populate_partial_failure_removes_written_heads(store, layer):
    # head 1 (96 MiB) cannot fit the 64 MiB pool, head 0 fits
    es = layer(sizes=[16, 96 << 9], dim=512)
    tables = [np.ones((n, 512), np.float32) for n in es.get_table_vocab_sizes()]
    with pytest.raises(RuntimeError, match=r"h1 \(-") as info:
        es.populate(tables)
    assert "written heads were removed" in str(info.value)
    assert [store.is_exist(k) for k in es.get_store_keys()] == [0, 0]


# -- lookup ---------------------------------------------------------------------


def test_lookup_matches_numpy_reference(store, layer):
    es = layer()
    tables = tables_for(es, seed=5)
    es.populate(tables)
    rng = np.random.default_rng(9)
    ids = np.stack([rng.integers(0, n, size=(3, 7)) for n in SIZES], axis=2).astype(np.int64)
    ids[0, 0] = 0  # first and last row of every head
    ids[0, 1] = [n - 1 for n in SIZES]
    out = es.lookup(ids)
    assert out.dtype == np.float32 and out.shape == (3, 7, len(SIZES), DIM)
    assert out.flags.c_contiguous
    assert out.tobytes() == reference(tables, ids).tobytes()
    # nested lists, other integer dtypes and non-contiguous arrays: the same rows
    assert es.lookup(ids.tolist()).tobytes() == out.tobytes()
    assert es.lookup(ids.astype(np.int32)).tobytes() == out.tobytes()
    assert es.lookup(ids.astype(np.uint16)).tobytes() == out.tobytes()
    transposed = np.ascontiguousarray(ids.transpose(1, 0, 2)).transpose(1, 0, 2)
    assert not transposed.flags.c_contiguous
    assert es.lookup(transposed).tobytes() == out.tobytes()


def test_lookup_single_row_and_repeated_ids(store, layer):
    es = layer(sizes=[3], dim=5)
    tables = tables_for(es, seed=11)
    es.populate(tables)
    np.testing.assert_array_equal(es.lookup([[[2]]])[0, 0, 0], tables[0][2])
    ids = np.full((2, 4, 1), 1, dtype=np.int64)
    assert es.lookup(ids).tobytes() == np.broadcast_to(tables[0][1], (2, 4, 1, 5)).tobytes()


@pytest.mark.parametrize(
    "ids, exc",
    [
        ([[[-1, 0, 0, 0]]], IndexError),
        ([[[17, 0, 0, 0]]], IndexError),  # N_0 = 17
        ([[[0, 0, 0, 29]]], IndexError),  # N_3 = 29
        ([[[16, 18, 22, 28]], [[0, 19, 0, 0]]], IndexError),  # N_1 = 19, in the 2nd batch
        (np.array([[[0, 0, 0, 1 << 40]]]), IndexError),
        (np.array([[[0, 0, 0, (1 << 64) - 1]]], dtype=np.uint64), IndexError),
        ([], ValueError),
        ([[[]]], ValueError),
        (np.zeros((0, 3, 4), np.int64), ValueError),
        (np.zeros((1, 1, 3), np.int64), ValueError),  # one head short
        (np.zeros((1, 1, 5), np.int64), ValueError),
        ([[0, 1, 2, 3]], ValueError),  # 2-D
        ([[[0, 1, 2, 3]], [[0, 1, 2]]], ValueError),  # ragged
        ([[[0.0, 1.0, 2.0, 3.0]]], TypeError),
        ([[[True, False, True, False]]], TypeError),
        ([[[0, 1, 2, 1 << 70]]], TypeError),
        ([[["0", "1", "2", "3"]]], TypeError),
    ],
)
def test_lookup_rejects_bad_row_ids(store, layer, ids, exc):
    es = layer()
    es.populate(tables_for(es))
    with pytest.raises(exc):
        es.lookup(ids)


def test_lookup_of_unpopulated_layer_raises(layer):
    es = layer()
    with pytest.raises(RuntimeError, match=str(NOT_FOUND)):
        es.lookup([[[0, 1, 2, 3]]])


def test_lookup_after_one_head_removed_raises(store, layer):
    es = layer()
    es.populate(tables_for(es))
    assert store.remove(es.get_store_keys()[1], True) == 0
    with pytest.raises(RuntimeError, match=rf"h1 \({NOT_FOUND}\)"):
        es.lookup([[[0, 1, 2, 3]]])


# -- remove ---------------------------------------------------------------------


def test_remove_from_store_counts_removed_heads(store, layer):
    es = layer()
    es.populate(tables_for(es))
    keys = es.get_store_keys()
    assert store.remove(keys[0], True) == 0
    assert es.remove_from_store(force=True) == len(SIZES) - 1
    assert [store.is_exist(k) for k in keys] == [0] * len(SIZES)
    assert es.remove_from_store(force=True) == 0
    # the layer can be populated again afterwards
    tables = tables_for(es, seed=4)
    es.populate(tables)
    assert store.get(keys[3]) == tables[3].tobytes()
    assert es.remove_from_store(True) == len(SIZES)


def test_remove_from_store_leaves_other_layers(store, layer):
    a, b = layer(), layer()
    tb = tables_for(b, seed=8)
    a.populate(tables_for(a))
    b.populate(tb)
    assert a.remove_from_store(force=True) == len(SIZES)
    assert [store.get(k) for k in b.get_store_keys()] == [t.tobytes() for t in tb]
