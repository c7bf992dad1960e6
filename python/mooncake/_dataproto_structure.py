"""The ``structured_recursive`` codec: dict and list rows stored column-wise.

`infer_structure(path, values, leaves, nodes)` walks a column's rows and
appends to two accumulators: *nodes* (`_InferredNode`: dicts whose keys are
strings, at most 64 of them, and lists of at most 8 items that are
themselves containers or None) and *leaves* (`_InferredLeaf`: everything
else, each with the codec `_choose_leaf_codec` picks for its values). Paths
are the root path, ``.<escaped key>`` for a dict key and ``[i]`` for a list
position. A dict key a row lacks is `MISSING` in the child column; a row
that holds no container there is None. Rows nest at most 32 levels.

`encode_structured` turns the tree into payload arrays and the JSON
metadata a reader needs (upstream's shape): per node ``i``
``node.<i>.missing`` (the row has no value at this path),
``node.<i>.row_mask`` (the row holds a container here) and, for lists,
``node.<i>.lengths``; per leaf ``j`` its codec's payloads as
``leaf.<j>.<payload>`` plus ``leaf.<j>.missing``. `decode_structured`
rebuilds the rows (tuples come back as lists, numeric list leaves as lists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mooncake._dataproto_leaf import _choose_leaf_codec, _CodecDecision, _escape_key
from mooncake._dataproto_types import MISSING, _is_null, _Missing

MAX_DEPTH = 32
MAX_DICT_KEYS = 64
MAX_LIST_LENGTH = 8


@dataclass
class _InferredLeaf:
    """A column kept whole: its path, its values (MISSING where absent) and codec choice."""

    path: str
    values: list
    decision: _CodecDecision


@dataclass
class _InferredNode:
    """A dict (children: sorted keys) or list (children: positions) at `path`."""

    path: str
    node_type: str
    children: list
    lengths: list | None = None
    row_mask: list | None = None


def _dict_keys(values: list) -> list[str] | None:
    present = [v for v in values if not _is_null(v)]
    if not present or not all(isinstance(v, dict) for v in present):
        return None
    keys = {k for v in present for k in v}
    if len(keys) > MAX_DICT_KEYS or not all(isinstance(k, str) for k in keys):
        return None
    return sorted(keys)


def _list_shape(values: list) -> tuple[int, list[int]] | None:
    present = [v for v in values if not _is_null(v)]
    if not present or not all(isinstance(v, (list, tuple)) for v in present):
        return None
    longest = max(len(v) for v in present)
    if longest > MAX_LIST_LENGTH:
        return None
    if not all(x is None or isinstance(x, (dict, list, tuple)) for v in present for x in v):
        return None
    return longest, [len(v) if isinstance(v, (list, tuple)) else 0 for v in values]


def infer_structure(path: str, values: list, leaves: list, nodes: list, *, _depth: int = 0) -> None:
    """Append the nodes and leaves of the column `values` at `path` to the accumulators."""
    if _depth > MAX_DEPTH:
        raise ValueError(
            f"infer_structure exceeded max depth {MAX_DEPTH} at {path!r}: "
            f"rows nest deeper than {MAX_DEPTH} levels"
        )
    keys = _dict_keys(values)
    if keys is not None:
        nodes.append(
            _InferredNode(path, "dict", keys, row_mask=[isinstance(v, dict) for v in values])
        )
        for k in keys:
            column = [v.get(k, MISSING) if isinstance(v, dict) else None for v in values]
            infer_structure(f"{path}.{_escape_key(k)}", column, leaves, nodes, _depth=_depth + 1)
        return
    shape = _list_shape(values)
    if shape is not None:
        longest, lengths = shape
        is_list = [isinstance(v, (list, tuple)) for v in values]
        nodes.append(_InferredNode(path, "list", list(range(longest)), lengths, is_list))
        for i in range(longest):
            column = [
                (v[i] if i < len(v) else MISSING) if listed else None
                for v, listed in zip(values, is_list, strict=True)
            ]
            infer_structure(f"{path}[{i}]", column, leaves, nodes, _depth=_depth + 1)
        return
    leaves.append(_InferredLeaf(path, list(values), _choose_leaf_codec(values)))


def _tokens(suffix: str) -> list:
    """The keys and positions of a path suffix (``.a\\.b[2]`` -> ['a.b', 2])."""
    out: list = []
    cur: list[str] = []
    i = 0
    while i < len(suffix):
        c = suffix[i]
        if c == "\\" and i + 1 < len(suffix):
            cur.append(suffix[i + 1])
            i += 2
            continue
        if c in ".[":
            if cur:
                out.append("".join(cur))
                cur = []
            if c == "[":
                end = suffix.index("]", i)
                out.append(int(suffix[i + 1 : end]))
                i = end
        else:
            cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur))
    return out


def _lookup(row: Any, suffix: str) -> Any:
    """The value of `row` at a path below the root; MISSING where there is none."""
    cur = row
    for t in _tokens(suffix):
        if isinstance(t, str):
            if not isinstance(cur, dict) or t not in cur:
                return MISSING
        elif not isinstance(cur, (list, tuple)) or t >= len(cur):
            return MISSING
        cur = cur[t]
    return cur


def encode_structured(
    path: str, values: list, encode_leaf, inferred: tuple[list, list] | None = None
) -> tuple[dict, dict]:
    """(metadata, payloads) of a column.

    `encode_leaf(leaf)` encodes one `_InferredLeaf` (None where absent) and
    returns ``(codec, rows, metadata, payloads)``; `inferred` is the
    ``(leaves, nodes)`` `infer_structure` already found for `values`, if any.
    """
    if inferred is None:
        inferred = ([], [])
        infer_structure(path, list(values), *inferred)
    leaves, nodes = inferred
    payloads: dict[str, Any] = {}
    node_specs = []
    for i, node in enumerate(nodes):
        suffix = node.path[len(path) :]
        spec = {
            "id": i,
            "path": node.path,
            "node_type": node.node_type,
            "children": list(node.children),
            "missing_payload": f"node.{i}.missing",
        }
        payloads[spec["missing_payload"]] = np.array(
            [_lookup(v, suffix) is MISSING for v in values], dtype=np.bool_
        )
        if node.row_mask is not None:
            spec["row_mask_payload"] = f"node.{i}.row_mask"
            payloads[spec["row_mask_payload"]] = np.array(node.row_mask, dtype=np.bool_)
        if node.lengths is not None:
            spec["lengths_payload"] = f"node.{i}.lengths"
            payloads[spec["lengths_payload"]] = np.array(node.lengths, dtype=np.int64)
        node_specs.append(spec)
    leaf_specs = []
    for j, leaf in enumerate(leaves):
        codec, rows, meta, parts = encode_leaf(leaf)
        members = {}
        for name, value in parts.items():
            members[name] = f"leaf.{j}.{name}"
            payloads[members[name]] = value
        members["missing"] = f"leaf.{j}.missing"
        payloads[members["missing"]] = np.array(
            [isinstance(v, _Missing) for v in leaf.values], dtype=np.bool_
        )
        leaf_specs.append(
            {
                "id": j,
                "path": leaf.path,
                "codec": codec,
                "rows": rows,
                "metadata": meta,
                "payload_members": members,
            }
        )
    metadata = {
        "schema_source": "inferred_from_runtime_values",
        "structure_version": 1,
        "root_path": path,
        "nodes": node_specs,
        "leaves": leaf_specs,
    }
    return metadata, payloads


def _depth_of(path: str) -> int:
    return path.count(".") + path.count("[")


def _child_path(node: dict, child: Any) -> str:
    if node["node_type"] == "dict":
        return f"{node['path']}.{_escape_key(str(child))}"
    return f"{node['path']}[{int(child)}]"


def decode_structured(metadata: dict, payloads: dict, n: int, decode_leaf) -> list:
    """The rows of a column; `decode_leaf(codec, payloads, n, metadata)` decodes one leaf."""
    columns: dict[str, list] = {}
    for leaf in metadata.get("leaves", []):
        members = leaf["payload_members"]
        parts = {name: payloads[m] for name, m in members.items() if name != "missing"}
        rows = decode_leaf(leaf["codec"], parts, n, leaf.get("metadata") or {})
        if leaf["codec"] == "typed_ragged":
            rows = [r.tolist() if isinstance(r, np.ndarray) else r for r in rows]
        missing = payloads[members["missing"]]
        columns[leaf["path"]] = [MISSING if missing[r] else rows[r] for r in range(n)]
    for node in sorted(metadata.get("nodes", []), key=lambda s: _depth_of(s["path"]), reverse=True):
        missing = payloads[node["missing_payload"]] if "missing_payload" in node else None
        mask = payloads[node["row_mask_payload"]] if "row_mask_payload" in node else None
        lengths = payloads[node["lengths_payload"]] if "lengths_payload" in node else None
        out = []
        for r in range(n):
            if missing is not None and missing[r]:
                out.append(MISSING)
            elif mask is not None and not mask[r]:
                out.append(None)
            elif node["node_type"] == "dict":
                item = {}
                for child in node["children"]:
                    v = columns[_child_path(node, child)][r]
                    if v is not MISSING:
                        item[child] = v
                out.append(item)
            else:
                length = int(lengths[r]) if lengths is not None else len(node["children"])
                row: list = [None] * length
                for child in node["children"]:
                    v = columns[_child_path(node, child)][r]
                    if int(child) < length and v is not MISSING:
                        row[int(child)] = v
                out.append(row)
        columns[node["path"]] = out
    return columns[metadata["root_path"]]
