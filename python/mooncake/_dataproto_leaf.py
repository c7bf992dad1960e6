"""Which codec a column of DataProto non-tensor values takes.

`_choose_leaf_codec(values)` looks at a column's non-null values (None and
`MISSING` ignored) and returns a `_CodecDecision`: the codec, whether it is
a safe match (`accepted`), why, the value type it saw and codec metadata
(a numpy ``dtype`` for numeric columns; ``recursive_source: "ndarray"`` for
ndarray rows, which makes the structured codec keep them as arrays). Both
the column codecs (`mooncake._dataproto_codecs`) and the structured codec's
inference (`mooncake._dataproto_structure`) use it; it imports neither.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mooncake._dataproto_types import _is_null


@dataclass(frozen=True)
class _CodecDecision:
    """What `_choose_leaf_codec` found: the codec (a fallback when not accepted) and why."""

    accepted: bool
    codec: str
    reason: str
    normalized_type: str | None = None
    metadata: dict = field(default_factory=dict)


def _is_tensor(v: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(v, torch.Tensor)


def _is_image(v: Any) -> bool:
    module = getattr(type(v), "__module__", "") or ""
    return module.startswith("PIL.") and hasattr(v, "save")


def _is_bytes_like(v: Any) -> bool:
    return isinstance(v, (bytes, bytearray, memoryview))


def _is_media_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_is_image(x) or _is_bytes_like(x) for x in v)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, np.number))


def _numeric_dtype(rows: list) -> np.dtype | None:
    """The common numpy dtype of list rows when it is numeric (bool is not), else None."""
    try:
        dtype = np.result_type(*[np.asarray(r).dtype for r in rows])
    except (TypeError, ValueError, OverflowError):
        return None
    return dtype if np.issubdtype(dtype, np.number) else None


def _choose_leaf_codec(values: Any) -> _CodecDecision:
    """The codec for a column of row values (None and MISSING ignored)."""
    rows = [v for v in values if not _is_null(v)]
    if not rows:
        return _CodecDecision(False, "msgpack_ragged", "all rows are null", "msgpack")
    if all(_is_tensor(v) for v in rows):
        dtypes = {v.dtype for v in rows}
        if len(dtypes) > 1:
            return _CodecDecision(False, "ragged_tensor", "tensors of mixed dtypes", "torch.Tensor")
        return _CodecDecision(
            True, "ragged_tensor", "all rows are tensors", "torch.Tensor", {"dtype": str(*dtypes)}
        )
    if all(_is_media_list(v) for v in rows):
        return _CodecDecision(True, "media_list_ragged", "all rows are media lists", "media list")
    if all(isinstance(v, np.ndarray) for v in rows):
        if all(np.issubdtype(v.dtype, np.number) for v in rows):
            return _CodecDecision(
                True,
                "typed_ragged",
                "all rows are numeric ndarrays",
                "numeric sequence",
                {"recursive_source": "ndarray"},
            )
        return _CodecDecision(
            False, "msgpack_ragged", "ndarray rows that are not numeric", "object"
        )
    if all(isinstance(v, (list, tuple)) for v in rows):
        dtype = _numeric_dtype(rows)
        if dtype is not None:
            return _CodecDecision(
                True,
                "typed_ragged",
                "all rows are numeric sequences",
                "numeric sequence",
                {"dtype": str(dtype)},
            )
    if all(_is_scalar(v) for v in rows):
        dtype = np.result_type(*rows)
        return _CodecDecision(
            True, "ndarray", "all rows are numeric scalars", "numeric scalar", {"dtype": str(dtype)}
        )
    if all(_is_bytes_like(v) for v in rows):
        return _CodecDecision(True, "bytes_ragged", "all rows are bytes-like", "bytes-like")
    if all(_is_image(v) for v in rows):
        return _CodecDecision(True, "media_bytes", "all rows are images", "media")
    if all(isinstance(v, str) for v in rows):
        return _CodecDecision(True, "utf8_ragged", "all rows are strings", "str")
    if all(isinstance(v, (dict, list, tuple)) for v in rows):
        return _CodecDecision(True, "msgpack_ragged", "all rows are dicts and lists", "msgpack")
    return _CodecDecision(False, "msgpack_ragged", "no codec matched", "object")


def _escape_key(key: str) -> str:
    """A dict key made safe inside a dotted path (escapes ``\\``, ``.``, ``[``)."""
    return key.replace("\\", "\\\\").replace(".", "\\.").replace("[", "\\[")
