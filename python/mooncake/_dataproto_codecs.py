"""Codecs for the non-tensor fields of a DataProto (object ndarrays of rows).

A codec turns a field's rows into named payloads, each stored as one member
``non_tensor_batch.<field>.<payload>``, and JSON metadata; the DataProto ref
keeps, per encoded field, ``{"codec", "rows", "metadata", "payload_members":
{payload: member}}``. Codec names and payload layouts are upstream's:

* ``ndarray``: numeric scalars; ``data`` (one element per row), ``nulls``.
* ``typed_ragged``: lists or ndarrays of any non-object dtype (numbers, bytes,
  text); ``data`` (every element, in
  row order), ``offsets`` (int64, rows+1, in elements), ``shapes`` (int64,
  rows x max(max_ndim, 1)), ``ndims`` (int16), ``nulls``; metadata
  ``dtype``, ``max_ndim``, ``row_format`` (ndarray | list | mixed).
* ``ragged_tensor``: torch tensors, as ``typed_ragged`` (metadata ``dtype``
  is the torch dtype; bfloat16 is refused).
* ``bytes_ragged``, ``utf8_ragged``, ``json_ragged``, ``msgpack_ragged``,
  ``media_bytes`` (PIL images as PNG): one byte string per row; ``data``,
  ``offsets`` (int64, rows+1, in bytes), ``nulls``.
* ``media_list_ragged``: lists of images or byte strings; ``data``,
  ``row_offsets`` (items), ``byte_offsets`` (bytes), ``nulls``.
* ``ragged_tensor_dict``: dicts of tensors; ``null_mask`` and one
  ``ragged_tensor`` per key (``<key>.<payload>``); keys may differ by row.
* ``structured_recursive``: dict and list rows split into nodes and leaves
  (`mooncake._dataproto_structure`).

``nulls`` is bool, True where the row is None. Without a schema (or with
codec ``auto``) a column is encoded by inference: the structured codec when
its rows nest and some leaf holds tensors, ndarrays, bytes or media; else the
codec `_choose_leaf_codec` picks, then ``msgpack_ragged``, then
``json_ragged``. A schema's codec that cannot encode the rows falls back to
inference the same way.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mooncake import _msgpack
from mooncake._dataproto_leaf import (  # noqa: F401  (re-exported)
    _choose_leaf_codec,
    _CodecDecision,
    _escape_key,
    _is_bytes_like,
    _is_image,
    _is_tensor,
)
from mooncake._dataproto_structure import decode_structured, encode_structured
from mooncake._dataproto_types import MISSING, _is_null, _Missing  # noqa: F401  (re-exported)
from mooncake._structured_types import _array_view, _DirectCopyPayload, _MultiBufferPayload

SECTIONS = ("batch", "non_tensor_batch", "meta_info")
TYPED_RAGGED_DEFAULT_DTYPE = "float64"
RAGGED_TENSOR_DEFAULT_DTYPE = "torch.float32"
CODECS = (
    "auto",
    "ndarray",
    "typed_ragged",
    "ragged_tensor",
    "bytes_ragged",
    "utf8_ragged",
    "json_ragged",
    "msgpack_ragged",
    "media_bytes",
    "media_list_ragged",
    "ragged_tensor_dict",
    "structured_recursive",
)
# What a codec that cannot take a column raises; inference is tried next.
_FALLBACK_ERRORS = (TypeError, ValueError, AttributeError, OverflowError)


@dataclass(frozen=True)
class FieldSchema:
    """How one field is stored: its codec, whether rows may be None, and metadata
    (``section``: batch|non_tensor_batch|meta_info; ``dtype``: a numeric numpy dtype;
    ``keys`` for ``ragged_tensor_dict``). The metadata is checked where the schema
    is used (ValueError)."""

    codec: str
    nullable: bool = True
    metadata: dict = field(default_factory=dict)


def schema_section(name: str, schema: FieldSchema) -> str | None:
    """The section a schema declares for field `name` (None: not declared)."""
    section = schema.metadata.get("section")
    if section is not None and section not in SECTIONS:
        raise ValueError(
            f"FieldSchema for {name!r} metadata['section'] must be one of {sorted(SECTIONS)}"
        )
    return section


def schema_dtype(name: str, schema: FieldSchema) -> np.dtype | None:
    """The numeric numpy dtype a schema declares (None: not declared)."""
    dtype = schema.metadata.get("dtype")
    if dtype is None:
        return None
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"FieldSchema for {name!r}: {dtype!r} is not a numpy dtype") from e
    if dt.kind not in "biuf":
        raise ValueError(f"FieldSchema for {name!r}: dtype {dtype!r} is not numeric or bool")
    return dt


@dataclass
class _EncodedStructuredLeaf:
    """An encoded column: its codec, row count, payloads and metadata."""

    codec: str
    rows: int
    payload: dict
    metadata: dict


def _fast_concat() -> Any:
    """The native array-concatenation copy, as `mooncake.structured_object_store`
    exposes it (``_concat_arrays_into``; None there forces plain multi-buffer payloads)."""
    sos = sys.modules.get("mooncake.structured_object_store")
    if sos is not None:
        return getattr(sos, "_concat_arrays_into", None)
    from mooncake._fast_copy import concat_arrays_into

    return concat_arrays_into


def _nulls(values: list) -> np.ndarray:
    return np.array([_is_null(v) for v in values], dtype=np.bool_)


# -- numeric ----------------------------------------------------------------------


def _encode_numeric_scalar_values(values: list, dtype: Any) -> tuple[dict, dict]:
    dt = np.dtype(dtype)
    fill = False if dt == np.bool_ else 0
    data = np.asarray([fill if _is_null(v) else v for v in values], dtype=dt)
    if data.ndim != 1:
        raise TypeError("the ndarray codec takes one numeric scalar per row")
    return {"data": data, "nulls": _nulls(values)}, {"dtype": str(data.dtype)}


def _typed_meta(dtype: np.dtype, max_ndim: int, row_format: str, ndarray_rows=None) -> dict:
    return {
        "dtype": str(dtype),
        "max_ndim": int(max_ndim),
        "shape_policy": "ragged",
        "row_format": row_format,
        "ndarray_rows": ndarray_rows,
    }


def _encode_typed_ragged_regular_ndarray_rows(values: list, dtype: Any) -> tuple[dict, dict] | None:
    """The typed_ragged payloads of two or more C-contiguous ndarray rows of one
    shape and of `dtype`, as one contiguous array; None for any other rows."""
    dt = np.dtype(dtype)
    if len(values) < 2:
        return None
    first = values[0]
    if not (isinstance(first, np.ndarray) and first.dtype == dt and first.flags.c_contiguous):
        return None
    for v in values[1:]:
        if not (
            isinstance(v, np.ndarray)
            and v.dtype == dt
            and v.flags.c_contiguous
            and v.shape == first.shape
        ):
            return None
    n, ndim = len(values), first.ndim
    shapes = np.zeros((n, max(ndim, 1)), dtype=np.int64)
    if ndim:
        shapes[:] = first.shape
    flat = [v.reshape(-1) for v in values]
    total = n * first.size
    data: Any
    if not first.size:
        data = np.zeros(0, dtype=dt)
    elif _fast_concat() is not None:  # copied straight into the pool lease at put time
        data = _DirectCopyPayload.from_flat_arrays(flat, dt, total)
    else:
        data = _MultiBufferPayload(
            buffers=tuple(_array_view(a) for a in flat),
            owners=tuple(flat),
            dtype=dt.str,
            shape=(total,),
        )
    payload = {
        "data": data,
        "offsets": np.arange(n + 1, dtype=np.int64) * first.size,
        "shapes": shapes,
        "ndims": np.full(n, ndim, dtype=np.int16),
        "nulls": np.zeros(n, dtype=np.bool_),
    }
    meta = _typed_meta(dt, ndim, "ndarray")
    meta["physical_layout"] = "contiguous_flat"
    return payload, meta


def _contiguous_keep_ndim(value: Any, dtype: np.dtype) -> np.ndarray:
    """`value` as a C-contiguous array of `dtype`, a 0-dim one staying 0-dim
    (np.ascontiguousarray makes scalars 1-dim)."""
    arr = np.asarray(value, dtype=dtype)
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


def _encode_typed_ragged_values(values: list, dtype_hint: Any = None) -> tuple[dict, dict]:
    """The typed_ragged payloads and metadata of numeric rows (None rows allowed)."""
    if dtype_hint is None:
        present = [np.asarray(v) for v in values if not _is_null(v)]
        dtype = np.result_type(*present) if present else np.dtype(TYPED_RAGGED_DEFAULT_DTYPE)
    else:
        dtype = np.dtype(dtype_hint)
    if dtype.hasobject:  # any fixed-size dtype: numbers, bools, bytes (S, c), text (U)
        raise ValueError("typed_ragged codec requires non-object dtype")
    regular = _encode_typed_ragged_regular_ndarray_rows(values, dtype)
    if regular is not None:
        return regular
    arrays = [
        np.zeros(0, dtype=dtype) if _is_null(v) else _contiguous_keep_ndim(v, dtype) for v in values
    ]
    n = len(values)
    max_ndim = max(
        (a.ndim for a, v in zip(arrays, values, strict=True) if not _is_null(v)), default=0
    )
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([a.size for a in arrays])
    shapes = np.zeros((n, max(max_ndim, 1)), dtype=np.int64)
    ndims = np.zeros(n, dtype=np.int16)
    for i, (a, v) in enumerate(zip(arrays, values, strict=True)):
        if not _is_null(v):
            ndims[i] = a.ndim
            shapes[i, : a.ndim] = a.shape
    flat = [a.reshape(-1) for a in arrays if a.size]
    total = int(offsets[-1])
    concat = _fast_concat()
    if not flat:  # no elements: an empty multi-buffer payload, as upstream's
        empty = np.zeros(0, dtype=dtype)
        data: Any = _MultiBufferPayload(
            buffers=(_array_view(empty),), owners=(empty,), dtype=dtype.str, shape=(0,)
        )
    elif len(flat) > 1 and concat is not None:
        data = _DirectCopyPayload.from_flat_arrays(flat, dtype, total)
    else:
        data = _MultiBufferPayload(
            buffers=tuple(_array_view(a) for a in flat),
            owners=tuple(flat),
            dtype=dtype.str,
            shape=(total,),
        )
    is_array = [isinstance(v, np.ndarray) for v in values if not _is_null(v)]
    row_format = "ndarray" if all(is_array) else ("mixed" if any(is_array) else "list")
    ndarray_rows = [isinstance(v, np.ndarray) for v in values] if row_format == "mixed" else None
    payload = {
        "data": data,
        "offsets": offsets,
        "shapes": shapes,
        "ndims": ndims,
        "nulls": _nulls(values),
    }
    meta = _typed_meta(dtype, max_ndim, row_format, ndarray_rows)
    if row_format == "ndarray" and n:
        # ndarray rows (None rows too) are one flat run of elements, as upstream marks them
        meta["physical_layout"] = "contiguous_flat"
    return payload, meta


def _decode_typed_ragged_values(payload: dict, n: int, metadata: dict | None = None) -> list:
    """The `n` rows of a typed_ragged payload. `payload["data"]` may be an
    ndarray, bytes-like or a CPU torch tensor; without `metadata` the rows
    are float32 ndarrays (the codec's default dtype). ndarray rows are views
    of the data (no copy), so the data must outlive them."""
    metadata = metadata or {}
    dtype = np.dtype(metadata.get("dtype", TYPED_RAGGED_DEFAULT_DTYPE))
    data = _as_array(_tensor_to_numpy(payload["data"]), dtype)
    offsets, shapes, ndims, nulls = (payload[k] for k in ("offsets", "shapes", "ndims", "nulls"))
    row_format = metadata.get("row_format", "ndarray")
    as_array = metadata.get("ndarray_rows") or []
    rows = []
    for i in range(n):
        if nulls[i]:
            rows.append(None)
            continue
        shape = tuple(int(d) for d in shapes[i, : int(ndims[i])])
        row = data[int(offsets[i]) : int(offsets[i + 1])].reshape(shape)  # a view
        keep = row_format == "ndarray" or (row_format == "mixed" and as_array[i])
        rows.append(row if keep else row.tolist())
    return rows


def _tensor_to_numpy(raw: Any) -> Any:
    """A torch tensor's CPU ndarray (without importing torch); anything else as is."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(raw, torch.Tensor):
        return raw.detach().cpu().contiguous().numpy()
    return raw


def _as_array(raw: Any, dtype: np.dtype) -> np.ndarray:
    if isinstance(raw, np.ndarray):
        if raw.dtype == dtype:
            return raw
        raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(raw).cast("B"), dtype=dtype)


def _torch_numpy_dtype(name: str) -> np.dtype:
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown torch dtype: {name}")
    if dtype == torch.bfloat16:
        raise ValueError("bfloat16 rows are not supported by ragged_tensor")
    return torch.empty(0, dtype=dtype).numpy().dtype


def _encode_ragged_tensor_values(values: list) -> tuple[dict, dict]:
    import torch

    rows, dtype = [], None
    for v in values:
        if _is_null(v):
            rows.append(None)
            continue
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                raise ValueError("ragged tensor codec requires numeric ndarray rows")
            v = torch.as_tensor(np.array(v))
        elif not _is_tensor(v):
            raise TypeError("ragged_tensor codec takes tensors")
        if dtype is None:
            dtype = v.dtype
        elif v.dtype != dtype:
            raise ValueError(f"mixed tensor dtype: {dtype} vs {v.dtype}")
        rows.append(v)
    name = RAGGED_TENSOR_DEFAULT_DTYPE if dtype is None else str(dtype)
    np_dtype = _torch_numpy_dtype(name)
    arrays = [None if r is None else r.detach().cpu().contiguous().numpy() for r in rows]
    payload, meta = _encode_typed_ragged_values(arrays, np_dtype)
    meta["dtype"] = name
    return payload, meta


def _decode_ragged_tensor_values(payload: dict, n: int, metadata: dict) -> list:
    import torch

    name = metadata.get("dtype", RAGGED_TENSOR_DEFAULT_DTYPE)
    arrays = _decode_typed_ragged_values(
        payload, n, {**metadata, "dtype": str(_torch_numpy_dtype(name)), "row_format": "ndarray"}
    )
    return [None if a is None else torch.from_numpy(a) for a in arrays]


def _ragged_tensor_dict_keys(keys: Any) -> list[str]:
    """`keys` (a sequence, or a mapping's keys) checked as ragged_tensor_dict keys: each
    a non-empty string without '.', '/' or a backslash (each key names its payloads)."""
    out: list[str] = []
    for k in keys.keys() if isinstance(keys, Mapping) else keys:
        if not isinstance(k, str):
            raise TypeError(f"ragged_tensor_dict keys must be strings, not {type(k).__name__}")
        if not k:
            raise ValueError("ragged_tensor_dict keys must not be empty")
        if any(c in k for c in "./\\"):
            raise ValueError(
                f"ragged_tensor_dict keys must not contain '.', '/' or a backslash: {k!r}"
            )
        if k in out:
            raise ValueError(f"ragged_tensor_dict key {k!r} appears twice")
        out.append(k)
    return out


def _encode_ragged_tensor_dict_values(values: list, keys: Any = None) -> tuple[dict, dict]:
    """Rows that are dicts of tensors (or None), one ragged_tensor column per key.
    `keys` (FieldSchema metadata['keys']) declares the keys; without it they are the
    union of the rows' keys. A row holds a subset of the keys, never an explicit None."""
    declared = None if keys is None else _ragged_tensor_dict_keys(keys)
    seen: set[str] = set()
    for i, v in enumerate(values):
        if _is_null(v):
            continue
        if not isinstance(v, Mapping):
            raise TypeError(
                f"ragged_tensor_dict rows are mappings or None; row {i} is {type(v).__name__}"
            )
        nones = sorted(k for k, x in v.items() if x is None)
        if nones:
            raise TypeError(
                f"ragged_tensor_dict row {i} holds an explicit None for {nones}; "
                "leave the key out instead"
            )
        row_keys = _ragged_tensor_dict_keys(list(v))
        if declared is not None:
            extra = sorted(set(row_keys) - set(declared))
            if extra:
                raise ValueError(
                    f"ragged_tensor_dict row {i} has keys not declared in "
                    f"FieldSchema metadata['keys']: {extra}"
                )
        seen.update(row_keys)
    names = declared if declared is not None else sorted(seen)
    payload: dict[str, Any] = {"null_mask": _nulls(values)}
    key_codecs = {}
    for k in names:
        column = [None if _is_null(v) else v.get(k) for v in values]
        try:
            parts, meta = _encode_ragged_tensor_values(column)
        except _FALLBACK_ERRORS as e:
            raise ValueError(f"ragged_tensor_dict key {k!r} cannot be encoded: {e}") from e
        payload.update({f"{k}.{p}": a for p, a in parts.items()})
        key_codecs[k] = meta
    return payload, {"keys": list(names), "key_codecs": key_codecs}


def _decode_ragged_tensor_dict_values(payload: dict, n: int, metadata: dict) -> list:
    """Rows of dicts of tensors: a row that is not None holds the keys it was stored
    with (possibly none: an empty dict)."""
    columns = {}
    for k in metadata.get("keys", []):
        prefix = f"{k}."
        parts = {p[len(prefix) :]: a for p, a in payload.items() if p.startswith(prefix)}
        columns[k] = _decode_ragged_tensor_values(parts, n, metadata["key_codecs"][k])
    rows: list = []
    for i in range(n):
        if payload["null_mask"][i]:
            rows.append(None)
        else:
            rows.append({k: c[i] for k, c in columns.items() if c[i] is not None})
    return rows


# -- byte strings -----------------------------------------------------------------


def _png(image: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _from_png(raw: bytes) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(raw))
    image.load()
    return image


def _media_bytes(v: Any) -> tuple[bytes | memoryview, str]:
    """The stored bytes of one media item and their kind (png | bytes)."""
    if _is_image(v):
        return _png(v), "png"
    if _is_bytes_like(v):
        return memoryview(v).cast("B"), "bytes"
    raise TypeError(f"media values are images or bytes, not {type(v).__name__}")


def _bytes_payload(blobs: list) -> Any:
    parts = [memoryview(b).cast("B") for b in blobs if b is not None and len(b)]
    return _MultiBufferPayload(buffers=tuple(parts), owners=tuple(parts))


def _offsets(blobs: list) -> np.ndarray:
    out = np.zeros(len(blobs) + 1, dtype=np.int64)
    out[1:] = np.cumsum([0 if b is None else len(b) for b in blobs])
    return out


def _encode_bytes_like_values(blobs: list) -> tuple[dict, dict]:
    """Rows already turned into bytes-like values (None rows allowed)."""
    for b in blobs:
        if b is not None and not _is_bytes_like(b):
            raise TypeError(f"bytes codecs take bytes-like rows, not {type(b).__name__}")
    return {"data": _bytes_payload(blobs), "offsets": _offsets(blobs), "nulls": _nulls(blobs)}, {}


def _encode_msgpack_ragged_values(path: str, values: list) -> tuple[dict, dict]:
    """One MessagePack document per row; ValueError for a value it cannot encode."""
    blobs = []
    try:
        for v in values:
            blobs.append(None if v is None else _msgpack.packb(v))
    except TypeError as e:
        raise ValueError(
            f"unsupported structured non-tensor field {path}: msgpack codec cannot encode value"
        ) from e
    data = bytearray().join(b for b in blobs if b is not None)
    return {"data": data, "offsets": _offsets(blobs), "nulls": _nulls(blobs)}, {}


def _decode_msgpack_ragged_values(payload: dict, n: int) -> list:
    """The `n` rows of a msgpack_ragged payload (None rows as None); ValueError when
    its offsets or nulls do not hold `n` rows."""
    offsets, nulls = payload["offsets"], payload["nulls"]
    if len(offsets) != n + 1:
        raise ValueError(f"msgpack_ragged offsets length {len(offsets)} does not fit {n} rows")
    if len(nulls) != n:
        raise ValueError(f"msgpack_ragged nulls length {len(nulls)} does not fit {n} rows")
    return [
        None if nulls[i] else _msgpack.unpackb(blob)
        for i, blob in enumerate(_split_rows(payload, n))
    ]


def _split_rows(payload: dict, n: int, offsets_key: str = "offsets") -> list:
    raw = bytes(memoryview(payload["data"]).cast("B")) if len(payload["data"]) else b""
    offsets = payload[offsets_key]
    return [raw[int(offsets[i]) : int(offsets[i + 1])] for i in range(n)]


def _encode_media_list_values(values: list) -> tuple[dict, dict]:
    items, kinds, row_offsets = [], [], [0]
    for v in values:
        row = [] if _is_null(v) else list(v)
        for x in row:
            blob, kind = _media_bytes(x)
            items.append(blob)
            kinds.append(kind)
        row_offsets.append(row_offsets[-1] + len(row))
    payload = {
        "data": _bytes_payload(items),
        "row_offsets": np.asarray(row_offsets, dtype=np.int64),
        "byte_offsets": _offsets(items),
        "nulls": _nulls(values),
    }
    return payload, {"media_encodings": kinds}


def _decode_media_list_values(payload: dict, n: int, metadata: dict) -> list:
    kinds = metadata.get("media_encodings", [])
    items = _split_rows(payload, len(kinds), "byte_offsets")
    decoded = [_from_png(b) if k == "png" else b for b, k in zip(items, kinds, strict=True)]
    ro = payload["row_offsets"]
    return [None if payload["nulls"][i] else decoded[int(ro[i]) : int(ro[i + 1])] for i in range(n)]


# -- dispatch -----------------------------------------------------------------------


def _normalize_plain(v: Any) -> Any:
    """numpy scalars and arrays as Python values (for msgpack and JSON)."""
    if isinstance(v, np.ndarray):
        return _normalize_plain(v.tolist())
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, dict):
        return {k: _normalize_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_normalize_plain(x) for x in v]
    return v


def _encode_codec(path: str, values: list, codec: str, metadata: dict) -> _EncodedStructuredLeaf:
    """`values` (None where absent) in `codec`; TypeError/ValueError if they do not fit."""
    dtype = metadata.get("dtype")
    if codec == "ndarray":
        if dtype is None:
            rows = [v for v in values if not _is_null(v)]
            dtype = np.result_type(*rows) if rows else np.float64
        payload, meta = _encode_numeric_scalar_values(values, dtype)
    elif codec == "typed_ragged":
        payload, meta = _encode_typed_ragged_values(values, dtype)
    elif codec == "ragged_tensor":
        payload, meta = _encode_ragged_tensor_values(values)
    elif codec == "ragged_tensor_dict":
        payload, meta = _encode_ragged_tensor_dict_values(values, metadata.get("keys"))
    elif codec == "bytes_ragged":
        payload, meta = _encode_bytes_like_values(values)
    elif codec == "media_bytes":
        blobs, kinds = [], []
        for v in values:
            blob, kind = (None, "null") if v is None else _media_bytes(v)
            blobs.append(blob)
            kinds.append(kind)
        payload, meta = _encode_bytes_like_values(blobs)
        meta = {"media_encodings": kinds}
    elif codec == "media_list_ragged":
        payload, meta = _encode_media_list_values(values)
    elif codec == "utf8_ragged":
        payload, meta = _encode_bytes_like_values(
            [None if v is None else v.encode("utf-8") for v in values]
        )
    elif codec == "json_ragged":
        payload, meta = _encode_bytes_like_values(
            [
                None
                if v is None
                else json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                for v in values
            ]
        )
    elif codec == "msgpack_ragged":
        payload, meta = _encode_msgpack_ragged_values(path, values)
    else:
        raise ValueError(f"unknown non-tensor codec {codec!r} for field {path!r}")
    return _EncodedStructuredLeaf(codec, len(values), payload, meta)


_SPECIAL_LEAF_CODECS = ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged")


def _special_leaf(leaf: Any) -> bool:
    d = leaf.decision
    return d.codec in _SPECIAL_LEAF_CODECS or (
        d.codec == "typed_ragged" and d.metadata.get("recursive_source") == "ndarray"
    )


def _leaf_values(leaf: Any) -> list:
    return [None if isinstance(v, _Missing) else v for v in leaf.values]


def _encode_recursive(path: str, values: list, forced: bool) -> _EncodedStructuredLeaf | None:
    """The structured codec's encoding; None (when not `forced`) for rows that do not
    nest or whose leaves are all plain values (msgpack keeps those whole)."""
    from mooncake._dataproto_structure import _InferredLeaf, _InferredNode, infer_structure

    leaves: list[_InferredLeaf] = []
    nodes: list[_InferredNode] = []
    infer_structure(path, list(values), leaves, nodes)
    if not forced and (not nodes or not any(_special_leaf(leaf) for leaf in leaves)):
        return None

    def encode_leaf(leaf: Any) -> tuple:
        vals = _leaf_values(leaf)
        d = leaf.decision
        if forced:
            enc = _encode_inferred(leaf.path, vals, allow_recursive=False)
        else:
            codec = d.codec
            if not d.accepted and all(v is None for v in vals):
                codec = "json_ragged"
            if codec in ("msgpack_ragged", "json_ragged"):
                vals = [_normalize_plain(v) for v in vals]
            enc = _encode_codec(leaf.path, vals, codec, dict(d.metadata))
        return enc.codec, enc.rows, enc.metadata, enc.payload

    metadata, payload = encode_structured(path, list(values), encode_leaf, (leaves, nodes))
    return _EncodedStructuredLeaf("structured_recursive", len(values), payload, metadata)


def _encode_inferred(
    path: str, values: list, allow_recursive: bool = True
) -> _EncodedStructuredLeaf:
    """Encode by inference: structured, the chosen codec, msgpack, JSON (first that fits)."""
    errors = []
    if allow_recursive:
        try:
            got = _encode_recursive(path, values, forced=False)
            if got is not None:
                return got
        except _FALLBACK_ERRORS as e:
            errors.append(f"structured_recursive: {e}")
    decision = _choose_leaf_codec(values)
    codecs = list(dict.fromkeys([decision.codec, "msgpack_ragged", "json_ragged"]))
    for codec in codecs:
        meta = dict(decision.metadata) if codec == decision.codec else {}
        vals = values
        if codec in ("msgpack_ragged", "json_ragged"):
            vals = [_normalize_plain(v) for v in values]
        try:
            return _encode_codec(path, vals, codec, meta)
        except _FALLBACK_ERRORS as e:
            errors.append(f"{codec}: {e}")
    raise ValueError(
        f"unable to infer a safe codec for structured non-tensor field {path!r}; tried {errors}"
    )


def check_nullable(path: str, values: list, schema: FieldSchema) -> None:
    """ValueError when a schema that is not nullable meets None rows."""
    if not schema.nullable and any(_is_null(v) for v in values):
        raise ValueError(f"FieldSchema for {path!r} is not nullable, but rows are None")


def encode_column(path: str, values: list, schema: FieldSchema | None) -> _EncodedStructuredLeaf:
    """A non-tensor column encoded by `schema`'s codec as it stands, with no fallback:
    rows that codec cannot take raise (TypeError, ValueError, AttributeError...).
    Without a schema, with codec ``auto`` and with ``ndarray`` without a dtype the
    codec is inferred (ValueError "unable to infer a safe codec" when nothing fits)."""
    values = list(values)
    if schema is not None:
        check_nullable(path, values, schema)
    if schema is None or schema.codec == "auto":
        return _encode_inferred(path, values)
    if schema.codec not in CODECS:
        raise ValueError(f"unsupported schema codec {schema.codec!r} for field {path!r}")
    meta = dict(schema.metadata)
    dtype = schema_dtype(path, schema)
    if dtype is not None:
        meta["dtype"] = str(dtype)
    elif schema.codec == "ndarray":
        return _encode_inferred(path, values)
    if schema.codec == "structured_recursive":
        return _encode_recursive(path, values, forced=True)  # type: ignore[return-value]
    return _encode_codec(path, values, schema.codec, meta)


def decode_leaf(codec: str, payload: dict, n: int, metadata: dict) -> list:
    """The rows of one encoded column (not the structured codec)."""
    if codec == "ndarray":
        data, nulls = payload["data"], payload["nulls"]
        return [None if nulls[i] else data[i].item() for i in range(n)]
    if codec == "typed_ragged":
        return _decode_typed_ragged_values(payload, n, metadata)
    if codec == "ragged_tensor":
        return _decode_ragged_tensor_values(payload, n, metadata)
    if codec == "ragged_tensor_dict":
        return _decode_ragged_tensor_dict_values(payload, n, metadata)
    if codec == "media_list_ragged":
        return _decode_media_list_values(payload, n, metadata)
    if codec == "msgpack_ragged":
        return _decode_msgpack_ragged_values(payload, n)
    if codec in ("bytes_ragged", "utf8_ragged", "json_ragged", "media_bytes"):
        kinds = metadata.get("media_encodings") or []
        decode = {
            "bytes_ragged": bytes,
            "utf8_ragged": lambda b: b.decode("utf-8"),
            "json_ragged": lambda b: json.loads(b.decode("utf-8")),
            "media_bytes": bytes,
        }[codec]
        rows = []
        for i, blob in enumerate(_split_rows(payload, n)):
            if payload["nulls"][i]:
                rows.append(None)
            elif codec == "media_bytes" and i < len(kinds) and kinds[i] == "png":
                rows.append(_from_png(blob))
            else:
                rows.append(decode(blob))
        return rows
    raise ValueError(f"unknown non-tensor codec {codec!r}")


def decode_column(desc: dict, payloads: dict, n: int) -> list:
    """The rows of a column from its description and payloads (by payload name)."""
    codec = desc.get("codec")
    metadata = desc.get("metadata") or {}
    if codec == "structured_recursive":
        rows = decode_structured(metadata, payloads, n, decode_leaf)
    else:
        rows = decode_leaf(codec, payloads, n, metadata)
    if len(rows) != n:
        raise ValueError(f"{codec} column holds {len(rows)} rows, not {n}")
    return rows


def object_array(rows: list) -> np.ndarray:
    """Rows as a 1-D object ndarray (no broadcasting of nested lists)."""
    out = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        out[i] = r
    return out
