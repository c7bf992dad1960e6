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
import struct
from pathlib import Path
from typing import Any

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


class SafetensorsError(ValueError):
    """A file that is not valid safetensors, or a tensor it cannot hold."""


def save_file(tensors: dict[str, Any], path: str | Path) -> None:
    """Write `tensors` (name -> torch tensor) to `path` in safetensors format."""
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
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in datas:
            f.write(data)


def load_file(path: str | Path) -> dict[str, Any]:
    """The tensors of a safetensors file, in the order of their data."""
    import torch

    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors file")
    (size,) = struct.unpack_from("<Q", raw, 0)
    if size > _MAX_HEADER or 8 + size > len(raw):
        raise SafetensorsError(f"{path}: header size {size} does not fit the file")
    try:
        header = json.loads(raw[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    header.pop("__metadata__", None)
    data = raw[8 + size :]
    entries = sorted(header.items(), key=lambda kv: _offsets(path, kv)[0])
    out: dict[str, Any] = {}
    expected = 0
    for name, entry in entries:
        begin, end = _offsets(path, (name, entry))
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if dtype not in _TORCH or not isinstance(shape, list):
            raise SafetensorsError(f"{path}: tensor {name!r} has a bad dtype or shape")
        t_dtype = getattr(torch, _TORCH[dtype])
        nbytes = math.prod(shape) * torch.empty(0, dtype=t_dtype).element_size()
        if begin != expected or end - begin != nbytes or end > len(data):
            raise SafetensorsError(f"{path}: tensor {name!r} has bad data offsets")
        expected = end
        buf = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.uint8) if nbytes else None
        out[name] = (
            buf.view(t_dtype).reshape(shape)
            if buf is not None
            else torch.empty(shape, dtype=t_dtype)
        )
    if expected != len(data):
        raise SafetensorsError(f"{path}: {len(data) - expected} bytes after the last tensor")
    return out


def _offsets(path: str | Path, item: tuple[str, Any]) -> tuple[int, int]:
    name, entry = item
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and o >= 0 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise SafetensorsError(f"{path}: tensor {name!r} has bad data offsets")
    return offsets[0], offsets[1]
