"""The safetensors file format, written and read without the `safetensors` package.

A file is: u64 little-endian N, then N bytes of a JSON object (padded with
spaces to a multiple of 8), then the tensors' bytes. The JSON maps each
tensor name to ``{"dtype": "F32", "shape": [...], "data_offsets": [begin,
end]}`` (offsets relative to the end of the header, tensors laid out back to
back without holes); an optional ``"__metadata__"`` maps strings to strings.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

# torch dtype name -> safetensors dtype name
_NAMES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
_TORCH = {v: k for k, v in _NAMES.items()}
_MAX_HEADER = 100 << 20


_MAX_DIM = (1 << 63) - 1  # torch sizes are int64
_MAX_RANK = 64


class SafetensorsError(ValueError):
    """A file that is not valid safetensors, or a tensor it cannot hold."""


def file_name_for_key(key: str) -> str:
    """The file a key names when no file name is given: the key itself, which
    must then be a plain file name (no ``/``, ``\\`` or NUL, not ``.`` or
    ``..``), so a key never leads out of the working directory."""
    if (
        not isinstance(key, str)
        or key in ("", ".", "..")
        or any(c in key for c in ("/", "\\", "\0"))
    ):
        raise SafetensorsError(
            f"key {key!r} is not a plain file name: pass file_name to save it elsewhere"
        )
    return key


def save_file(tensors: dict[str, Any], path: str | Path, *, follow_symlinks: bool = True) -> None:
    """Write `tensors` (name -> torch tensor) to `path` in safetensors format.

    With ``follow_symlinks=False`` a symlink at `path` is refused (O_NOFOLLOW)."""
    import torch

    header: dict[str, Any] = {}
    datas = []
    offset = 0
    for name, tensor in tensors.items():
        t = tensor.detach().cpu().contiguous()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _NAMES:
            raise SafetensorsError(f"dtype {t.dtype} has no safetensors name")
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": _NAMES[dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
        datas.append(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    with os.fdopen(os.open(path, flags, 0o644), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in datas:
            f.write(data)


def load_file(path: str | Path) -> dict[str, Any]:
    """The tensors of a safetensors file, in the order of their data.

    Every header field is checked before anything is built: a file that is
    not valid safetensors raises `SafetensorsError` (and nothing else)."""
    with open(path, "rb") as f:
        raw = f.read()
    return parse(raw, str(path))


def parse(raw: bytes, where: str = "safetensors") -> dict[str, Any]:
    """The tensors of the safetensors bytes `raw`; `SafetensorsError` if invalid."""
    import torch

    if len(raw) < 8:
        raise SafetensorsError(f"{where}: too short for a safetensors file")
    (size,) = struct.unpack_from("<Q", raw, 0)
    if size > _MAX_HEADER or 8 + size > len(raw):
        raise SafetensorsError(f"{where}: header size {size} does not fit the file")
    try:
        header = json.loads(raw[8 : 8 + size])
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, ints past the digit limit
        raise SafetensorsError(f"{where}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SafetensorsError(f"{where}: __metadata__ is not a map of strings")
    data = memoryview(raw)[8 + size :]
    entries = sorted(
        ((name, _entry(where, name, entry)) for name, entry in header.items()),
        key=lambda kv: kv[1][2],
    )
    out: dict[str, Any] = {}
    expected = 0
    for name, (dtype, shape, begin, end) in entries:
        t_dtype = getattr(torch, _TORCH[dtype], None)
        if t_dtype is None:
            raise SafetensorsError(f"{where}: tensor {name!r}: dtype {dtype} needs a newer torch")
        nbytes = math.prod(shape) * torch.empty(0, dtype=t_dtype).element_size()
        if begin != expected or end - begin != nbytes or end > len(data):
            raise SafetensorsError(f"{where}: tensor {name!r} has bad data offsets")
        expected = end
        if nbytes:
            buf = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8)
            out[name] = buf.view(t_dtype).reshape(shape)
        else:
            out[name] = torch.empty(shape, dtype=t_dtype)
    if expected != len(data):
        raise SafetensorsError(f"{where}: {len(data) - expected} bytes after the last tensor")
    return out


def _entry(where: str, name: str, entry: Any) -> tuple[str, list[int], int, int]:
    """A header entry's dtype, shape and data offsets, each checked."""
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{where}: tensor {name!r} is not a JSON object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _TORCH:
        raise SafetensorsError(f"{where}: tensor {name!r} has a bad dtype {dtype!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_RANK
        or not all(type(d) is int and 0 <= d <= _MAX_DIM for d in shape)
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has a bad shape")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise SafetensorsError(f"{where}: tensor {name!r} has bad data offsets")
    return dtype, shape, offsets[0], offsets[1]
