"""A small MessagePack encoder/decoder (the subset JSON-like rows need).

Used by the ``msgpack_ragged`` DataProto codec so that the package needs no
``msgpack`` dependency. Encodes None, bool, int (64-bit), float (as float64),
str, bytes-like (bin), list/tuple (array) and dict (map) in the shortest
standard form; decodes the same families (plus float32 and ext-free forms).
Tuples decode as lists.
"""

from __future__ import annotations

import struct
from typing import Any


def packb(value: Any) -> bytes:
    """`value` as MessagePack bytes; TypeError for types outside the subset."""
    out = bytearray()
    _pack(value, out, 0)
    return bytes(out)


def _pack(v: Any, out: bytearray, depth: int) -> None:
    if depth > 512:
        raise ValueError("msgpack: value is nested too deeply")
    if v is None:
        out.append(0xC0)
    elif v is True or v is False:
        out.append(0xC3 if v else 0xC2)
    elif isinstance(v, int):
        _pack_int(int(v), out)
    elif isinstance(v, float):
        out.append(0xCB)
        out += struct.pack(">d", v)
    elif isinstance(v, str):
        b = v.encode("utf-8")
        n = len(b)
        if n < 32:
            out.append(0xA0 | n)
        else:
            _pack_len(n, out, 0xD9, 0xDA, 0xDB)
        out += b
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        _pack_len(len(b), out, 0xC4, 0xC5, 0xC6)
        out += b
    elif isinstance(v, (list, tuple)):
        n = len(v)
        if n < 16:
            out.append(0x90 | n)
        else:
            _pack_len(n, out, None, 0xDC, 0xDD)
        for item in v:
            _pack(item, out, depth + 1)
    elif isinstance(v, dict):
        n = len(v)
        if n < 16:
            out.append(0x80 | n)
        else:
            _pack_len(n, out, None, 0xDE, 0xDF)
        for k, item in v.items():
            _pack(k, out, depth + 1)
            _pack(item, out, depth + 1)
    else:
        raise TypeError(f"msgpack cannot encode {type(v).__name__}")


def _pack_len(n: int, out: bytearray, b8: int | None, b16: int, b32: int) -> None:
    if b8 is not None and n < 1 << 8:
        out += bytes((b8, n))
    elif n < 1 << 16:
        out.append(b16)
        out += struct.pack(">H", n)
    else:
        out.append(b32)
        out += struct.pack(">I", n)


def _pack_int(v: int, out: bytearray) -> None:
    if 0 <= v < 128:
        out.append(v)
    elif -32 <= v < 0:
        out.append(v & 0xFF)
    elif v >= 0:
        for code, fmt, top in (
            (0xCC, ">B", 8),
            (0xCD, ">H", 16),
            (0xCE, ">I", 32),
            (0xCF, ">Q", 64),
        ):
            if v < 1 << top:
                out.append(code)
                out += struct.pack(fmt, v)
                return
        raise OverflowError("msgpack: integer does not fit in 64 bits")
    else:
        for code, fmt, top in (
            (0xD0, ">b", 7),
            (0xD1, ">h", 15),
            (0xD2, ">i", 31),
            (0xD3, ">q", 63),
        ):
            if v >= -(1 << top):
                out.append(code)
                out += struct.pack(fmt, v)
                return
        raise OverflowError("msgpack: integer does not fit in 64 bits")


def unpackb(data: bytes) -> Any:
    """The value MessagePack `data` holds; ValueError if malformed or trailing bytes."""
    value, end = _unpack(memoryview(data), 0, 0)
    if end != len(data):
        raise ValueError("msgpack: trailing bytes")
    return value


_FIXED = {
    0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
    0xCA: ">f", 0xCB: ">d",
}  # fmt: skip
_LENGTHS = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
_CONTAINERS = {0xDC: (2, list), 0xDD: (4, list), 0xDE: (2, dict), 0xDF: (4, dict)}


def _read(data: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    if pos + n > len(data):
        raise ValueError("msgpack: truncated data")
    return data[pos : pos + n], pos + n


def _uint(data: memoryview, pos: int, size: int) -> tuple[int, int]:
    raw, pos = _read(data, pos, size)
    return int.from_bytes(raw, "big"), pos


def _unpack(data: memoryview, pos: int, depth: int) -> tuple[Any, int]:
    if depth > 512:
        raise ValueError("msgpack: value is nested too deeply")
    head, pos = _read(data, pos, 1)
    b = head[0]
    if b < 0x80:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0xA0 <= b < 0xC0:
        raw, pos = _read(data, pos, b & 0x1F)
        return bytes(raw).decode("utf-8"), pos
    if 0x90 <= b < 0xA0:
        return _items(data, pos, b & 0x0F, list, depth)
    if 0x80 <= b < 0x90:
        return _items(data, pos, b & 0x0F, dict, depth)
    if b in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[b], pos
    if b in _FIXED:
        fmt = _FIXED[b]
        raw, pos = _read(data, pos, struct.calcsize(fmt))
        return struct.unpack(fmt, raw)[0], pos
    if b in _LENGTHS:
        n, pos = _uint(data, pos, _LENGTHS[b])
        raw, pos = _read(data, pos, n)
        return (bytes(raw) if b <= 0xC6 else bytes(raw).decode("utf-8")), pos
    if b in _CONTAINERS:
        size, kind = _CONTAINERS[b]
        n, pos = _uint(data, pos, size)
        return _items(data, pos, n, kind, depth)
    raise ValueError(f"msgpack: unsupported type byte 0x{b:02x}")


def _items(data: memoryview, pos: int, n: int, kind: type, depth: int) -> tuple[Any, int]:
    if kind is list:
        out = []
        for _ in range(n):
            v, pos = _unpack(data, pos, depth + 1)
            out.append(v)
        return out, pos
    d = {}
    for _ in range(n):
        k, pos = _unpack(data, pos, depth + 1)
        v, pos = _unpack(data, pos, depth + 1)
        d[k] = v
    return d, pos
