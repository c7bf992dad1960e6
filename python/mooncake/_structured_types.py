"""Value types of `mooncake.structured_object_store` below its transfer class.

The constants, read specs, payloads and refs that `MooncakeBundleTransfer`
and the DataProto layer (`mooncake._dataproto`) both use, and the helpers
that copy placement configs and cut members into chunks. Both import this
module; it imports neither, so the two never import in a circle.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

DEFAULT_BUNDLE_CHUNK_BYTES = 64 << 20
AUTO_PARALLEL_MIN_BYTES = 64 << 20
AUTO_PARALLEL_MIN_CHUNKS = 8
MISSING_OBJECT_ERROR = -704
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
ALREADY_REGISTERED = -600

_CONFIG_FIELDS = (
    "data_type",
    "group_ids",
    "nof_replica_num",
    "prefer_alloc_in_same_node",
    "preferred_nof_segments",
    "preferred_segment",
    "preferred_segments",
    "replica_num",
    "with_hard_pin",
    "with_soft_pin",
)

_STORE_METHODS = (
    "put",
    "get",
    "remove",
    "batch_remove",
    "batch_put_from",
    "put_from",
    "put_tensor_from",
    "batch_get_into",
    "get_into",
    "get_into_ranges",
    "register_buffer",
    "unregister_buffer",
    "put_tensor",
    "pub_tensor",
    "get_tensor",
    "get_tensor_into",
)


@dataclass(frozen=True)
class BundleTransferPolicy:
    """How writes run: `put_mode` auto|batch|parallel, `copy_mode` auto|zero_copy|copy."""

    max_inflight_put: int = 1
    put_mode: str = "auto"
    copy_mode: str = "auto"


@dataclass
class RemoteBundleRef:
    """Where an object lives: its manifest key, and the manifest when known."""

    manifest_key: str
    manifest: dict


@dataclass(frozen=True)
class StructuredObjectPayload:
    """An object to write: `metadata` (a JSON-able mapping) and named member `buffers`."""

    metadata: Mapping[str, Any] | None = None
    buffers: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.buffers is None:
            raise TypeError("StructuredObjectPayload requires buffers")
        if self.metadata is None:
            object.__setattr__(self, "metadata", {})


@dataclass(frozen=True)
class _TensorObjectBufferPayload:
    """A stored-tensor object (304-byte header, then data) already in registered memory."""

    ptr: int
    size: int
    owner: Any = None
    batch_size: int | None = None

    def __len__(self) -> int:
        if self.batch_size is None:
            raise TypeError("tensor object buffer requires batch_size for DataProto use")
        return self.batch_size


def tensor_object_buffer(
    ptr: int, size: int, owner: Any = None, batch_size: int | None = None
) -> _TensorObjectBufferPayload:
    """A member written as is (`put_tensor_from`), or a destination for a tensor member."""
    return _TensorObjectBufferPayload(int(ptr), int(size), owner, batch_size)


@dataclass(frozen=True)
class _RawDestinationBuffer:
    """Caller memory a member is read into; `pre_registered` skips register_buffer."""

    ptr: int
    size: int
    owner: Any = None
    pre_registered: bool = False


def raw_destination(
    ptr: int, size: int, owner: Any = None, *, pre_registered: bool = False
) -> _RawDestinationBuffer:
    """A destination of `size` bytes at `ptr` for `materialize_into`."""
    return _RawDestinationBuffer(int(ptr), int(size), owner, pre_registered)


@dataclass(frozen=True)
class _MultiBufferPayload:
    """A member made of several buffers, stored as their concatenation.

    With `dtype` and `shape` it is an ndarray member, else a bytes member.
    `owners` keep the buffers' memory alive until the write is done.
    """

    buffers: tuple
    owners: tuple = ()
    dtype: str | None = None
    shape: tuple | None = None

    @property
    def nbytes(self) -> int:
        return sum(memoryview(b).nbytes for b in self.buffers)


@dataclass(frozen=True)
class _DirectCopyPayload:
    """A member made of C-contiguous ndarrays, copied straight into pool leases."""

    arrays: list
    total_bytes: int
    dtype: str | None = None
    shape: tuple | None = None

    @property
    def nbytes(self) -> int:
        return self.total_bytes

    @staticmethod
    def from_flat_arrays(flat_arrays: list, dtype: Any, total_elems: int) -> _DirectCopyPayload:
        """A 1-D ndarray member of `total_elems` elements of `dtype`, made of `flat_arrays`."""
        return _DirectCopyPayload(
            arrays=list(flat_arrays),
            total_bytes=sum(a.nbytes for a in flat_arrays),
            dtype=np.dtype(dtype).str,
            shape=(total_elems,),
        )


@dataclass
class StructuredObjectResult:
    """A read object: its full metadata and the selected members, in selection order."""

    metadata: dict
    objects: dict


@dataclass(frozen=True)
class StructuredMemberSlice:
    """Rows [start:end:step] of a member along `axis` (axis 0 only)."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """What to read of an object: the members (None = all) and per-member slices."""

    ref: Any
    member_names: tuple | None = None
    member_slices: tuple = field(default_factory=tuple)

    def select_members(self, names: Sequence[str] | None) -> StructuredObjectReadSpec:
        return replace(self, member_names=None if names is None else tuple(names))

    def slice_member(
        self, name: str, axis: int, start: int, end: int, step: int = 1
    ) -> StructuredObjectReadSpec:
        kept = tuple((n, s) for n, s in self.member_slices if n != name)
        return replace(
            self, member_slices=(*kept, (name, StructuredMemberSlice(axis, start, end, step)))
        )

    def member_slice(self, name: str) -> StructuredMemberSlice | None:
        return next((s for n, s in self.member_slices if n == name), None)


def _config_for_grouped_keys(config: Any, n: int) -> Any:
    """`config` adapted to a call writing `n` keys of one logical group (never mutated)."""
    if config is None:
        return None
    ids = getattr(config, "group_ids", None)
    if ids is None:
        return config
    if isinstance(ids, str):
        ids = [ids]
    elif len(ids) == 0:
        return _copy_config(config, None)
    elif len(ids) != 1:
        raise ValueError(
            "config.group_ids must contain exactly one logical group id for a bundle write"
        )
    elif n == 1 and isinstance(config.group_ids, list):
        return config
    return _copy_config(config, [ids[0]] * n)


def _copy_config(config: Any, group_ids: list | None) -> Any:
    try:
        out = copy.copy(config)
    except TypeError:
        try:
            out = type(config)()
        except TypeError as e:
            raise TypeError(f"cannot copy {type(config).__name__} for a grouped write") from e
        for name in _CONFIG_FIELDS:
            if hasattr(config, name):
                setattr(out, name, getattr(config, name))
    out.group_ids = group_ids
    return out


def _nested_rows(value: Any, picks: list[int]) -> Any:
    """Rows `picks` of a jagged nested tensor, as a nested tensor of the same layout;
    no rows give an empty nested tensor (len 0)."""
    import torch

    if picks:
        rows = value.unbind()
        return torch.nested.as_nested_tensor([rows[i] for i in picks], layout=value.layout)
    offsets = value.offsets()
    empty = torch.zeros(1, dtype=offsets.dtype, device=offsets.device)
    return torch.nested.nested_tensor_from_jagged(value.values()[:0], offsets=empty)


def _check_ndarray_destination(name: str, dest: Any, dt: np.dtype, shape: list) -> np.ndarray:
    """`dest` when it can take an ndarray member's rows (TypeError/ValueError if not)."""
    if not isinstance(dest, np.ndarray):
        raise TypeError(f"destination for {name!r} must be a numpy ndarray or a raw_destination")
    if dest.dtype != dt:
        raise ValueError(
            f"structured ndarray field {name} destination dtype mismatch: "
            f"expected {dt.str}, got {dest.dtype.str}"
        )
    if list(dest.shape) != shape:
        raise ValueError(
            f"structured ndarray field {name} destination shape mismatch: "
            f"expected {tuple(shape)}, got {tuple(dest.shape)}"
        )
    if not dest.flags.c_contiguous:
        raise ValueError(f"destination for {name!r} must be C-contiguous")
    if not dest.flags.writeable:
        raise ValueError(f"destination for {name!r} must be writeable")
    return dest


def _valid_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name != ""
        and "/" not in name
        and all(ord(c) >= 0x20 for c in name)
    )


def _bytes_view(value: Any, what: str) -> memoryview:
    try:
        m = memoryview(value)
    except TypeError as e:
        raise TypeError(f"{what} must be bytes-like") from e
    if not m.c_contiguous:
        m = memoryview(m.tobytes())
    return m.cast("B") if m.format != "B" or m.ndim != 1 else m


def _array_view(arr: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous ndarray as a 1-D memoryview."""
    return memoryview(arr.reshape(-1).view(np.uint8))


def _chunk_groups(parts: list[memoryview], chunk: int) -> list[list[memoryview]]:
    """The bytes of `parts`, in order, as groups of exactly `chunk` bytes (last shorter)."""
    groups: list[list[memoryview]] = []
    room = 0
    for part in parts:
        off = 0
        while off < part.nbytes:
            if room == 0:
                groups.append([])
                room = chunk
            take = min(room, part.nbytes - off)
            groups[-1].append(part[off : off + take])
            off += take
            room -= take
    return groups


def _typed_spec(name: str, payload: Any, nbytes: int) -> dict:
    """The field spec of a multi-buffer payload: ndarray with dtype and shape, else bytes."""
    if payload.dtype is None or payload.shape is None:
        return {"encoding": "bytes"}
    dt = np.dtype(payload.dtype)
    shape = [int(d) for d in payload.shape]
    if int(np.prod(shape, dtype=np.int64)) * dt.itemsize != nbytes:
        raise ValueError(f"{name}: dtype and shape do not match the payload's {nbytes} bytes")
    return {"encoding": "ndarray", "dtype": dt.str, "shape": shape}


def _decode_manifest(raw: Any) -> dict:
    """The manifest JSON as a dict (ValueError if it is not one)."""
    try:
        doc = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"invalid bundle manifest: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError("invalid bundle manifest: not a JSON object")
    return doc
