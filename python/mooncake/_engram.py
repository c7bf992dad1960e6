"""`EngramStore` and `EngramStoreConfig`: Engram embedding tables in the store.

An Engram layer has H heads; head h owns a float32 table of `N_h` rows of
`D` values, stored row-major as one object under ``engram:l{layer}:h{h}``.
`EngramStore.populate` writes the tables once, `EngramStore.lookup` gathers
rows by id into a ``[B, L, H, D]`` array. It is a thin layer over the
ordinary client API (`batch_is_exist`, `register_buffer`, `batch_put_from`,
`get_into_ranges`, `batch_remove`); nothing new on the master or the wire.
`mooncake.store` re-exports both names, as upstream's store module does.

This module does not import `mooncake.store` (which imports it): a store is
any object with those five methods (a `MooncakeDistributedStore`, or a
wrapper of one).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# NumPy is imported by the calls that use it, not with `mooncake.store`
# (it would be most of that import's time).
_ROW_ITEM = 4  # bytes of a float32
_OBJECT_NOT_FOUND = -704


def _ndarray_type() -> tuple[type, ...]:
    """``(numpy.ndarray,)`` once NumPy is imported, else ``()``: an object
    can only be an ndarray if NumPy has been imported."""
    np_mod = sys.modules.get("numpy")
    return (np_mod.ndarray,) if np_mod is not None else ()


def _positive_int(value: Any, what: str) -> int:
    """`value` as an int > 0; TypeError for a non-integer (bool included),
    ValueError for one <= 0."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None
    if n <= 0:
        raise ValueError(f"{what} must be > 0, got {n}")
    return n


class EngramStoreConfig:
    """Shape of one Engram layer's tables: `table_vocab_sizes` ``[N_0 ...
    N_{H-1}]`` (one table per head, each entry > 0, at least one) and
    `embedding_dim` ``D`` (> 0), the row width in float32 values.

    Both may be given to the constructor or assigned later (upstream builds
    the config empty and assigns the fields). An invalid value raises when it
    is given (TypeError for a non-integer, ValueError otherwise); an empty
    config reads ``[]`` and ``0``, and `EngramStore` refuses it.
    """

    __slots__ = ("_table_vocab_sizes", "_embedding_dim")

    def __init__(
        self, table_vocab_sizes: Sequence[int] | None = None, embedding_dim: int | None = None
    ) -> None:
        self._table_vocab_sizes: tuple[int, ...] = ()
        self._embedding_dim = 0
        if table_vocab_sizes is not None:
            self.table_vocab_sizes = table_vocab_sizes  # type: ignore[assignment]
        if embedding_dim is not None:
            self.embedding_dim = embedding_dim

    @property
    def table_vocab_sizes(self) -> list[int]:
        """Rows per head (a copy: assign the attribute to change it)."""
        return list(self._table_vocab_sizes)

    @table_vocab_sizes.setter
    def table_vocab_sizes(self, value: Sequence[int]) -> None:
        if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, _ndarray_type())):
            raise TypeError(f"table_vocab_sizes must be a list of ints, not {type(value).__name__}")
        sizes = tuple(_positive_int(v, f"table_vocab_sizes[{i}]") for i, v in enumerate(value))
        if not sizes:
            raise ValueError("table_vocab_sizes must name at least one head")
        self._table_vocab_sizes = sizes

    @property
    def embedding_dim(self) -> int:
        """Row width D in float32 values."""
        return self._embedding_dim

    @embedding_dim.setter
    def embedding_dim(self, value: int) -> None:
        self._embedding_dim = _positive_int(value, "embedding_dim")

    def __repr__(self) -> str:
        return (
            f"EngramStoreConfig(table_vocab_sizes={list(self._table_vocab_sizes)}, "
            f"embedding_dim={self._embedding_dim})"
        )


# The client calls an EngramStore makes; a store must have them all.
_STORE_METHODS = (
    "batch_is_exist",
    "register_buffer",
    "unregister_buffer",
    "batch_put_from",
    "get_into_ranges",
    "batch_remove",
)


class EngramStore:
    """One Engram layer's tables in a `MooncakeDistributedStore`.

    ``EngramStore(layer_id, config, store=None)``: `layer_id` is an int >= 0,
    `config` an `EngramStoreConfig` with both fields set (copied: later
    changes to it do not reach this object). With ``store=None`` the object
    is metadata only: the getters work, `populate`, `lookup` and
    `remove_from_store` raise RuntimeError.
    """

    def __init__(self, layer_id: int, config: EngramStoreConfig, store: Any = None) -> None:
        if isinstance(layer_id, bool):
            raise TypeError("layer_id must be an int, not bool")
        try:
            layer = operator.index(layer_id)
        except TypeError:
            raise TypeError(f"layer_id must be an int, not {type(layer_id).__name__}") from None
        if layer < 0:
            raise ValueError(f"layer_id must be >= 0, got {layer}")
        if not isinstance(config, EngramStoreConfig):
            raise TypeError(f"config must be an EngramStoreConfig, not {type(config).__name__}")
        if not config._table_vocab_sizes:
            raise ValueError("config.table_vocab_sizes is not set")
        if config._embedding_dim <= 0:
            raise ValueError("config.embedding_dim is not set")
        if store is not None:
            if not all(callable(getattr(store, m, None)) for m in _STORE_METHODS):
                raise TypeError(
                    f"store must be a MooncakeDistributedStore or None, not {type(store).__name__}"
                )
        self._layer_id = layer
        self._sizes = config._table_vocab_sizes
        self._dim = config._embedding_dim
        self._keys = tuple(f"engram:l{layer}:h{h}" for h in range(len(self._sizes)))
        self._store = store

    # -- metadata ------------------------------------------------------------

    def get_table_vocab_sizes(self) -> list[int]:
        """``[N_0 ... N_{H-1}]``."""
        return list(self._sizes)

    def get_store_keys(self) -> list[str]:
        """The store key of each head's table, ``engram:l{layer_id}:h{head}``."""
        return list(self._keys)

    def get_num_heads(self) -> int:
        """H, the number of tables."""
        return len(self._sizes)

    def get_embedding_dim(self) -> int:
        """D, the row width in float32 values."""
        return self._dim

    def __repr__(self) -> str:
        mode = "metadata only" if self._store is None else "with store"
        return (
            f"EngramStore(layer_id={self._layer_id}, table_vocab_sizes={list(self._sizes)}, "
            f"embedding_dim={self._dim}, {mode})"
        )

    # -- data ----------------------------------------------------------------

    def _client(self, op: str) -> Any:
        if self._store is None:
            raise RuntimeError(f"EngramStore.{op}: no store (created with store=None)")
        return self._store

    def populate(self, embedding_buffers: Sequence[np.ndarray]) -> None:
        """Write every head's table: one float32 ndarray ``[N_h, D]`` per head.

        Create-only: if any head's key already exists nothing is written and
        RuntimeError is raised. The tables are registered for the duration
        of the call (one that cannot be, e.g. memory already registered
        elsewhere, is written from unregistered memory) and written with one
        `batch_put_from`. If some heads fail, the heads that were written
        are removed again and RuntimeError names the failed heads and codes.
        The existence check and the write are two calls: a writer racing
        for the same keys between them is not detected.
        """
        import numpy as np

        store = self._client("populate")
        if not isinstance(embedding_buffers, (list, tuple)):
            raise TypeError(
                "embedding_buffers must be a list of ndarrays, "
                f"not {type(embedding_buffers).__name__}"
            )
        if len(embedding_buffers) != len(self._sizes):
            raise ValueError(
                f"embedding_buffers has {len(embedding_buffers)} tables, "
                f"the layer has {len(self._sizes)} heads"
            )
        tables = []
        for h, (buf, rows) in enumerate(zip(embedding_buffers, self._sizes, strict=True)):
            if not isinstance(buf, np.ndarray):
                raise TypeError(
                    f"embedding_buffers[{h}] must be a NumPy array, not {type(buf).__name__}"
                )
            if buf.dtype != np.float32:
                raise TypeError(f"embedding_buffers[{h}] must be float32, not {buf.dtype}")
            if buf.shape != (rows, self._dim):
                raise ValueError(
                    f"embedding_buffers[{h}] has shape {buf.shape}, "
                    f"head {h} needs ({rows}, {self._dim})"
                )
            tables.append(np.ascontiguousarray(buf))

        keys = list(self._keys)
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

        ptrs = [t.ctypes.data for t in tables]
        sizes = [t.nbytes for t in tables]
        registered = []
        try:
            for p, n in zip(ptrs, sizes, strict=True):
                if store.register_buffer(p, n) == 0:
                    registered.append(p)
            results = store.batch_put_from(keys, ptrs, sizes)
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

    def lookup(self, row_ids: Any) -> np.ndarray:
        """Rows by id: `row_ids` ``[B, L, H]`` (nested lists or an integer
        ndarray, B and L > 0, H the number of heads) gives a float32
        ``[B, L, H, D]`` array whose ``[b, l, h]`` is row ``row_ids[b, l, h]``
        of head h's table, read with one `get_into_ranges`.

        TypeError for non-integer ids, ValueError for another shape,
        IndexError for an id outside ``[0, N_h)``, RuntimeError when a read
        fails (e.g. -704: the layer is not populated).
        """
        import numpy as np

        store = self._client("lookup")
        ids = self._row_ids(row_ids)
        b, l_, h = ids.shape
        d = self._dim
        row_bytes = d * _ROW_ITEM
        out = np.empty((b, l_, h, d), dtype=np.float32)
        positions = np.arange(b * l_, dtype=np.int64) * h
        dst = [((positions + head) * row_bytes).tolist() for head in range(h)]
        src = [(ids[:, :, head].reshape(-1) * row_bytes).tolist() for head in range(h)]
        lengths = [[row_bytes] * (b * l_)] * h
        results = store.get_into_ranges(
            [out.ctypes.data], [list(self._keys)], [dst], [src], [lengths]
        )
        bad = []
        for key, per_row in zip(self._keys, results[0], strict=True):
            wrong = next((r for r in per_row if r != row_bytes), None)
            if wrong is not None:
                bad.append((key, wrong))
        if bad:
            raise RuntimeError(f"EngramStore.lookup: reading failed: {_codes(bad)}")
        return out

    def _row_ids(self, row_ids: Any) -> np.ndarray:
        """`row_ids` checked and as a C-contiguous int64 ``[B, L, H]`` array."""
        import numpy as np

        if isinstance(row_ids, np.ndarray):
            arr = row_ids
        else:
            try:
                arr = np.asarray(row_ids)
            except ValueError as e:  # ragged nesting
                raise ValueError(f"row_ids must be a [B, L, H] nesting of ints: {e}") from None
        if arr.size == 0:
            raise ValueError("row_ids must not be empty")
        if arr.ndim != 3:
            raise ValueError(f"row_ids must have shape [B, L, H], got {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise TypeError(f"row_ids must hold integers, not {arr.dtype}")
        heads = len(self._sizes)
        if arr.shape[2] != heads:
            raise ValueError(
                f"row_ids has {arr.shape[2]} heads in its last dimension, the layer has {heads}"
            )
        for h, rows in enumerate(self._sizes):
            col = arr[:, :, h]
            lo, hi = col.min(), col.max()
            if lo < 0 or hi >= rows:
                bad = lo if lo < 0 else hi
                raise IndexError(f"row id {int(bad)} of head {h} is outside [0, {rows})")
        return np.ascontiguousarray(arr, dtype=np.int64)

    def remove_from_store(self, force: bool = False) -> int:
        """Remove the layer's head tables; the number removed (missing keys
        are skipped). `force` removes leased tables too; without it a
        leased table (-706) or any other failure raises RuntimeError after
        every head was tried."""
        store = self._client("remove_from_store")
        results = store.batch_remove(list(self._keys), bool(force))
        bad = [
            (k, r)
            for k, r in zip(self._keys, results, strict=True)
            if r not in (0, _OBJECT_NOT_FOUND)
        ]
        if bad:
            raise RuntimeError(f"EngramStore.remove_from_store: {_codes(bad)}")
        return sum(1 for r in results if r == 0)


def _codes(pairs: list[tuple[str, int]]) -> str:
    return ", ".join(f"{k} ({r})" for k, r in pairs)
