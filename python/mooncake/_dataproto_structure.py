"""The ``structured_recursive`` codec: dict and list rows stored column-wise.

`infer_structure` walks a column's rows and returns a tree of *nodes* (dicts
and short lists whose rows share one shape) and *leaves* (everything else,
each stored with the codec `_choose_leaf_codec` picks for its values). Every
node ``i`` has the payloads ``node.<i>.missing`` (1 where the row has no
value here: an absent dict key, or a position past the end of a list),
``node.<i>.row_mask`` (1 where the row holds a dict / list here, 0 where it
holds None) and, for lists, ``node.<i>.lengths``; every leaf ``j`` its own
``leaf.<j>.missing`` and the payloads of its codec as ``leaf.<j>.<payload>``.
Limits, as upstream's: a row nests at most 32 levels (deeper is ValueError),
a dict node has at most 64 keys and a list node at most 8 elements (a wider
value is a leaf).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mooncake._dataproto_types import MISSING, _is_null

MAX_DEPTH = 32
MAX_DICT_KEYS = 64
MAX_LIST_LENGTH = 8


def infer_structure(values: Any, depth: int = 0) -> dict:
    """The tree of a column's rows: ``{"kind": "dict", "keys": [...],
    "children": {key: tree}}``, ``{"kind": "list", "length": n, "children":
    [tree, ...]}`` or ``{"kind": "leaf"}``. `MISSING` marks absent values."""
    if depth > MAX_DEPTH:
        raise ValueError(f"structured_recursive: rows nest deeper than {MAX_DEPTH} levels")
    present = [v for v in values if v is not MISSING and not _is_null(v)]
    if present and all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        if len(keys) <= MAX_DICT_KEYS and all(isinstance(k, str) for k in keys):
            return {
                "kind": "dict",
                "keys": keys,
                "children": {k: infer_structure(_at(values, k), depth + 1) for k in keys},
            }
    if present and all(isinstance(v, (list, tuple)) for v in present):
        length = max(len(v) for v in present)
        if 0 < length <= MAX_LIST_LENGTH:
            return {
                "kind": "list",
                "length": length,
                "children": [infer_structure(_at(values, j), depth + 1) for j in range(length)],
            }
    return {"kind": "leaf"}


def _at(values: list, step: str | int) -> list:
    """The values one step down (a key or an index); MISSING where absent."""
    out = []
    for v in values:
        if v is MISSING or _is_null(v):
            out.append(MISSING)
        elif isinstance(step, str):
            out.append(v.get(step, MISSING))
        else:
            out.append(v[step] if step < len(v) else MISSING)
    return out


def encode_structured(values: list, encode_leaf) -> tuple[dict, dict[str, np.ndarray]]:
    """(description, payloads) of a column; `encode_leaf(name, values)` encodes
    one leaf's values (None where absent) as a codec description and payloads."""
    tree = infer_structure(values)
    payloads: dict[str, np.ndarray] = {}
    counts = {"node": 0, "leaf": 0}

    def walk(node: dict, vals: list) -> dict:
        if node["kind"] == "leaf":
            i = counts["leaf"]
            counts["leaf"] += 1
            leaf_vals = [None if v is MISSING else v for v in vals]
            desc, parts = encode_leaf(f"leaf.{i}", leaf_vals)
            payloads.update({f"leaf.{i}.{p}": a for p, a in parts.items()})
            payloads[f"leaf.{i}.missing"] = np.array([v is MISSING for v in vals], dtype=np.uint8)
            return {"kind": "leaf", "leaf": i, "codec": desc}
        i = counts["node"]
        counts["node"] += 1
        payloads[f"node.{i}.missing"] = np.array([v is MISSING for v in vals], dtype=np.uint8)
        payloads[f"node.{i}.row_mask"] = np.array(
            [v is not MISSING and not _is_null(v) for v in vals], dtype=np.uint8
        )
        out: dict[str, Any] = {"kind": node["kind"], "node": i}
        if node["kind"] == "dict":
            out["keys"] = node["keys"]
            out["children"] = {k: walk(node["children"][k], _at(vals, k)) for k in node["keys"]}
        else:
            payloads[f"node.{i}.lengths"] = np.array(
                [len(v) if v is not MISSING and not _is_null(v) else 0 for v in vals],
                dtype=np.int64,
            )
            out["tuple"] = [
                isinstance(v, tuple) for v in vals if v is not MISSING and not _is_null(v)
            ][:1] == [True]
            out["children"] = [walk(c, _at(vals, j)) for j, c in enumerate(node["children"])]
        return out

    structure = walk(tree, list(values))
    return {"structure": structure}, payloads


def decode_structured(
    desc: dict, payloads: dict[str, np.ndarray], n: int, decode_leaf
) -> list:
    """The rows of a column; `decode_leaf(codec_desc, leaf_payloads, n)`
    decodes one leaf's rows."""

    def rows_of(node: dict) -> list:
        if node["kind"] == "leaf":
            prefix = f"leaf.{node['leaf']}."
            parts = {k[len(prefix) :]: a for k, a in payloads.items() if k.startswith(prefix)}
            missing = parts.pop("missing")
            rows = decode_leaf(node["codec"], parts, n)
            return [MISSING if missing[r] else rows[r] for r in range(n)]
        i = node["node"]
        missing = payloads[f"node.{i}.missing"]
        row_mask = payloads[f"node.{i}.row_mask"]
        if node["kind"] == "dict":
            columns = {k: rows_of(c) for k, c in node["children"].items()}
            built = [
                {k: columns[k][r] for k in node["keys"] if columns[k][r] is not MISSING}
                for r in range(n)
            ]
        else:
            lengths = payloads[f"node.{i}.lengths"]
            columns = [rows_of(c) for c in node["children"]]
            make = tuple if node.get("tuple") else list
            built = [make(columns[j][r] for j in range(int(lengths[r]))) for r in range(n)]
        return [
            MISSING if missing[r] else (built[r] if row_mask[r] else None) for r in range(n)
        ]

    return rows_of(desc["structure"])
