"""mooncake.dataproto_catalog: logical rows and fields mapped to stored DataProto fragments.

`DataProtoCatalog` is in-memory metadata only: per partition, each logical
key has merged tags and, per field, a location ``(fragment_id, row)`` in a
DataProto handle (`export_dataproto_ref`) of exactly one stage; the fragment
id is that stage's manifest key. `resolve` turns an ordered read of keys and
fields into field groups sharing the same locations, plus the handles to read
them with. Every call validates all of its input before changing anything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from mooncake.structured_object_store import export_dataproto_ref, import_dataproto_ref


def _partition(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("partition must be a non-empty string")
    return value


def _names(values: Any, what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"{what} must be a sequence of non-empty strings")
    names = list(values)
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{what} must be a sequence of non-empty strings")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} must be unique")
    return names


def _tags(tags: Any, n: int) -> list[dict] | None:
    if tags is None:
        return None
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Sequence):
        raise TypeError("tags must be a sequence of mappings")
    tags = list(tags)
    if len(tags) != n:
        raise ValueError("tags must have the same length as keys")
    if not all(isinstance(t, Mapping) for t in tags):
        raise TypeError("each tag must be a mapping")
    return [copy.deepcopy(dict(t)) for t in tags]


def _fragment(handle: Any, n: int) -> tuple[str, dict, list[str]]:
    """(fragment id, normalized handle, field names) of a one-stage handle of n rows."""
    ref = import_dataproto_ref(handle)
    if ref.batch_size != n:
        raise ValueError(f"handle batch_size {ref.batch_size} does not match {n} keys")
    if len(ref.stage_refs) != 1:
        raise ValueError("a catalog handle must reference exactly one DataProto stage")
    (stage_ref,) = ref.stage_refs.values()
    return stage_ref.manifest_key, export_dataproto_ref(ref), list(ref.field_index)


class DataProtoCatalog:
    """Tags and field locations of logical keys, per partition (not thread-safe)."""

    def __init__(self) -> None:
        # partition -> key -> {"tag": dict, "fields": {field: (fragment_id, row)}}
        self._partitions: dict[str, dict[str, dict]] = {}
        self._handles: dict[str, dict] = {}
        self._refcounts: dict[str, int] = {}

    def update(
        self,
        partition: str,
        keys: Sequence[str],
        *,
        tags: Sequence[Mapping[str, Any]] | None = None,
        handle: Mapping[str, Any] | None = None,
    ) -> dict:
        """Merge `tags` into the keys' tags and point the handle's fields at its rows
        (row i = keys[i]); returns ``{"keys", "tags", "fields"}``."""
        partition = _partition(partition)
        keys = _names(keys, "keys")
        tags = _tags(tags, len(keys))
        fragment = None if handle is None else _fragment(handle, len(keys))
        if tags is None and fragment is None:
            raise ValueError("catalog update requires tags or a DataProto handle")
        if fragment is not None:
            fid, normalized, _ = fragment
            if fid in self._handles and self._handles[fid] != normalized:
                raise ValueError(f"DataProto fragment id collision: {fid!r}")
        entries = self._partitions.setdefault(partition, {})
        if fragment is not None:
            self._handles.setdefault(fid, normalized)
            self._refcounts.setdefault(fid, 0)
        for row, key in enumerate(keys):
            entry = entries.setdefault(key, {"tag": {}, "fields": {}})
            if tags is not None:
                entry["tag"].update(tags[row])
            if fragment is None:
                continue
            for name in fragment[2]:
                old = entry["fields"].get(name)
                if old == (fid, row):
                    continue
                # The new location counts first: a key moving within one fragment
                # must not drop that fragment's last reference on the way.
                self._refcounts[fid] += 1
                entry["fields"][name] = (fid, row)
                if old is not None:
                    self._drop(old[0])
        return {
            "keys": keys,
            "tags": [copy.deepcopy(entries[k]["tag"]) for k in keys],
            "fields": _field_union(entries, keys),
        }

    def resolve(
        self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None
    ) -> dict:
        """Where the `fields` (default: every field of the keys) of `keys` are, in order."""
        partition = _partition(partition)
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition, {})
        missing = [k for k in keys if k not in entries]
        if missing:
            raise ValueError(f"keys were not found in partition {partition!r}: {missing}")
        selected = _field_union(entries, keys) if fields is None else _names(fields, "fields")
        if not selected:
            raise ValueError("requested keys do not contain any fields")
        for key in keys:
            absent = [f for f in selected if f not in entries[key]["fields"]]
            if absent:
                raise ValueError(f"fields are not ready for key {key!r}: {absent}")
        groups: dict[tuple, list[str]] = {}
        for name in selected:
            locations = tuple(entries[k]["fields"][name] for k in keys)
            groups.setdefault(locations, []).append(name)
        fragment_ids = {fid for locations in groups for fid, _ in locations}
        return {
            "keys": keys,
            "tags": [copy.deepcopy(entries[k]["tag"]) for k in keys],
            "fields": selected,
            "field_groups": [
                {"fields": names, "locations": list(locations)}
                for locations, names in groups.items()
            ],
            "handles": {fid: copy.deepcopy(self._handles[fid]) for fid in sorted(fragment_ids)},
        }

    def list(self, partition: str | None = None) -> dict:
        """``{partition: {key: tag}}`` of one partition (None: all)."""
        if partition is not None:
            partition = _partition(partition)
            names = [partition] if partition in self._partitions else []
        else:
            names = list(self._partitions)
        return {
            p: {k: copy.deepcopy(e["tag"]) for k, e in self._partitions[p].items()} for p in names
        }

    def remove(self, partition: str, keys: Sequence[str]) -> None:
        """Forget `keys` (unknown ones are ignored) and their field locations."""
        partition = _partition(partition)
        keys = _names(keys, "keys")
        entries = self._partitions.get(partition)
        if entries is None:
            return
        for key in keys:
            entry = entries.pop(key, None)
            if entry is not None:
                for fid, _ in entry["fields"].values():
                    self._drop(fid)
        if not entries:
            del self._partitions[partition]

    def _drop(self, fid: str) -> None:
        """One location fewer in fragment `fid`; forget its handle at zero."""
        self._refcounts[fid] -= 1
        if self._refcounts[fid] == 0:
            del self._refcounts[fid]
            del self._handles[fid]


def _field_union(entries: dict, keys: list[str]) -> list[str]:
    return list(dict.fromkeys(f for k in keys for f in entries[k]["fields"]))
