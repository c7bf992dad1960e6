"""Codecs for the non-tensor fields of a DataProto (object ndarrays of rows).

A codec turns a field's rows into named numeric payload arrays (each stored
as one ndarray member ``non_tensor_batch.<field>.<payload>``) plus a JSON
description kept in the DataProto ref (``encoded_non_tensor``), and back.
Codec names are upstream's; the payload layouts are this package's:

* ``ndarray``: numeric scalars; ``data`` (one element per row), ``nulls``.
* ``typed_ragged``: numeric lists or ndarrays; ``data`` (all elements),
  ``offsets`` (int64, rows+1, in elements), ``shapes`` (int64, all dims),
  ``ndims`` (int64 per row), ``nulls``.
* ``ragged_tensor``: torch tensors, as ``typed_ragged`` (bfloat16 rejected).
* ``bytes_ragged``, ``utf8_ragged``, ``msgpack_ragged``, ``json_ragged``,
  ``media_bytes`` (PIL images as PNG): one byte string per row; ``data``
  (uint8), ``offsets`` (int64, rows+1), ``nulls``.
* ``media_list_ragged``: lists of PIL images; ``data``, ``offsets`` (per
  image), ``lengths`` (images per row), ``nulls``.
* ``ragged_tensor_dict``: dicts of tensors; one ``ragged_tensor`` per key,
  payloads ``<escaped key>.<payload>``.
* ``structured_recursive``: dict and list rows split into nodes and leaves
  (`mooncake._dataproto_structure`); only when a `FieldSchema` asks for it.

``nulls`` (uint8, 1 = None) is present only when a row is None.
"""

from __future__ import annotations

import io
import json
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mooncake import _msgpack
from mooncake._dataproto_structure import decode_structured, encode_structured
from mooncake._dataproto_types import MISSING, _is_null, _Missing  # noqa: F401  (re-exported)

SECTIONS = ("batch", "non_tensor_batch", "meta_info")


@dataclass(frozen=True)
class FieldSchema:
    """How one field is stored: its codec, whether rows may be None, and metadata
    (``section``: batch|non_tensor_batch|meta_info; ``dtype``: a numeric numpy dtype)."""

    codec: str
    nullable: bool = True
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        section = self.metadata.get("section")
        if section is not None and section not in SECTIONS:
            raise ValueError(f"FieldSchema section must be one of {SECTIONS}, not {section!r}")
        dtype = self.metadata.get("dtype")
        if dtype is not None:
            try:
                dt = np.dtype(dtype)
            except TypeError as e:
                raise ValueError(f"FieldSchema dtype {dtype!r} is not a numpy dtype") from e
            if dt.kind not in "biuf":
                raise ValueError(f"FieldSchema dtype {dtype!r} is not numeric or bool")


@dataclass(frozen=True)
class _CodecDecision:
    """What `_choose_leaf_codec` found: the codec (a fallback when not accepted) and why."""

    accepted: bool
    codec: str
    reason: str
    normalized_type: str | None = None
    metadata: dict = field(default_factory=dict)


def _is_tensor(v: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _is_image(v: Any) -> bool:
    import sys

    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(v, image.Image)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_, numbers.Integral, numbers.Real)) and not isinstance(
        v, (str, bytes)
    )


def _numeric_list(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biuf"
    if isinstance(v, (list, tuple)):
        return all(_is_scalar(x) or _numeric_list(x) for x in v)
    return False


def _choose_leaf_codec(values: Any) -> _CodecDecision:
    """The codec for a column of row values (nulls ignored)."""
    rows = [v for v in values if not _is_null(v)]
    if not rows:
        return _CodecDecision(False, "msgpack_ragged", "all values are null or empty")
    if all(_is_tensor(v) for v in rows):
        dtypes = {v.dtype for v in rows}
        if len(dtypes) > 1:
            return _CodecDecision(False, "ragged_tensor", "tensors of mixed dtypes")
        return _CodecDecision(True, "ragged_tensor", "tensors", "tensor", {"dtype": str(*dtypes)})
    if all(isinstance(v, (list, tuple)) and all(_is_image(x) for x in v) for v in rows) and any(
        rows
    ):
        return _CodecDecision(True, "media_list_ragged", "lists of images", "list")
    if all(isinstance(v, np.ndarray) for v in rows):
        if all(v.dtype.kind in "biuf" for v in rows):
            return _CodecDecision(True, "typed_ragged", "numeric ndarrays", "ndarray")
        return _CodecDecision(False, "msgpack_ragged", "ndarrays that are not numeric")
    if all(isinstance(v, (list, tuple)) for v in rows) and all(_numeric_list(v) for v in rows):
        return _CodecDecision(True, "typed_ragged", "numeric lists", "list")
    if all(_is_scalar(v) for v in rows):
        return _CodecDecision(True, "ndarray", "numeric scalars", "scalar")
    if all(isinstance(v, (bytes, bytearray, memoryview)) for v in rows):
        return _CodecDecision(True, "bytes_ragged", "bytes", "bytes")
    if all(_is_image(v) for v in rows):
        return _CodecDecision(True, "media_bytes", "images", "image")
    if all(isinstance(v, str) for v in rows):
        return _CodecDecision(True, "utf8_ragged", "strings", "str")
    if all(isinstance(v, (dict, list, tuple)) for v in rows):
        return _CodecDecision(True, "msgpack_ragged", "dicts and lists", "object")
    return _CodecDecision(False, "msgpack_ragged", "values of mixed or unsupported types")


def _escape_key(key: str) -> str:
    """A dict key made safe inside a dotted member name (escapes ``\\``, ``.``, ``[``)."""
    return key.replace("\\", "\\\\").replace(".", "\\.").replace("[", "\\[")


# -- codecs -------------------------------------------------------------------------


def _nulls(values: list, nullable: bool, name: str) -> np.ndarray | None:
    mask = np.array([_is_null(v) for v in values], dtype=np.uint8)
    if not mask.any():
        return None
    if not nullable:
        raise ValueError(f"non-tensor field {name!r} is not nullable but has None rows")
    return mask


def _ragged_bytes(blobs: list[bytes | None]) -> dict[str, np.ndarray]:
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([0 if b is None else len(b) for b in blobs])
    data = np.frombuffer(b"".join(b for b in blobs if b is not None), dtype=np.uint8)
    return {"data": data, "offsets": offsets}


def _split_bytes(payloads: dict[str, np.ndarray]) -> list[bytes]:
    data, offsets = payloads["data"], payloads["offsets"]
    raw = data.tobytes()
    return [raw[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _png(image: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _from_png(raw: bytes) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(raw))
    image.load()
    return image


_BYTE_CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "bytes_ragged": (bytes, bytes),
    "utf8_ragged": (lambda v: v.encode("utf-8"), lambda b: b.decode("utf-8")),
    "msgpack_ragged": (_msgpack.packb, _msgpack.unpackb),
    "json_ragged": (
        lambda v: json.dumps(v, separators=(",", ":")).encode("utf-8"),
        lambda b: json.loads(b.decode("utf-8")),
    ),
    "media_bytes": (_png, _from_png),
}


def _encode_typed(values: list, dtype: Any, as_tensor: bool) -> dict[str, np.ndarray]:
    arrays = []
    for v in values:
        if _is_null(v):
            arrays.append(np.zeros(0, dtype=dtype or np.int64))
        elif as_tensor:
            arrays.append(v.detach().cpu().contiguous().numpy())
        else:
            arrays.append(np.asarray(v) if dtype is None else np.asarray(v, dtype=dtype))
    if dtype is None:
        present = [a for v, a in zip(values, arrays, strict=True) if not _is_null(v)]
        dtype = np.result_type(*present) if present else np.int64
    flat = [np.ascontiguousarray(a, dtype=dtype).reshape(-1) for a in arrays]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([a.size for a in flat])
    return {
        "data": np.concatenate(flat) if flat else np.zeros(0, dtype=dtype),
        "offsets": offsets,
        "shapes": np.array([d for a in arrays for d in a.shape], dtype=np.int64),
        "ndims": np.array([a.ndim for a in arrays], dtype=np.int64),
    }


def _decode_typed(payloads: dict[str, np.ndarray]) -> list[np.ndarray]:
    data, offsets = payloads["data"], payloads["offsets"]
    shapes, ndims = payloads["shapes"], payloads["ndims"]
    rows, pos = [], 0
    for i in range(len(ndims)):
        shape = tuple(int(d) for d in shapes[pos : pos + ndims[i]])
        pos += int(ndims[i])
        rows.append(np.array(data[offsets[i] : offsets[i + 1]]).reshape(shape))
    return rows


def encode_column(
    name: str, values: list, schema: FieldSchema | None
) -> tuple[dict, dict[str, np.ndarray]]:
    """(description, payload arrays) of a non-tensor column; ValueError/TypeError if the
    rows do not fit the codec."""
    nullable = True if schema is None else schema.nullable
    dtype = None if schema is None else schema.metadata.get("dtype")
    if schema is not None:
        codec, normalized = schema.codec, None
    else:
        decision = _choose_leaf_codec(values)
        codec, normalized = decision.codec, decision.normalized_type
    nulls = _nulls(values, nullable, name)
    desc: dict[str, Any] = {"codec": codec}
    if codec == "ndarray":
        filled = [0 if _is_null(v) else v for v in values]
        data = np.asarray(filled, dtype=dtype)
        if data.dtype.kind not in "biuf" or data.ndim != 1:
            raise TypeError(f"non-tensor field {name!r}: the ndarray codec takes numeric scalars")
        payloads = {"data": data}
    elif codec in ("typed_ragged", "ragged_tensor"):
        as_tensor = codec == "ragged_tensor"
        rows = [v for v in values if not _is_null(v)]
        if as_tensor:
            if not all(_is_tensor(v) for v in rows):
                raise TypeError(f"non-tensor field {name!r}: ragged_tensor takes tensors")
            if any(str(v.dtype) == "torch.bfloat16" for v in rows):
                raise TypeError(f"non-tensor field {name!r}: bfloat16 rows are not supported")
            desc["dtype"] = str(rows[0].dtype) if rows else "torch.int64"
        elif not all(_numeric_list(v) for v in rows):
            raise TypeError(f"non-tensor field {name!r}: typed_ragged takes numeric rows")
        else:
            desc["normalized_type"] = normalized or (
                "ndarray" if rows and isinstance(rows[0], np.ndarray) else "list"
            )
        payloads = _encode_typed(values, dtype, as_tensor)
    elif codec in _BYTE_CODECS:
        enc = _BYTE_CODECS[codec][0]
        try:
            blobs = [None if _is_null(v) else enc(v) for v in values]
        except (TypeError, AttributeError, ValueError) as e:
            raise TypeError(f"non-tensor field {name!r} cannot be encoded as {codec}: {e}") from e
        payloads = _ragged_bytes(blobs)
    elif codec == "media_list_ragged":
        images = [[] if _is_null(v) else list(v) for v in values]
        if not all(_is_image(x) for row in images for x in row):
            raise TypeError(f"non-tensor field {name!r}: media_list_ragged takes image lists")
        payloads = _ragged_bytes([_png(x) for row in images for x in row])
        payloads["lengths"] = np.array([len(row) for row in images], dtype=np.int64)
    elif codec == "ragged_tensor_dict":
        rows = [v for v in values if not _is_null(v)]
        if not all(isinstance(v, dict) and all(_is_tensor(t) for t in v.values()) for v in rows):
            raise TypeError(f"non-tensor field {name!r}: ragged_tensor_dict takes tensor dicts")
        keys = list(dict.fromkeys(k for v in rows for k in v))
        if any(set(v) != set(keys) for v in rows):
            raise ValueError(f"non-tensor field {name!r}: rows must share the same keys")
        desc["keys"], desc["columns"], payloads = keys, {}, {}
        for k in keys:
            column = [None if _is_null(v) else v[k] for v in values]
            sub, parts = encode_column(f"{name}.{k}", column, FieldSchema("ragged_tensor"))
            desc["columns"][k] = sub
            payloads.update({f"{_escape_key(k)}.{p}": a for p, a in parts.items()})
    elif codec == "structured_recursive":
        extra, payloads = encode_structured(values, lambda n, v: encode_column(n, v, None))
        desc.update(extra)
        nulls = None  # None rows are the root node's row_mask
    else:
        raise ValueError(f"unknown non-tensor codec {codec!r} for field {name!r}")
    if nulls is not None:
        payloads["nulls"] = nulls
    desc["payloads"] = list(payloads)
    return desc, payloads


def decode_column(desc: dict, payloads: dict[str, np.ndarray], n: int) -> list:
    """The rows of a column from its description and payload arrays."""
    codec = desc.get("codec")
    if codec == "ndarray":
        rows = payloads["data"].tolist()
    elif codec == "typed_ragged":
        rows = _decode_typed(payloads)
        if desc.get("normalized_type") == "list":
            rows = [r.tolist() for r in rows]
    elif codec == "ragged_tensor":
        import torch

        rows = [torch.from_numpy(r) for r in _decode_typed(payloads)]
    elif codec in _BYTE_CODECS:
        dec = _BYTE_CODECS[codec][1]
        nulls = payloads.get("nulls")
        rows = [
            None if nulls is not None and nulls[i] else dec(b)
            for i, b in enumerate(_split_bytes(payloads))
        ]
    elif codec == "media_list_ragged":
        images = [_from_png(b) for b in _split_bytes(payloads)]
        rows, pos = [], 0
        for length in payloads["lengths"].tolist():
            rows.append(images[pos : pos + length])
            pos += length
    elif codec == "ragged_tensor_dict":
        columns = {
            k: decode_column(
                sub,
                {p: payloads[f"{_escape_key(k)}.{p}"] for p in sub["payloads"]},
                n,
            )
            for k, sub in desc["columns"].items()
        }
        rows = [{k: columns[k][i] for k in desc["keys"]} for i in range(n)]
    elif codec == "structured_recursive":
        rows = decode_structured(desc, payloads, n, decode_column)
    else:
        raise ValueError(f"unknown non-tensor codec {codec!r}")
    if len(rows) != n:
        raise ValueError(f"{codec} column holds {len(rows)} rows, not {n}")
    nulls = payloads.get("nulls")
    if nulls is not None:
        rows = [None if nulls[i] else r for i, r in enumerate(rows)]
    return rows


def object_array(rows: list) -> np.ndarray:
    """Rows as a 1-D object ndarray (no broadcasting of nested lists)."""
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        out[i] = r
    return out
