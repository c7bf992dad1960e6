"""`EngramStore` and `EngramStoreConfig`: Engram embedding tables in the store.

An Engram model has layers; layer ``l`` has H heads and head h owns a table of
`N_h` rows of `row_bytes` bytes, stored row-major as one object under
``engram:l{l}:h{h}``. One `EngramStore` describes several layers
(``EngramStore({layer_id: config, ...}, store=None)``). `populate` writes a
layer's tables once; `lookup_into` gathers rows by id into a caller-owned
``[..., H, row_bytes]`` uint8 array, from the store (one `get_into_ranges`)
or from tables bound in memory with `bind_local`. It is a thin layer over the
ordinary client API (`batch_is_exist`, `register_buffer`, `batch_put_from`,
`get_into_ranges`, `batch_remove`); nothing new on the master or the wire.
`mooncake.store` re-exports both names, as upstream's store module does.

Inputs are never converted: row ids must be a C-contiguous int64 ndarray
(TypeError otherwise), tables and the output C-contiguous uint8 ndarrays of
the exact shape (RuntimeError otherwise). A layer id the object was not
built with raises ValueError ("Unknown Engram layer ...").

This module does not import `mooncake.store` (which imports it): a store is
any object with those methods (a `MooncakeDistributedStore`, or a wrapper of
one).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# NumPy is imported by the calls that use it, not with `mooncake.store`
# (it would be most of that import's time).
_OBJECT_NOT_FOUND = -704
_INT64_MAX = (1 << 63) - 1


class EngramStoreConfig:
    """Shape of one Engram layer's tables: `table_vocab_sizes` ``[N_0 ...
    N_{H-1}]`` (rows of each head's table) and `row_bytes` (bytes of a row).

    Both are plain fields, built empty and assigned, as upstream's; they are
    checked when an `EngramStore` is built from the config (ValueError).
    """

    def __init__(self) -> None:
        self.table_vocab_sizes: list[int] = []
        self.row_bytes: int = 0

    def __repr__(self) -> str:
        return (
            f"EngramStoreConfig(table_vocab_sizes={list(self.table_vocab_sizes)}, "
            f"row_bytes={self.row_bytes})"
        )


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an int, not {type(value).__name__}") from None


class _Layer:
    """One layer's checked shape, its keys and its locally bound tables."""

    def __init__(self, layer_id: Any, config: Any) -> None:
        self.id = _int(layer_id, "Engram layer id")
        if self.id < 0:
            raise ValueError(f"Engram layer id must be >= 0, got {self.id}")
        if not isinstance(config, EngramStoreConfig):
            raise ValueError(
                f"layer {self.id}: config must be an EngramStoreConfig, not {type(config).__name__}"
            )
        self.row_bytes = _int(config.row_bytes, "row_bytes")
        if self.row_bytes <= 0:
            raise ValueError(f"layer {self.id}: row_bytes must be > 0, got {self.row_bytes}")
        sizes = [_int(n, "table_vocab_sizes entry") for n in config.table_vocab_sizes]
        if not sizes:
            raise ValueError(f"layer {self.id}: table_vocab_sizes is empty")
        for n in sizes:
            if n <= 0:
                raise ValueError(f"layer {self.id}: table_vocab_sizes entry {n} is not > 0")
            if n > _INT64_MAX // self.row_bytes:
                raise ValueError(
                    f"layer {self.id}: a table of {n} rows of {self.row_bytes} bytes "
                    "overflows a 64-bit size"
                )
        self.sizes = tuple(sizes)
        self.keys = tuple(f"engram:l{self.id}:h{h}" for h in range(len(sizes)))
        self.local: tuple[np.ndarray, ...] | None = None


# The client calls an EngramStore makes; a store must have them all.
_STORE_METHODS = (
    "batch_is_exist",
    "batch_put_from",
    "get_into_ranges",
    "batch_remove",
    "register_buffer",
    "unregister_buffer",
)


class EngramStore:
    """Engram layers' tables, in a `MooncakeDistributedStore` or in memory.

    ``EngramStore(layers, store=None)``: `layers` maps layer ids (ints >= 0)
    to `EngramStoreConfig`s (copied: later changes do not reach this object);
    an empty mapping, a negative id or an invalid config raise ValueError.
    Without a store, `populate` and `remove_from_store` raise RuntimeError
    and `lookup_into` reads only tables bound with `bind_local`. Two objects
    built with the same layers on the same store read the same keys.
    """

    def __init__(self, layers: Mapping[int, EngramStoreConfig], store: Any = None) -> None:
        if not isinstance(layers, Mapping):
            raise TypeError(
                f"layers must be a dict of layer id to config, not {type(layers).__name__}"
            )
        if not layers:
            raise ValueError("EngramStore needs at least one layer")
        built = [_Layer(lid, cfg) for lid, cfg in layers.items()]
        self._layers = {layer.id: layer for layer in sorted(built, key=lambda x: x.id)}
        if store is not None and not all(callable(getattr(store, m, None)) for m in _STORE_METHODS):
            raise TypeError(
                f"store must be a MooncakeDistributedStore or None, not {type(store).__name__}"
            )
        self._store = store

    def _layer(self, layer_id: Any) -> _Layer:
        layer = self._layers.get(layer_id) if not isinstance(layer_id, bool) else None
        if layer is None:
            raise ValueError(f"Unknown Engram layer {layer_id!r}")
        return layer

    # -- metadata ------------------------------------------------------------

    def get_layer_ids(self) -> list[int]:
        """The layer ids, ascending."""
        return list(self._layers)

    def get_table_vocab_sizes(self, layer_id: int) -> list[int]:
        """``[N_0 ... N_{H-1}]`` of the layer."""
        return list(self._layer(layer_id).sizes)

    def get_store_keys(self, layer_id: int) -> list[str]:
        """The store key of each head's table, ``engram:l{layer_id}:h{head}``."""
        return list(self._layer(layer_id).keys)

    def get_num_heads(self, layer_id: int) -> int:
        """H, the number of the layer's tables."""
        return len(self._layer(layer_id).sizes)

    def get_row_bytes(self, layer_id: int) -> int:
        """Bytes of one row of the layer's tables."""
        return self._layer(layer_id).row_bytes

    def __repr__(self) -> str:
        mode = "metadata only" if self._store is None else "with store"
        return f"EngramStore(layers={self.get_layer_ids()}, {mode})"

    # -- tables --------------------------------------------------------------

    def _tables(self, layer: _Layer, tables: Any, op: str) -> list[np.ndarray]:
        """`tables` checked as one C-contiguous uint8 ``[N_h, row_bytes]`` ndarray per head."""
        import numpy as np

        if not isinstance(tables, (list, tuple)) or len(tables) != len(layer.sizes):
            got = len(tables) if isinstance(tables, (list, tuple)) else type(tables).__name__
            raise RuntimeError(
                f"EngramStore.{op}: layer {layer.id} needs {len(layer.sizes)} tables, got {got}"
            )
        out = []
        for h, (t, rows) in enumerate(zip(tables, layer.sizes, strict=True)):
            if not isinstance(t, np.ndarray):
                raise RuntimeError(f"EngramStore.{op}: table {h} must be a NumPy array")
            if t.dtype != np.uint8 or not t.flags.c_contiguous:
                raise RuntimeError(
                    f"EngramStore.{op}: table {h} must be a C-contiguous uint8 array "
                    f"(got {t.dtype}, contiguous={t.flags.c_contiguous})"
                )
            if t.shape != (rows, layer.row_bytes):
                raise RuntimeError(
                    f"EngramStore.{op}: table {h} has shape {t.shape}, "
                    f"head {h} needs ({rows}, {layer.row_bytes})"
                )
            out.append(t)
        return out

    def bind_local(self, layer_id: int, tables: Sequence[np.ndarray]) -> None:
        """Serve the layer's lookups from these in-memory tables (kept
        referenced, never copied or written; read-only arrays are fine)
        instead of the store."""
        layer = self._layer(layer_id)
        layer.local = tuple(self._tables(layer, tables, "bind_local"))

    def populate(self, layer_id: int, tables: Sequence[np.ndarray], config: Any = None) -> None:
        """Write the layer's tables to the store, one object per head, with
        the `ReplicateConfig` `config` (default placement if None).

        Create-only: if any head's key already exists nothing is written and
        RuntimeError is raised. The tables are registered for the duration
        of the call (one that cannot be is written from unregistered memory).
        If some heads fail, the heads that were written are removed again and
        RuntimeError names the failed heads and codes. The existence check
        and the write are two calls: a writer racing for the same keys
        between them is not detected.
        """
        layer = self._layer(layer_id)
        store = self._client("populate")
        arrays = self._tables(layer, tables, "populate")
        keys = list(layer.keys)
        exist = store.batch_is_exist(keys)
        taken = [k for k, e in zip(keys, exist, strict=True) if e == 1]
        if taken:
            raise RuntimeError(
                f"EngramStore.populate: {', '.join(taken)} already exist "
                "(remove_from_store() first); nothing written"
            )
        failed = [(k, e) for k, e in zip(keys, exist, strict=True) if e not in (0, 1)]
        if failed:
            raise RuntimeError(
                f"EngramStore.populate: existence check failed: {_codes(failed)}; nothing written"
            )
        ptrs = [t.ctypes.data for t in arrays]
        sizes = [t.nbytes for t in arrays]
        registered = []
        try:
            for p, n in zip(ptrs, sizes, strict=True):
                if store.register_buffer(p, n) == 0:
                    registered.append(p)
            results = store.batch_put_from(keys, ptrs, sizes, config)
        finally:
            for p in registered:
                store.unregister_buffer(p)
        bad = [(k, r) for k, r in zip(keys, results, strict=True) if r != 0]
        if not bad:
            return
        written = [k for k, r in zip(keys, results, strict=True) if r == 0]
        message = f"EngramStore.populate: writing failed: {_codes(bad)}"
        if written:
            undone = store.batch_remove(written, True)
            left = [(k, r) for k, r in zip(written, undone, strict=True) if r != 0]
            if left:
                message += f"; removing the written heads failed too: {_codes(left)}"
            else:
                message += f"; the {len(written)} written heads were removed"
        raise RuntimeError(message)

    def _client(self, op: str) -> Any:
        if self._store is None:
            raise RuntimeError(f"EngramStore.{op}: no store (created with store=None)")
        return self._store

    # -- lookups -------------------------------------------------------------

    def lookup_into(self, layer_id: int, row_ids: np.ndarray, output: np.ndarray) -> None:
        """Rows by id into `output`: `row_ids` a C-contiguous int64 ndarray
        ``[..., H]``, `output` a writable C-contiguous uint8 ndarray
        ``[..., H, row_bytes]``; ``output[..., h, :]`` becomes row
        ``row_ids[..., h]`` of head h's table. Reads the bound local tables
        if any, else the store (for RDMA, register `output` with the store
        first). An empty batch does nothing.

        ValueError for an unknown layer (output untouched), TypeError for
        ids of another type, dtype or layout, RuntimeError for an output of
        another shape, dtype or layout, a read-only output, an id outside
        ``[0, N_h)``, no tables (not bound, no store) or a failed read; after
        an id or read failure the output is zeroed.
        """
        import numpy as np

        layer = self._layer(layer_id)
        heads = len(layer.sizes)
        if not isinstance(row_ids, np.ndarray):
            raise TypeError(f"row_ids must be a NumPy int64 array, not {type(row_ids).__name__}")
        if row_ids.dtype != np.int64 or not row_ids.flags.c_contiguous:
            raise TypeError(
                f"row_ids must be a C-contiguous int64 array (got {row_ids.dtype}, "
                f"contiguous={row_ids.flags.c_contiguous})"
            )
        if row_ids.ndim < 1 or row_ids.shape[-1] != heads:
            raise RuntimeError(
                f"row_ids shape {row_ids.shape}: "
                f"the last dimension must be the layer's {heads} heads"
            )
        want = (*row_ids.shape, layer.row_bytes)
        if not isinstance(output, np.ndarray):
            raise RuntimeError(f"output must be a NumPy uint8 array, not {type(output).__name__}")
        if output.dtype != np.uint8 or not output.flags.c_contiguous or output.shape != want:
            raise RuntimeError(
                f"output must be a C-contiguous uint8 array of shape {want} "
                f"(got {output.dtype} {output.shape}, contiguous={output.flags.c_contiguous})"
            )
        if not output.flags.writeable:
            raise RuntimeError("output is read-only")
        if row_ids.size == 0:
            return
        ids = row_ids.reshape(-1, heads)
        for h, rows in enumerate(layer.sizes):
            col = ids[:, h]
            lo, hi = int(col.min()), int(col.max())
            if lo < 0 or hi >= rows:
                output.fill(0)
                bad = lo if lo < 0 else hi
                raise RuntimeError(f"row id {bad} of head {h} is outside [0, {rows})")
        flat = output.reshape(-1, heads, layer.row_bytes)
        if layer.local is not None:
            for h, table in enumerate(layer.local):
                np.take(table, ids[:, h], axis=0, out=flat[:, h, :])
            return
        if self._store is None:
            raise RuntimeError(
                f"EngramStore.lookup_into: layer {layer.id} has no tables "
                "(no store and nothing bound with bind_local)"
            )
        self._read(layer, ids, output)

    def _read(self, layer: _Layer, ids: np.ndarray, output: np.ndarray) -> None:
        """One `get_into_ranges` of every (position, head) row into `output`."""
        import numpy as np

        n, heads = ids.shape
        rb = layer.row_bytes
        positions = np.arange(n, dtype=np.int64) * heads
        dst = [((positions + h) * rb).tolist() for h in range(heads)]
        src = [(ids[:, h] * rb).tolist() for h in range(heads)]
        lengths = [[rb] * n] * heads
        results = self._store.get_into_ranges(
            [output.ctypes.data], [list(layer.keys)], [dst], [src], [lengths]
        )
        bad = []
        for key, per_row in zip(layer.keys, results[0], strict=True):
            wrong = next((r for r in per_row if r != rb), None)
            if wrong is not None:
                bad.append((key, wrong))
        if bad:
            output.fill(0)
            raise RuntimeError(f"EngramStore.lookup_into: reading failed: {_codes(bad)}")

    def remove_from_store(self, layer_id: int, force: bool = False) -> int:
        """Remove the layer's head tables; the number removed (missing keys
        are skipped). `force` removes leased tables too; without it a
        leased table (-706) or any other failure raises RuntimeError after
        every head was tried."""
        layer = self._layer(layer_id)
        store = self._client("remove_from_store")
        results = store.batch_remove(list(layer.keys), bool(force))
        bad = [
            (k, r)
            for k, r in zip(layer.keys, results, strict=True)
            if r not in (0, _OBJECT_NOT_FOUND)
        ]
        if bad:
            raise RuntimeError(f"EngramStore.remove_from_store: {_codes(bad)}")
        return sum(1 for r in results if r == 0)


def _codes(pairs: list[tuple[str, int]]) -> str:
    return ", ".join(f"{k} ({r})" for k, r in pairs)
