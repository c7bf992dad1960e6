"""The tensor calls of `MooncakeDistributedStore` (mixin `_TensorAPI`), as upstream's.

Objects are `mooncake._tensor`'s format: a 304-byte header, then the bytes.
Writes of shards never copy the tensor: each shard is put as the header plus
the byte ranges of the (contiguous) source that make up the shard. Reads
that reassemble or re-slice shards first read the 304-byte headers of the
shards, then every piece straight to its place in the destination with one
batch of ranged reads (`get_into_ranges`), so a full tensor read into a
caller's buffer involves no intermediate copy.

Key names (upstream's): a single TP axis of rank r stores `{key}_tp_{r}`;
any other parallelism stores `{key}` + `__<kind>_<rank>of<size>[_sd<d>]
[_eid<e>][_sid<s>]` per axis in the order DP, TP, EP, PP; writer partitions
store `{key}__writer_{r}of{n}_sd{d}`. Manifests (`_tensor.build_manifest`)
sit at `{key}__parallelism_manifest` and `{key}__writer_manifest`.
"""

from __future__ import annotations

import copy
import ctypes
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from mooncake import _device, _safetensors
from mooncake._buffers import address_of
from mooncake._store_types import _PUT_UPSERT, _PUT_ZERO_COPY, ErrorCode, lazy_logger
from mooncake._tensor import (
    AXIS_DP,
    AXIS_EP,
    AXIS_PP,
    AXIS_TP,
    HEADER_SIZE,
    MAX_AXES,
    build_header,
    build_manifest,
    deserialize_tensor,
    element_size,
    parse_header_at,
    parse_manifest,
    serialize_tensor,
    slab_blocks,
    view_at,
)

_log = lazy_logger("mooncake.store")

_KINDS = {"dp": AXIS_DP, "tp": AXIS_TP, "ep": AXIS_EP, "pp": AXIS_PP}  # also the canonical order
_MODES = ("as_stored", "shard", "full")


# -- parallelism types -------------------------------------------------------------


class ParallelAxis:
    """One parallelism axis. Upstream's constructor takes no arguments; set the fields after.

    kind: "tp", "dp", "ep" or "pp"; rank in [0, size); split_dim (TP only),
    expert_id (EP only), stage_id (PP only). Checked when used: a write with
    an invalid axis returns -600, a read None.
    """

    def __init__(
        self,
        kind: str = "",
        rank: int = 0,
        size: int = 1,
        split_dim: int | None = None,
        expert_id: int | None = None,
        stage_id: int | None = None,
    ) -> None:
        self.kind, self.rank, self.size, self.split_dim = kind, rank, size, split_dim
        self.expert_id, self.stage_id = expert_id, stage_id


class TensorParallelism:
    """The axes (at most 4, each kind once) a tensor is written or read with."""

    def __init__(self, axes: Sequence[Any] | None = None) -> None:
        self.axes = list(axes or [])


class ReadTarget:
    """What a parallel read returns: mode "as_stored" (default), "shard" or "full"."""

    def __init__(self, mode: str = "as_stored", parallelism: TensorParallelism | None = None):
        self.mode = mode
        self.parallelism = parallelism

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        mode = str(value).lower()
        if mode not in _MODES:
            raise RuntimeError(f"Unsupported ReadTarget mode {value!r} (as_stored, shard, full)")
        self._mode = mode


class _Axis(NamedTuple):
    """A validated axis."""

    kind: str
    rank: int
    size: int
    split_dim: int | None = None
    expert_id: int | None = None
    stage_id: int | None = None

    def suffix(self) -> str:
        s = f"{self.kind}_{self.rank}of{self.size}"
        for tag, v in (("sd", self.split_dim), ("eid", self.expert_id), ("sid", self.stage_id)):
            if v is not None:
                s += f"_{tag}{v}"
        return s

    def stored(self) -> tuple[int, int, int, int, int]:
        """(kind, rank, count, split_dim, reserved0) as a header holds them."""
        extra = self.expert_id if self.kind == "ep" else self.stage_id if self.kind == "pp" else 0
        sd = -1 if self.split_dim is None else self.split_dim
        return (_KINDS[self.kind], self.rank, self.size, sd, extra or 0)


def _int_field(obj: Any, name: str) -> int | None:
    v = getattr(obj, name, None)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"ParallelAxis.{name} must be an int, not {v!r}")
    return v


def _axes(parallelism: Any) -> list[_Axis]:
    """Validated axes of a parallelism spec, in canonical order; ValueError if invalid."""
    raw = list(getattr(parallelism, "axes", None) or [])
    if not 1 <= len(raw) <= MAX_AXES:
        raise ValueError(f"a parallelism needs 1 to {MAX_AXES} axes, not {len(raw)}")
    out = []
    for a in raw:
        kind = str(getattr(a, "kind", "")).lower()
        if kind not in _KINDS:
            raise ValueError(f"ParallelAxis kind must be tp, dp, ep or pp, not {kind!r}")
        rank, size = _int_field(a, "rank"), _int_field(a, "size")
        sd, eid, sid = (_int_field(a, n) for n in ("split_dim", "expert_id", "stage_id"))
        if rank is None or size is None or size < 1 or not 0 <= rank < size:
            raise ValueError(f"{kind} axis: rank {rank} outside size {size}")
        if (kind == "tp") != (sd is not None) or (sd is not None and sd < 0):
            raise ValueError(f"{kind} axis: split_dim {sd} (TP needs one >= 0, others none)")
        if (kind == "ep") != (eid is not None) or (kind == "pp") != (sid is not None):
            raise ValueError(f"{kind} axis: expert_id only (and always) for EP, stage_id for PP")
        out.append(_Axis(kind, rank, size, sd, eid if kind == "ep" else None, sid))
    if len({a.kind for a in out}) != len(out):
        raise ValueError("a parallelism names each kind at most once")
    return sorted(out, key=lambda a: list(_KINDS).index(a.kind))


def _writer_axis(partition: Any) -> _Axis:
    """The TP-like axis of a writer partition (rank, size, split_dim); ValueError if invalid."""
    rank, size, sd = (_int_field(partition, n) for n in ("rank", "size", "split_dim"))
    if size is None or rank is None or sd is None or size < 1 or not 0 <= rank < size or sd < 0:
        raise ValueError(f"writer partition rank {rank}, size {size}, split_dim {sd} is invalid")
    return _Axis("tp", rank, size, sd)


def _tp(axes: list[_Axis]) -> _Axis | None:
    return next((a for a in axes if a.kind == "tp"), None)


def _with_tp(axes: list[_Axis], rank: int, size: int) -> list[_Axis]:
    return [a._replace(rank=rank, size=size) if a.kind == "tp" else a for a in axes]


def _shard_key(key: str, axes: list[_Axis]) -> str:
    if len(axes) == 1 and axes[0].kind == "tp":
        return f"{key}_tp_{axes[0].rank}"
    return key + "".join("__" + a.suffix() for a in axes)


def _writer_key(key: str, a: _Axis) -> str:
    return f"{key}__writer_{a.rank}of{a.size}_sd{a.split_dim}"


def _layout(axes: list[_Axis], local_shape: list[int]) -> list[tuple]:
    """LayoutAxis tuples for a header."""
    out = []
    for i, a in enumerate(axes):
        kind, rank, count, sd, extra = a.stored()
        out.append((kind, i, rank, count, sd, extra, local_shape[sd] if sd >= 0 else 0))
    return out


def _axes_match(meta: dict, axes: list[_Axis]) -> bool:
    got = [(k, r, c, sd, r0) for k, _i, r, c, sd, r0, _r1 in meta["axes"]]
    return got == [a.stored() for a in axes]


# -- sources and objects to write ------------------------------------------------


class _Source(NamedTuple):
    """Contiguous tensor bytes at `ptr` (kept alive by `keep`)."""

    ptr: int
    dtype: str
    shape: list[int]
    keep: Any = None
    whole: tuple[int, int] | None = None  # (ptr, size) of a complete tensor object

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * element_size(self.dtype)


def _tensor_source(tensor: Any) -> _Source:
    t, _header = serialize_tensor(tensor)  # TypeError/ValueError for what cannot be stored
    return _Source(t.data_ptr(), str(t.dtype).removeprefix("torch."), list(t.shape), t)


def _buffer_source(buffer_ptr: int, size: int) -> _Source:
    """A tensor object someone placed at `buffer_ptr`; ValueError unless its header is valid."""
    if not isinstance(buffer_ptr, int) or not isinstance(size, int):
        raise ValueError("buffer_ptr and size must be ints")
    if buffer_ptr <= 0 or size < HEADER_SIZE:
        raise ValueError("the buffer cannot hold a tensor object")
    meta = parse_header_at(buffer_ptr, size)
    if meta is None:
        raise ValueError("the buffer does not hold a valid tensor object")
    return _Source(
        buffer_ptr + meta["data_offset"],
        meta["dtype"],
        meta["local_shape"],
        whole=(buffer_ptr, size),
    )


class _Object(NamedTuple):
    """One object to put: its key and the byte ranges it is the concatenation of."""

    key: str
    parts: list[tuple[int, int]]
    keep: Any = None


def _header_object(key: str, header: bytes, ranges: list[tuple[int, int]]) -> _Object:
    addr, size, keep = address_of(header)
    return _Object(key, [(addr, size), *[(p, n) for p, n in ranges if n]], keep)


def _whole_object(key: str, src: _Source) -> _Object:
    """The source stored as a plain (FULL) tensor."""
    if src.whole is not None:
        return _Object(key, [src.whole])
    header = build_header(src.dtype, src.shape, src.nbytes)
    return _header_object(key, header, [(src.ptr, src.nbytes)])


def _check_split(shape: list[int], a: _Axis) -> int:
    """The shard extent of a uniform split along a.split_dim; ValueError if not uniform."""
    d = a.split_dim
    if d is None or not 0 <= d < len(shape):
        raise ValueError(f"split_dim {d} outside a {len(shape)}-d tensor")
    if shape[d] % a.size:
        raise ValueError(f"dimension {d} ({shape[d]}) does not split evenly into {a.size}")
    return shape[d] // a.size


def _cut(key: str, src: _Source, axes: list[_Axis]) -> _Object:
    """The shard of `src` (the full tensor) for `axes`' TP rank, with its SHARD header."""
    a = _tp(axes)
    assert a is not None
    step = _check_split(src.shape, a)
    local = list(src.shape)
    local[a.split_dim] = step
    elem = element_size(src.dtype)
    blocks = slab_blocks(src.shape, elem, a.split_dim, a.rank * step, (a.rank + 1) * step)
    nbytes = math.prod(local) * elem
    header = build_header(src.dtype, local, nbytes, src.shape, _layout(axes, local))
    return _header_object(key, header, [(src.ptr + off, size) for off, _, size in blocks])


def _as_shard(key: str, src: _Source, axes: list[_Axis], global_shape: list[int]) -> _Object:
    """`src` stored whole as a shard with `axes`."""
    header = build_header(
        src.dtype, src.shape, src.nbytes, global_shape, _layout(axes, list(src.shape))
    )
    return _header_object(key, header, [(src.ptr, src.nbytes)])


def _manifest(key: str, dtype: str, shape: list[int], a: _Axis) -> _Object:
    data = build_manifest(dtype, shape, a.split_dim, a.size)
    addr, size, keep = address_of(data)
    return _Object(key, [(addr, size)], keep)


def _all_tp_shards(key: str, src: _Source, axes: list[_Axis]) -> list[_Object]:
    a = _tp(axes)
    assert a is not None
    return [_cut(_shard_key(key, _with_tp(axes, r, a.size)), src, _with_tp(axes, r, a.size))
            for r in range(a.size)]  # fmt: skip


def _parallel_objects(
    key: str, src: _Source, parallelism: Any, writer_partition: Any, from_buffer: bool
) -> list[_Object]:
    """What a unified parallel write stores (spec store_ext.md §6.3); ValueError if invalid."""
    if parallelism is not None and writer_partition is not None:
        raise ValueError("give a parallelism or a writer partition, not both")
    if writer_partition is not None:
        a = _writer_axis(writer_partition)
        return [
            _cut(_writer_key(key, a), src, [a]),
            _manifest(f"{key}__writer_manifest", src.dtype, src.shape, a),
        ]
    if parallelism is None:
        return [_whole_object(key, src)]
    axes = _axes(parallelism)
    tp = _tp(axes)
    if tp is None:
        return [_as_shard(_shard_key(key, axes), src, axes, src.shape)]
    if from_buffer:
        return _all_tp_shards(key, src, axes)
    manifest_key = f"{key}__parallelism_manifest"
    if len(axes) == 1:  # the tensor is this rank's shard
        if not 0 <= tp.split_dim < len(src.shape):
            raise ValueError(f"split_dim {tp.split_dim} outside a {len(src.shape)}-d tensor")
        full = list(src.shape)
        full[tp.split_dim] *= tp.size
        return [
            _as_shard(_shard_key(key, axes), src, axes, full),
            _manifest(manifest_key, src.dtype, full, tp),
        ]
    return [
        _cut(_shard_key(key, axes), src, axes),
        _manifest(manifest_key, src.dtype, src.shape, tp),
    ]


# -- reads ---------------------------------------------------------------------------


class _Gather(NamedTuple):
    """A tensor assembled from pieces of stored objects by ranged reads."""

    header: bytes  # of the result
    meta: dict  # the result's parsed header
    fragments: list[tuple[str, int, int, int]]  # (key, source offset, offset in the data, size)

    @property
    def nbytes(self) -> int:
        return math.prod(self.meta["local_shape"]) * element_size(self.meta["dtype"])


def _target_parts(target: Any) -> tuple[str, Any]:
    """(mode, parallelism) of a ReadTarget or any object with those attributes."""
    if target is None:
        return "as_stored", None
    mode = str(getattr(target, "mode", "as_stored")).lower()
    if mode not in _MODES:
        raise ValueError(f"unsupported read mode {mode!r}")
    return mode, getattr(target, "parallelism", None)


class _TensorAPI:
    """Tensor methods of `MooncakeDistributedStore` (needs its `_put`, `get_into`, ...)."""

    # -- writing -----------------------------------------------------------------

    def _write(self, requests: list[list[_Object] | int], config: Any, upsert: bool) -> list[int]:
        """Put the objects of each request in one call; per request 0 or its first error.

        A request given as an int has already failed with that code.
        `config.group_ids` name one group per request; each request's objects share it.
        """
        objs = [(i, o) for i, r in enumerate(requests) if not isinstance(r, int) for o in r]
        out = [r if isinstance(r, int) else 0 for r in requests]
        if not objs:
            return out
        cfg = config
        if config is not None and config.group_ids is not None:
            gids = list(config.group_ids)
            cfg = copy.copy(config)
            cfg.group_ids = [gids[i] if i < len(gids) else "" for i, _ in objs]
        flags = _PUT_ZERO_COPY | (_PUT_UPSERT if upsert else 0)
        results = self._put([o.key for _, o in objs], [o.parts for _, o in objs], cfg, flags)
        for (i, _), rc in zip(objs, results, strict=True):
            if out[i] == 0 and rc != 0:
                out[i] = rc
        return out

    def _batch_write(
        self, keys, sources, config, upsert: bool, build, extra: Sequence[Any] | None = None
    ) -> list[int]:
        """Per key: build(key, source, extra_i) -> objects; a source thunk may raise ValueError."""
        n = len(keys)
        bad = [int(ErrorCode.INVALID_PARAMS)] * n
        if len(sources) != n or (extra is not None and len(extra) != n):
            return bad
        if config is not None and (
            (config.group_ids is not None and len(config.group_ids) != n)
            or (config.preferred_segments and len(config.preferred_segments) != config.replica_num)
        ):
            return bad
        requests: list[list[_Object] | int] = []
        alive: list[_Source] = []  # contiguous copies the objects point into, until the put
        for i, (key, source) in enumerate(zip(keys, sources, strict=True)):
            try:
                alive.append(source())
                requests.append(build(key, alive[-1], extra[i] if extra is not None else None))
            except (TypeError, ValueError) as e:
                _log.debug("tensor write of %r refused: %s", key, e)
                requests.append(int(ErrorCode.INVALID_PARAMS))
        return self._write(requests, config, upsert)

    @staticmethod
    def _tensor_thunks(tensors: Sequence[Any]) -> list:
        return [lambda t=t: _tensor_source(t) for t in tensors]

    @staticmethod
    def _buffer_thunks(buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list:
        if len(buffer_ptrs) != len(sizes):
            return []
        return [
            lambda p=p, s=s: _buffer_source(p, s) for p, s in zip(buffer_ptrs, sizes, strict=True)
        ]

    def _whole_writes(self, keys, sources, config, upsert: bool) -> list[int]:
        return self._batch_write(
            keys, sources, config, upsert, lambda k, s, _: [_whole_object(k, s)]
        )

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Store a tensor (304-byte header + its bytes); 0 or negative."""
        return self.batch_put_tensor([key], [tensor])[0]

    def upsert_tensor(self, key: str, tensor: Any) -> int:
        """Insert or overwrite a tensor; 0 or negative."""
        return self.batch_upsert_tensor([key], [tensor])[0]

    def pub_tensor(self, key: str, tensor: Any, config: Any = None) -> int:
        """`put_tensor` with a `ReplicateConfig`; 0 or negative."""
        return self.batch_pub_tensor([key], [tensor], config)[0]

    def upsert_pub_tensor(self, key: str, tensor: Any, config: Any = None) -> int:
        """`upsert_tensor` with a `ReplicateConfig`; 0 or negative."""
        return self.batch_upsert_pub_tensor([key], [tensor], config)[0]

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> list[int]:
        """Store several tensors; a code per key (all -600 if the lists differ in length)."""
        return self._whole_writes(keys, self._tensor_thunks(tensors_list), None, False)

    def batch_upsert_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> list[int]:
        """Insert or overwrite several tensors; a code per key."""
        return self._whole_writes(keys, self._tensor_thunks(tensors_list), None, True)

    def batch_pub_tensor(self, keys, tensors_list, config: Any = None) -> list[int]:
        """`batch_put_tensor` with a `ReplicateConfig`."""
        return self._whole_writes(keys, self._tensor_thunks(tensors_list), config, False)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config: Any = None) -> list[int]:
        """`batch_upsert_tensor` with a `ReplicateConfig`."""
        return self._whole_writes(keys, self._tensor_thunks(tensors_list), config, True)

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Store the tensor object (header + data) at `buffer_ptr` as it is; -600 if invalid."""
        return self.batch_put_tensor_from([key], [buffer_ptr], [size])[0]

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        """Insert or overwrite with the tensor object at `buffer_ptr`."""
        return self.batch_upsert_tensor_from([key], [buffer_ptr], [size])[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes) -> list[int]:
        """`put_tensor_from` per key; a code per key."""
        return self._whole_writes(keys, self._buffer_thunks(buffer_ptrs, sizes), None, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes) -> list[int]:
        """`upsert_tensor_from` per key; a code per key."""
        return self._whole_writes(keys, self._buffer_thunks(buffer_ptrs, sizes), None, True)

    # -- TP wrappers (all shards written, keys {key}_tp_{r}) -----------------------------

    def _tp_writes(self, keys, sources, config, tp_size: int, split_dim: int) -> list[int]:
        if tp_size <= 1:
            return self._whole_writes(keys, sources, config, False)
        axes = [_Axis("tp", 0, tp_size, split_dim)]
        return self._batch_write(
            keys, sources, config, False, lambda k, s, _: _all_tp_shards(k, s, axes)
        )

    def put_tensor_with_tp(
        self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        """Store a tensor as `tp_size` shards `{key}_tp_{r}` split along `split_dim`.

        All shards are written whatever `tp_rank` is (upstream behaviour);
        only uniform splits are accepted (-600 otherwise). tp_size <= 1 is
        `put_tensor`. 0 or the first shard's error.
        """
        return self.batch_put_tensor_with_tp([key], [tensor], tp_rank, tp_size, split_dim)[0]

    def pub_tensor_with_tp(
        self,
        key: str,
        tensor: Any,
        config: Any = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> int:
        """`put_tensor_with_tp` with a `ReplicateConfig`."""
        return self.batch_pub_tensor_with_tp([key], [tensor], config, tp_rank, tp_size, split_dim)[
            0
        ]

    def batch_put_tensor_with_tp(
        self, base_keys, tensors_list, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> list[int]:
        """`put_tensor_with_tp` for several tensors; a code per base key."""
        return self._tp_writes(
            base_keys, self._tensor_thunks(tensors_list), None, tp_size, split_dim
        )

    def batch_pub_tensor_with_tp(
        self,
        base_keys,
        tensors_list,
        config: Any = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> list[int]:
        """`batch_put_tensor_with_tp` with a `ReplicateConfig`."""
        return self._tp_writes(
            base_keys, self._tensor_thunks(tensors_list), config, tp_size, split_dim
        )

    def put_tensor_with_tp_from(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> int:
        """`put_tensor_with_tp` of the tensor object at `buffer_ptr` (no copy of the data)."""
        return self.batch_put_tensor_with_tp_from(
            [key], [buffer_ptr], [size], tp_rank, tp_size, split_dim
        )[0]

    def batch_put_tensor_with_tp_from(
        self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> list[int]:
        """`put_tensor_with_tp_from` per base key."""
        sources = self._buffer_thunks(buffer_ptrs, sizes)
        return self._tp_writes(base_keys, sources, None, tp_size, split_dim)

    # -- unified parallel writes ----------------------------------------------------------

    def _parallel_writes(
        self, keys, sources, parallelisms, config, writer_partitions, upsert, from_buffer
    ) -> list[int]:
        n = len(keys)
        bad = [int(ErrorCode.INVALID_PARAMS)] * n
        if parallelisms is not None and writer_partitions is not None:
            return bad
        for lst in (parallelisms, writer_partitions):
            if lst is not None and len(lst) != n:
                return bad
        pairs = [
            (parallelisms[i] if parallelisms is not None else None,
             writer_partitions[i] if writer_partitions is not None else None)
            for i in range(n)
        ]  # fmt: skip
        return self._batch_write(
            keys,
            sources,
            config,
            upsert,
            lambda k, s, pw: _parallel_objects(k, s, pw[0], pw[1], from_buffer),
            pairs,
        )

    def put_tensor_with_parallelism(
        self, key, tensor, parallelism=None, config=None, writer_partition=None
    ) -> int:
        """Write a tensor under a parallelism layout (spec store_ext.md §6.3); 0 or negative.

        None: `pub_tensor`. A writer partition (rank, size, split_dim): `tensor`
        is the full tensor; its shard is stored, plus the writer manifest. A
        single TP axis: `tensor` is this rank's shard. TP with other axes:
        `tensor` is the full tensor and this rank's shard is stored. No TP:
        `tensor` is stored as it is under the axes' key.
        """
        return self.batch_put_tensor_with_parallelism(
            [key], [tensor], _one(parallelism), config, _one(writer_partition)
        )[0]

    def upsert_tensor_with_parallelism(
        self, key, tensor, parallelism=None, config=None, writer_partition=None
    ) -> int:
        """`put_tensor_with_parallelism` that overwrites (shards and manifest)."""
        return self.batch_upsert_tensor_with_parallelism(
            [key], [tensor], _one(parallelism), config, _one(writer_partition)
        )[0]

    def batch_put_tensor_with_parallelism(
        self, keys, tensors_list, parallelisms=None, config=None, writer_partitions=None
    ) -> list[int]:
        """`put_tensor_with_parallelism` per key; lists must match `keys` (else all -600)."""
        sources = self._tensor_thunks(tensors_list)
        return self._parallel_writes(
            keys, sources, parallelisms, config, writer_partitions, False, False
        )

    def batch_upsert_tensor_with_parallelism(
        self, keys, tensors_list, parallelisms=None, config=None, writer_partitions=None
    ) -> list[int]:
        """`upsert_tensor_with_parallelism` per key."""
        sources = self._tensor_thunks(tensors_list)
        return self._parallel_writes(
            keys, sources, parallelisms, config, writer_partitions, True, False
        )

    def put_tensor_with_parallelism_from(
        self, key, buffer_ptr, size, parallelism=None, config=None, writer_partition=None
    ) -> int:
        """Parallel write of the full tensor object at `buffer_ptr` (no copy of the data).

        None: stored as it is. Writer partition: that shard + manifest. Any
        TP axis: all `size` TP shards are written. No TP: stored under the
        axes' key.
        """
        return self.batch_put_tensor_with_parallelism_from(
            [key], [buffer_ptr], [size], _one(parallelism), config, _one(writer_partition)
        )[0]

    def upsert_tensor_with_parallelism_from(
        self, key, buffer_ptr, size, parallelism=None, config=None, writer_partition=None
    ) -> int:
        """`put_tensor_with_parallelism_from` that overwrites."""
        return self.batch_upsert_tensor_with_parallelism_from(
            [key], [buffer_ptr], [size], _one(parallelism), config, _one(writer_partition)
        )[0]

    def batch_put_tensor_with_parallelism_from(
        self, keys, buffer_ptrs, sizes, parallelisms=None, config=None, writer_partitions=None
    ) -> list[int]:
        """`put_tensor_with_parallelism_from` per key."""
        sources = self._buffer_thunks(buffer_ptrs, sizes)
        return self._parallel_writes(
            keys, sources, parallelisms, config, writer_partitions, False, True
        )

    def batch_upsert_tensor_with_parallelism_from(
        self, keys, buffer_ptrs, sizes, parallelisms=None, config=None, writer_partitions=None
    ) -> list[int]:
        """`upsert_tensor_with_parallelism_from` per key."""
        sources = self._buffer_thunks(buffer_ptrs, sizes)
        return self._parallel_writes(
            keys, sources, parallelisms, config, writer_partitions, True, True
        )

    # -- plain reads ----------------------------------------------------------------------

    def get_tensor(self, key: str) -> Any:
        """The tensor stored under `key` (a copy), or None (missing or invalid)."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor(self, keys: Sequence[str]) -> list[Any]:
        """Tensors per key; None for misses and invalid objects."""
        return [t for t, _meta in self._read_whole(keys)]

    def _read_whole(self, keys: Sequence[str]) -> list[tuple[Any, dict | None]]:
        """(tensor copy, parsed header) per key; (None, None) for misses and invalid objects."""
        if not keys:
            return []
        out = []
        for ptr, size in self._get_alloc(keys):
            if size < 0:
                out.append((None, None))
                continue
            try:
                meta = parse_header_at(ptr, size) if size >= HEADER_SIZE else None
                out.append((deserialize_tensor(ptr, size), meta) if meta else (None, None))
            finally:
                self._lib.mc_free(ptr)
        return out

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        """Read `key` into the buffer (header at 0, data at 304); a tensor viewing it, or None.

        None for a null pointer, a miss, a buffer too small for the object,
        or an invalid object.
        """
        if not buffer_ptr:
            return None
        return self.batch_get_tensor_into([key], [buffer_ptr], [size])[0]

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes) -> list[Any]:
        """`get_tensor_into` per key; a list of -600 if the lists differ or a pointer is 0."""
        n = len(keys)
        if not (n == len(buffer_ptrs) == len(sizes)) or any(not p for p in buffer_ptrs):
            return [int(ErrorCode.INVALID_PARAMS)] * n
        return [
            self._view_read(p, r)
            for p, r in zip(buffer_ptrs, self.batch_get_into(keys, buffer_ptrs, sizes), strict=True)
        ]

    @staticmethod
    def _view_read(ptr: int, nread: int, axes: list[_Axis] | None = None) -> Any:
        """The tensor an object read to `ptr` holds, if valid (and with `axes`, if given)."""
        if nread < HEADER_SIZE:
            return None
        meta = parse_header_at(ptr, nread)
        if meta is None or (axes is not None and not _axes_match(meta, axes)):
            return None
        return view_at(ptr + meta["data_offset"], meta)

    def get_tensor_with_tp(
        self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> Any:
        """This rank's shard (`{key}_tp_{tp_rank}`), or `get_tensor(key)` when tp_size <= 1.

        No reassembly; `split_dim` is not used (as upstream).
        """
        return self.batch_get_tensor_with_tp([key], tp_rank, tp_size)[0]

    def batch_get_tensor_with_tp(self, base_keys, tp_rank: int = 0, tp_size: int = 1) -> list[Any]:
        """`get_tensor_with_tp` for several base keys."""
        return self.batch_get_tensor(_tp_keys(base_keys, tp_rank, tp_size))

    def get_tensor_with_tp_into(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> Any:
        """`get_tensor_into` of `{key}_tp_{tp_rank}` (or `key` when tp_size <= 1)."""
        return self.get_tensor_into(_tp_keys([key], tp_rank, tp_size)[0], buffer_ptr, size)

    def batch_get_tensor_with_tp_into(
        self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1
    ) -> list[Any]:
        """`get_tensor_with_tp_into` per base key."""
        return self.batch_get_tensor_into(_tp_keys(base_keys, tp_rank, tp_size), buffer_ptrs, sizes)

    # -- unified parallel reads ------------------------------------------------------------

    def get_tensor_with_parallelism(self, key: str, target: Any = None) -> Any:
        """Read a tensor written under a parallelism layout (spec store_ext.md §6.4).

        No target / "as_stored": the object under `key` (or under the axes'
        key). "full" without parallelism: reassembled writer partitions (or
        `get_tensor(key)` if there are none). "shard": the requested shard,
        re-sliced from the stored shards if they were written with another
        TP size. "full" with a TP axis: all stored TP shards concatenated.
        None on any failure.
        """
        return self._parallel_read(key, target, None)

    def batch_get_tensor_with_parallelism(self, keys, targets=None) -> list[Any]:
        """Per key; targets None is `batch_get_tensor`; lists that differ: all None."""
        if targets is None:
            return self.batch_get_tensor(keys)
        if len(targets) != len(keys):
            return [None] * len(keys)
        return [self._parallel_read(k, t, None) for k, t in zip(keys, targets, strict=True)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None) -> Any:
        """`get_tensor_with_parallelism` into the buffer: header at 0, data at 304.

        Returns a tensor viewing the buffer, or None (also for a buffer too
        small or a null pointer).
        """
        return self._parallel_read(key, target, (buffer_ptr, size))

    def batch_get_tensor_with_parallelism_into(
        self, keys, buffer_ptrs, sizes, targets=None
    ) -> list[Any]:
        """Per key; lists that differ in length: all None."""
        n = len(keys)
        if not (n == len(buffer_ptrs) == len(sizes)) or (targets is not None and len(targets) != n):
            return [None] * n
        targets = targets if targets is not None else [None] * n
        return [
            self._parallel_read(k, t, (p, s))
            for k, t, p, s in zip(keys, targets, buffer_ptrs, sizes, strict=True)
        ]

    def _parallel_read(self, key: str, target: Any, into: tuple[int, int] | None) -> Any:
        if into is not None and (not isinstance(into[0], int) or into[0] <= 0 or into[1] < 0):
            return None
        try:
            mode, parallelism = _target_parts(target)
            axes = _axes(parallelism) if parallelism is not None else None
        except (ValueError, TypeError) as e:
            _log.debug("parallel read of %r refused: %s", key, e)
            return None
        if axes is None:
            if mode == "shard":
                return None
            if mode == "full":
                man = parse_manifest(self.get(f"{key}__writer_manifest"))
                if man is not None:
                    plan = self._writer_plan(key, man)
                    return self._run(plan, into) if plan else None
            return self._read_one(key, into, None)
        tp = _tp(axes)
        if mode == "as_stored":
            return self._read_one(_shard_key(key, axes), into, None)
        if mode == "full":
            plan = self._tp_plan(key, axes, full=True) if tp else None
            return self._run(plan, into) if plan else None
        got = self._read_one(_shard_key(key, axes), into, axes)
        if got is None and tp is not None and len(axes) == 1:
            got = self._read_one(_writer_key(key, tp), into, axes)
        if got is None and tp is not None:
            plan = self._tp_plan(key, axes, full=False)
            got = self._run(plan, into) if plan else None
        return got

    def _read_one(self, key: str, into: tuple[int, int] | None, axes: list[_Axis] | None) -> Any:
        """The whole object under `key` (checked against `axes` when given)."""
        if into is not None:
            return self._view_read(into[0], self.get_into(key, into[0], into[1]), axes)
        tensor, meta = self._read_whole([key])[0]
        if tensor is None or (axes is not None and not _axes_match(meta, axes)):
            return None
        return tensor

    def _headers(self, keys: list[str]) -> list[dict | None]:
        """The parsed headers of several objects, read with one batch of ranged reads."""
        buf = ctypes.create_string_buffer(HEADER_SIZE * len(keys))
        base = ctypes.addressof(buf)
        got = self.get_into_ranges(
            [base],
            [keys],
            [[[i * HEADER_SIZE] for i in range(len(keys))]],
            [[[0] for _ in keys]],
            [[[HEADER_SIZE] for _ in keys]],
        )[0]
        return [
            parse_header_at(base + i * HEADER_SIZE) if r == [HEADER_SIZE] else None
            for i, r in enumerate(got)
        ]

    def _writer_plan(self, key: str, man: dict) -> _Gather | None:
        """Reassembly of the writer partitions that manifest `man` describes."""
        count, d = man["shard_count"], man["split_dim"]
        shards = [_Axis("tp", r, count, d) for r in range(count)]
        keys = [_writer_key(key, a) for a in shards]
        return self._gather(keys, [[a] for a in shards], man, 0, man["global_shape"][d], None)

    def _tp_plan(self, key: str, axes: list[_Axis], full: bool) -> _Gather | None:
        """Reassembly (full) or re-slicing (shard) of the stored TP shards for `axes`."""
        tp = _tp(axes)
        assert tp is not None
        layout = parse_manifest(self.get(f"{key}__parallelism_manifest"))
        if layout is None:
            first = self._headers([_shard_key(key, _with_tp(axes, 0, tp.size))])[0]
            stored_tp = [a for a in (first or {}).get("axes", []) if a[0] == AXIS_TP]
            if not stored_tp:
                return None
            _k, _i, _r, count, d, _r0, _r1 = stored_tp[0]
            layout = {"dtype": first["dtype"], "global_shape": first["global_shape"],
                      "split_dim": d, "shard_count": count}  # fmt: skip
        count, d, shape = layout["shard_count"], layout["split_dim"], layout["global_shape"]
        if tp.split_dim != d or not 0 <= d < len(shape):
            return None
        if shape[d] % tp.size or shape[d] % count:
            return None
        stored = [_with_tp(axes, r, count) for r in range(count)]
        if full:
            return self._gather(
                [_shard_key(key, s) for s in stored], stored, layout, 0, shape[d], None
            )
        step = shape[d] // tp.size
        start = tp.rank * step
        return self._gather(
            [_shard_key(key, s) for s in stored], stored, layout, start, start + step, axes
        )

    def _gather(
        self,
        keys: list[str],
        stored_axes: list[list[_Axis]],
        layout: dict,
        start: int,
        stop: int,
        out_axes: list[_Axis] | None,
    ) -> _Gather | None:
        """Slice [start, stop) along the split dimension of the tensor whose shards are `keys`.

        Every shard's header must match the layout (dtype, global shape, its
        own shape and axes). The result is the full tensor (FULL header) when
        `out_axes` is None, else a shard with those axes.
        """
        dtype, shape, d = layout["dtype"], list(layout["global_shape"]), layout["split_dim"]
        count = len(keys)
        step = shape[d] // count
        local = list(shape)
        local[d] = step
        headers = self._headers(keys)
        for meta, axes in zip(headers, stored_axes, strict=True):
            if (
                meta is None
                or meta["dtype"] != dtype
                or meta["global_shape"] != shape
                or meta["local_shape"] != local
                or not _axes_match(meta, axes)
            ):
                return None
        out_shape = list(shape)
        out_shape[d] = stop - start
        elem = element_size(dtype)
        fragments = []
        for r, (key, meta) in enumerate(zip(keys, headers, strict=True)):
            lo, hi = max(start, r * step), min(stop, (r + 1) * step)
            if lo >= hi:
                continue
            src = slab_blocks(local, elem, d, lo - r * step, hi - r * step)
            dst = slab_blocks(out_shape, elem, d, lo - start, hi - start)
            fragments += [
                (key, meta["data_offset"] + s, t, size)
                for (s, _, size), (t, _, _) in zip(src, dst, strict=True)
            ]
        nbytes = math.prod(out_shape) * elem
        if out_axes is None:
            header = build_header(dtype, out_shape, nbytes)
        else:
            header = build_header(dtype, out_shape, nbytes, shape, _layout(out_axes, out_shape))
        meta = {"dtype": dtype, "local_shape": out_shape}
        return _Gather(header, meta, fragments)

    def _run(self, plan: _Gather, into: tuple[int, int] | None) -> Any:
        """Carry out a gather: into a new tensor, or into the caller's buffer after the header."""
        import torch

        if into is None:
            out = torch.empty(plan.nbytes, dtype=torch.uint8)
            data = out.data_ptr()
        else:
            ptr, size = into
            if size < HEADER_SIZE + plan.nbytes:
                return None
            _device.write(ptr, plan.header)  # the caller's buffer may be on a GPU
            data = ptr + HEADER_SIZE
        if plan.fragments:
            got = self.get_into_ranges(
                [data],
                [[f[0] for f in plan.fragments]],
                [[[f[2]] for f in plan.fragments]],
                [[[f[1]] for f in plan.fragments]],
                [[[f[3]] for f in plan.fragments]],
            )[0]
            if any(r != [f[3]] for r, f in zip(got, plan.fragments, strict=True)):
                return None
        if into is not None:
            return view_at(data, plan.meta)
        dtype = getattr(torch, plan.meta["dtype"])
        if not plan.nbytes:
            return torch.empty(plan.meta["local_shape"], dtype=dtype)
        return out.view(dtype).reshape(plan.meta["local_shape"])

    # -- safetensors --------------------------------------------------------------------

    def save_tensor_to_safetensor(self, key: str, file_name: str | None = None) -> int:
        """Write the tensor under `key` to a safetensors file (`file_name`, default `key`).

        The file holds one tensor named `key`. Without `file_name` the key is
        the file's name in the working directory, so it must be a plain name
        (no ``/``, ``\\``, ``.`` or ``..``; -600 otherwise) and a symlink there
        is not followed. 0; -1100 (FILE_NOT_FOUND) if the store has no tensor
        under `key`; -600 if the file cannot be written.
        """
        tensor = self.get_tensor(key)
        if tensor is None:
            return int(ErrorCode.FILE_NOT_FOUND)
        try:
            if file_name:
                _safetensors.save_file({key: tensor}, file_name)
            else:
                path = _safetensors.file_name_for_key(key)
                _safetensors.save_file({key: tensor}, path, follow_symlinks=False)
        except (OSError, ValueError) as e:
            _log.warning("save_tensor_to_safetensor(%r): %s", key, e)
            return int(ErrorCode.INVALID_PARAMS)
        return 0

    def load_tensor_from_safetensor(
        self, key: str | None = None, file_name: str | None = None
    ) -> Any:
        """Put a tensor of a safetensors file into the store under `key` (default `file_name`).

        `file_name` is required, positionally (``(key, file_name)``) or by
        keyword (``(file_name=...)``, or with a key); without it TypeError.
        The tensor is the file's entry named `key` if there is one, else its
        first (a warning is logged). Returns the tensor, or None if the file
        is missing, empty or invalid (every header field is checked), or the
        put fails.
        """
        if file_name is None:
            raise TypeError("load_tensor_from_safetensor() missing required argument 'file_name'")
        try:
            tensors = _safetensors.load_file(file_name)
        except (OSError, ValueError) as e:
            _log.warning("load_tensor_from_safetensor(%r): %s", file_name, e)
            return None
        if not tensors:
            return None
        store_key = key or file_name
        if store_key in tensors:
            tensor = tensors[store_key]
        else:
            name, tensor = next(iter(tensors.items()))
            _log.warning(
                "%s has no tensor named %r; storing its first, %r", file_name, store_key, name
            )
        return tensor if self.put_tensor(store_key, tensor) == 0 else None


def _one(value: Any) -> list[Any] | None:
    return None if value is None else [value]


def _tp_keys(base_keys: Sequence[str], tp_rank: int, tp_size: int) -> list[str]:
    return list(base_keys) if tp_size <= 1 else [f"{k}_tp_{tp_rank}" for k in base_keys]
