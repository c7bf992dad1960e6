"""Shared pieces of the tensor tests (tests/test_store_tensor*.py).

Expected headers are built here by hand with `struct` from the layout in
spec store_te.md §1.5 (upstream `TensorMetadata`), independently of
mooncake/_tensor.py.
"""

from __future__ import annotations

import itertools
import math
import struct
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mooncake.store import MooncakeDistributedStore, ParallelAxis, _serialize_tensor  # noqa: E402

INVALID = -600
HEADER = 304
MAGIC = 0x4D4F4F4E

# dtype code -> (torch dtype, element size), upstream's table
DTYPES = {
    0: (torch.float32, 4),
    1: (torch.float64, 8),
    2: (torch.int8, 1),
    3: (torch.uint8, 1),
    4: (torch.int16, 2),
    5: (torch.uint16, 2),
    6: (torch.int32, 4),
    7: (torch.uint32, 4),
    8: (torch.int64, 8),
    9: (torch.uint64, 8),
    10: (torch.bool, 1),
    11: (torch.float16, 2),
    12: (torch.bfloat16, 2),
    13: (torch.float8_e4m3fn, 1),
    14: (torch.float8_e5m2, 1),
}
_ids = itertools.count()


def key(tag="t") -> str:
    return f"tensor/{tag}/{next(_ids)}/{uuid.uuid4().hex[:6]}"


def expected_header(code, local_shape, global_shape=None, axes=()):
    """Upstream TensorMetadata, packed field by field (native little-endian)."""
    elem = DTYPES[code][1]
    nbytes = math.prod(local_shape) * elem
    pad = lambda dims: list(dims) + [-1] * (8 - len(dims))  # noqa: E731
    h = struct.pack("<I", MAGIC)  # magic "NOOM"
    h += struct.pack("<H", 1)  # version
    h += struct.pack("<H", 304)  # header_size
    h += struct.pack("<i", code)  # dtype
    h += struct.pack("<i", len(local_shape))  # ndim
    h += struct.pack("<I", 1 if axes else 0)  # layout_kind FULL / SHARD
    h += struct.pack("<I", 0)  # reserved_flags
    h += struct.pack("<Q", 304)  # data_offset
    h += struct.pack("<Q", nbytes)  # data_bytes
    assert len(h) == 40
    h += struct.pack(
        "<8q", *pad(global_shape if global_shape is not None else local_shape)
    )  # offset 40
    h += struct.pack("<8q", *pad(local_shape))  # offset 104
    h += struct.pack("<I", len(axes)) + struct.pack("<I", 0)  # axis_count, reserved (offset 168)
    for i in range(4):  # offset 176: 4 x LayoutAxis (32 bytes)
        if i < len(axes):
            kind, axis_index, rank, count, split_dim, r0, r1 = axes[i]
            h += struct.pack("<iiiiiiq", kind, axis_index, rank, count, split_dim, r0, r1)
        else:
            h += bytes(32)
    assert len(h) == 304
    return h


def sample(code, shape):
    dtype = DTYPES[code][0]
    n = math.prod(shape)
    if dtype == torch.bool:
        return (torch.arange(n) % 3 == 0).reshape(shape)
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return (torch.arange(n, dtype=torch.float32) / 7).to(dtype).reshape(shape)
    if dtype in (torch.uint16, torch.uint32, torch.uint64):
        return torch.arange(n, dtype=torch.int64).to(dtype).reshape(shape)
    return torch.arange(n).to(dtype).reshape(shape)


def raw(t) -> bytes:
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def same(a, b) -> bool:
    return a is not None and a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)


def tensor_client(master, segment: str = "128MB") -> Iterator[MooncakeDistributedStore]:
    """A set-up store client, closed when the generator finishes (for module fixtures)."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", master.metadata_url, segment, "16MB", "tcp", "", master.rpc) == 0
    yield s
    s.close()


def tp_axis(rank: int, size: int, split_dim: int) -> ParallelAxis:
    """A TP axis built as upstream's: no-argument constructor, fields set afterwards."""
    a = ParallelAxis()
    a.kind, a.rank, a.size, a.split_dim = "tp", rank, size, split_dim
    return a


def tensor_object(t) -> np.ndarray:
    """A numpy buffer holding the stored form of `t` (header + bytes)."""
    header, _ptr, nbytes, owner = _serialize_tensor(t)
    buf = np.zeros(HEADER + nbytes, dtype=np.uint8)
    buf[:HEADER] = np.frombuffer(header, dtype=np.uint8)
    if nbytes:
        buf[HEADER:] = np.frombuffer(raw(owner), dtype=np.uint8)
    return buf


def ptr(buf: np.ndarray) -> int:
    return buf.ctypes.data
