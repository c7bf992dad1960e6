"""The stored tensor format: a 304-byte header, then the tensor's bytes.

Byte-exact with upstream (native little-endian):

    off  size  field
    0    4     u32 magic 0x4d4f4f4e ("NOOM")
    4    2     u16 version = 1
    6    2     u16 header_size = 304
    8    4     i32 dtype code
    12   4     i32 ndim (0..8)
    16   4     u32 layout_kind (0 FULL, 1 SHARD)
    20   4     u32 reserved_flags = 0
    24   8     u64 data_offset = 304
    32   8     u64 data_bytes
    40   64    i64 global_shape[8]   (unused dims -1)
    104  64    i64 local_shape[8]    (unused dims -1)
    168  4     u32 axis_count (<= 4)
    172  4     u32 reserved
    176  128   4 x LayoutAxis {i32 kind (DP0 TP1 EP2 PP3), i32 axis_index,
               i32 shard_rank, i32 shard_count, i32 split_dim (-1 none),
               i32 reserved0, i64 reserved1 (local extent along split_dim)}
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any

MAGIC = 0x4D4F4F4E
VERSION = 1
HEADER_SIZE = 304
MAX_DIMS = 8
MAX_AXES = 4
LAYOUT_FULL, LAYOUT_SHARD = 0, 1
AXIS_DP, AXIS_TP, AXIS_EP, AXIS_PP = 0, 1, 2, 3

_HEAD = struct.Struct("<IHHiiIIQQ")  # 40 bytes
_SHAPE = struct.Struct("<8q")
_AXES_HEAD = struct.Struct("<II")
_AXIS = struct.Struct("<iiiiiiq")  # 32 bytes

# (torch dtype name, element size) by upstream dtype code.
_DTYPES = [
    ("float32", 4),
    ("float64", 8),
    ("int8", 1),
    ("uint8", 1),
    ("int16", 2),
    ("uint16", 2),
    ("int32", 4),
    ("uint32", 4),
    ("int64", 8),
    ("uint64", 8),
    ("bool", 1),
    ("float16", 2),
    ("bfloat16", 2),
    ("float8_e4m3fn", 1),
    ("float8_e5m2", 1),
]


def tensor_metadata_size() -> int:
    """Size of the header: 304 bytes."""
    return HEADER_SIZE


def dtype_code(dtype: Any) -> int:
    """Upstream code of a torch dtype; ValueError for dtypes it has none for."""
    name = str(dtype).removeprefix("torch.")
    for code, (n, _) in enumerate(_DTYPES):
        if n == name:
            return code
    raise ValueError(f"dtype {dtype} cannot be stored")


def element_size(dtype_name: str) -> int:
    """Bytes per element of a dtype named as in `parse_header`'s "dtype"."""
    return next(size for n, size in _DTYPES if n == dtype_name)


def _shape(dims: Any) -> list[int]:
    dims = list(dims)
    return dims + [-1] * (MAX_DIMS - len(dims))


def build_header(
    dtype: Any, local_shape: Any, data_bytes: int, global_shape: Any = None, axes: list[tuple] = ()
) -> bytes:
    """Header bytes for a tensor; `axes` are LayoutAxis tuples (SHARD layout when non-empty)."""
    local_shape = list(local_shape)
    if len(local_shape) > MAX_DIMS:
        raise ValueError(f"tensors of more than {MAX_DIMS} dimensions cannot be stored")
    if len(axes) > MAX_AXES:
        raise ValueError("too many layout axes")
    layout = LAYOUT_SHARD if axes else LAYOUT_FULL
    head = _HEAD.pack(
        MAGIC,
        VERSION,
        HEADER_SIZE,
        dtype_code(dtype),
        len(local_shape),
        layout,
        0,
        HEADER_SIZE,
        data_bytes,
    )
    body = _SHAPE.pack(*_shape(global_shape if global_shape is not None else local_shape))
    body += _SHAPE.pack(*_shape(local_shape))
    body += _AXES_HEAD.pack(len(axes), 0)
    for i in range(MAX_AXES):
        body += _AXIS.pack(*axes[i]) if i < len(axes) else bytes(_AXIS.size)
    header = head + body
    assert len(header) == HEADER_SIZE
    return header


def _cpu_contiguous(tensor: Any) -> Any:
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    return tensor.contiguous()


def serialize_tensor(tensor: Any) -> tuple[Any, bytes]:
    """(contiguous CPU tensor, header) for storing `tensor` whole."""
    t = _cpu_contiguous(tensor)
    return t, build_header(t.dtype, t.shape, t.numel() * t.element_size())


def parse_header(header: bytes, total: int) -> dict | None:
    """Validate a header against the object's total size; its fields, or None."""
    if len(header) < HEADER_SIZE:
        return None
    magic, version, hsize, dtype, ndim, layout, _flags, data_offset, data_bytes = _HEAD.unpack_from(
        header, 0
    )
    if magic != MAGIC or version != VERSION or hsize != HEADER_SIZE:
        return None
    if (
        not 0 <= dtype < len(_DTYPES)
        or not 0 <= ndim <= MAX_DIMS
        or layout not in (LAYOUT_FULL, LAYOUT_SHARD)
    ):
        return None
    if data_offset < HEADER_SIZE or data_offset > total or data_bytes != total - data_offset:
        return None
    global_shape = list(_SHAPE.unpack_from(header, 40))
    local_shape = list(_SHAPE.unpack_from(header, 104))
    if any(d < 0 for d in local_shape[:ndim]) or any(d != -1 for d in local_shape[ndim:]):
        return None
    if any(d != -1 for d in global_shape[ndim:]):
        return None
    if math.prod(local_shape[:ndim]) * _DTYPES[dtype][1] != data_bytes:
        return None
    axis_count, _ = _AXES_HEAD.unpack_from(header, 168)
    if axis_count > MAX_AXES or (layout == LAYOUT_FULL) != (axis_count == 0):
        return None
    axes = [_AXIS.unpack_from(header, 176 + 32 * i) for i in range(axis_count)]
    for kind, _idx, rank, count, split_dim, _r0, _r1 in axes:
        if (
            not 0 <= kind <= 4
            or count < 1
            or not 0 <= rank < count
            or not -1 <= split_dim < max(ndim, 1)
        ):
            return None
    return {
        "dtype": _DTYPES[dtype][0],
        "local_shape": local_shape[:ndim],
        "global_shape": global_shape[:ndim],
        "data_offset": data_offset,
        "axes": axes,
    }


def parse_header_at(addr: int, total: int | None = None) -> dict | None:
    """`parse_header` of the 304 bytes at `addr`.

    Without `total` the object size is the one the header declares
    (data_offset + data_bytes): for headers read on their own.
    """
    from mooncake import _device

    header = _device.read(addr, HEADER_SIZE)  # the caller's buffer may be on a GPU
    if total is None:
        offset, nbytes = struct.unpack_from("<QQ", header, 24)
        total = offset + nbytes
    return parse_header(header, total)


def view_at(addr: int, meta: dict) -> Any:
    """A tensor over the data at `addr` (no copy) shaped by a parsed header.

    Over device memory it is a CUDA tensor on that GPU.
    """
    import torch

    from mooncake import _device

    dtype = getattr(torch, meta["dtype"])
    shape = meta["local_shape"]
    nbytes = math.prod(shape) * element_size(meta["dtype"])
    device = _device.device_of(addr)
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device="cpu" if device is None else f"cuda:{device}")
    if device is not None:
        raw = _device.cuda_bytes(addr, nbytes, device)
    else:
        raw = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


# A parallelism manifest: the stored layout of a sharded tensor (96 bytes).
MANIFEST_MAGIC = 0x574D414E
MANIFEST_SIZE = 96
_MANIFEST = struct.Struct("<IHHiiiii4x8q")


def build_manifest(dtype: Any, global_shape: Any, split_dim: int, shard_count: int) -> bytes:
    """Manifest bytes: dtype, global shape, split dimension and shard count."""
    shape = list(global_shape)
    return _MANIFEST.pack(
        MANIFEST_MAGIC,
        VERSION,
        MANIFEST_SIZE,
        dtype_code(dtype),
        len(shape),
        split_dim,
        shard_count,
        0,
        *_shape(shape),
    )


def parse_manifest(data: bytes) -> dict | None:
    """Fields of a manifest, or None if `data` is not a valid one."""
    if len(data) != MANIFEST_SIZE:
        return None
    magic, version, size, dtype, ndim, split_dim, count, _r0, *shape = _MANIFEST.unpack(data)
    if magic != MANIFEST_MAGIC or version != VERSION or size != MANIFEST_SIZE:
        return None
    if not 0 <= dtype < len(_DTYPES) or not 1 <= ndim <= MAX_DIMS or count < 1:
        return None
    if not 0 <= split_dim < ndim or any(d < 0 for d in shape[:ndim]):
        return None
    return {
        "dtype": _DTYPES[dtype][0],
        "global_shape": shape[:ndim],
        "split_dim": split_dim,
        "shard_count": count,
    }


def slab_blocks(
    shape: Any, elem: int, dim: int, start: int, stop: int
) -> list[tuple[int, int, int]]:
    """The contiguous pieces of slice [start, stop) along `dim` of a C-contiguous tensor.

    Each is (byte offset in the whole tensor, byte offset in the slice, size).
    """
    shape = list(shape)
    inner = math.prod(shape[dim + 1 :]) * elem
    outer = math.prod(shape[:dim])
    size = (stop - start) * inner
    if size == 0:
        return []
    row = shape[dim] * inner
    return [(o * row + start * inner, o * size, size) for o in range(outer)]


def deserialize_tensor(addr: int, total: int) -> Any:
    """Tensor from an object of `total` bytes at `addr` (copied), or None if invalid.

    A shard carries its layout as the attribute ``_mooncake_layout``.
    """
    import torch

    if total < HEADER_SIZE:
        return None
    meta = parse_header(ctypes.string_at(addr, HEADER_SIZE), total)
    if meta is None:
        return None
    nbytes = total - meta["data_offset"]
    raw = torch.empty(nbytes, dtype=torch.uint8)
    if nbytes:
        ctypes.memmove(raw.data_ptr(), addr + meta["data_offset"], nbytes)
    t = raw.view(getattr(torch, meta["dtype"])).reshape(meta["local_shape"])
    if meta["axes"]:
        kind, _idx, rank, count, split_dim, _r0, _r1 = meta["axes"][0]
        t._mooncake_layout = {
            "kind": kind,
            "shard_rank": rank,
            "shard_count": count,
            "split_dim": split_dim,
            "global_shape": meta["global_shape"],
        }
    return t
