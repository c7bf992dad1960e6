"""The absent-value marker that DataProto's codecs and its structured codec share.

`MISSING` is the value of a dict key a row lacks; `_is_null` is true for it
and for None. `mooncake._dataproto_codecs` and `mooncake._dataproto_structure`
both import this module, which imports neither.
"""

from __future__ import annotations

from typing import Any


class _Missing:
    """The value of a dict key absent from a row."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<MISSING>"


MISSING = _Missing()


def _is_null(v: Any) -> bool:
    return v is None or v is MISSING
