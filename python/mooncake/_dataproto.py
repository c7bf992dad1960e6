"""The DataProto layer of `mooncake.structured_object_store`.

A DataProto-like value (``batch`` of tensors/ndarrays, ``non_tensor_batch``
of object ndarrays, ``meta_info``) is stored as one structured object per
*stage* (metadata ``{"layout": "dataproto_stage", "dataproto": {...}}``,
members ``batch.<name>``, ``non_tensor_batch.<name>`` or, for encoded
non-tensor fields, ``non_tensor_batch.<name>.<payload>``). The returned
`MooncakeDataProtoRef` says where each field lives; it exports to a JSON-safe
handle (`export_dataproto_ref`) another process imports to read the fields
back, whole or by rows. `_DataProtoMixin` gives `MooncakeBundleTransfer` the
calls (`put_dataproto`, `get_dataproto`, `append_dataproto_fields`, ...).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mooncake import _structured_types as _st
from mooncake._dataproto_codecs import (
    SECTIONS,
    FieldSchema,
    _is_tensor,
    check_nullable,
    decode_column,
    encode_column,
    object_array,
    schema_dtype,
    schema_section,
)

DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where one DataProto field lives: its stage, member (name prefix) and section."""

    stage: str
    member: str
    section: str


@dataclass
class MooncakeDataProtoRef:
    """A stored DataProto: its stages' bundle refs and where each field is."""

    batch_size: int
    stage_refs: dict
    field_index: dict
    meta_info: dict
    namespace: str = "default"
    partition: str = "default"
    global_indexes: list | None = None
    encoded_non_tensor: dict = field(default_factory=dict)
    _storage_group_id: str | None = None


def is_dataproto_ref_handle(value: Any) -> bool:
    """True for a mapping whose ``type`` is ``"mooncake_dataproto_ref"``."""
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    raise TypeError(f"DataProto ref handles take only JSON-safe values, not {type(value).__name__}")


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> dict:
    """`ref` as a JSON-safe handle (TypeError for values JSON cannot hold)."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError(f"expected a MooncakeDataProtoRef, got {type(ref).__name__}")
    handle = {
        "type": DATAPROTO_REF_HANDLE_TYPE,
        "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages",
        "batch_size": int(ref.batch_size),
        "namespace": ref.namespace,
        "partition": ref.partition,
        "global_indexes": _json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {
            n: {"stage": loc.stage, "member": loc.member, "section": loc.section}
            for n, loc in ref.field_index.items()
        },
        "meta_info": _json_safe(ref.meta_info),
        "encoded_non_tensor": _json_safe(ref.encoded_non_tensor),
    }
    if ref._storage_group_id is not None:
        handle[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(handle)
    return handle


def _mapping(value: Any, what: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ValueError(f"DataProto ref handle {what} must be a mapping")
    return value


def _nonempty(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"DataProto ref handle {what} must be a non-empty string")
    return value


def import_dataproto_ref(handle: Mapping) -> MooncakeDataProtoRef:
    """The ref an exported handle describes (ValueError for an invalid handle)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    version = handle.get("version")
    if version not in (1, 2) or isinstance(version, bool):
        raise ValueError(f"unsupported DataProto ref handle version: {version!r}")
    group = handle.get(STORAGE_GROUP_ID)
    if version == 2 and group is None:
        raise ValueError("DataProto ref handle version 2 requires storage_group_id")
    if group is not None:
        group = _nonempty(group, STORAGE_GROUP_ID)
    if handle.get("kind") != "bundle_stages":
        raise ValueError(f"unsupported DataProto ref handle kind: {handle.get('kind')!r}")
    n = handle.get("batch_size")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError("DataProto ref handle batch_size must be a non-negative integer")
    stage_refs = {}
    for stage, raw in _mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _nonempty(_mapping(raw, "stage ref").get("manifest_key"), "manifest_key")
        stage_refs[_nonempty(stage, "stage")] = _st.RemoteBundleRef(key, {})
    index = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, f"field_index[{name!r}]")
        section = loc.get("section")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError(f"invalid DataProto field section: {section!r}")
        stage = _nonempty(loc.get("stage"), "field stage")
        if stage not in stage_refs:
            raise ValueError(f"DataProto field {name!r} references unknown stage {stage!r}")
        index[_nonempty(name, "field name")] = StructuredFieldLocation(
            stage, _nonempty(loc.get("member"), "field member"), section
        )
    indexes = handle.get("global_indexes")
    if indexes is not None and (
        not isinstance(indexes, list)
        or any(isinstance(i, bool) or not isinstance(i, int) for i in indexes)
    ):
        raise ValueError("DataProto ref handle global_indexes must be a list of integers")
    return MooncakeDataProtoRef(
        batch_size=n,
        stage_refs=stage_refs,
        field_index=index,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=_nonempty(handle.get("namespace", "default"), "namespace"),
        partition=_nonempty(handle.get("partition", "default"), "partition"),
        global_indexes=indexes,
        encoded_non_tensor=dict(
            _mapping(handle.get("encoded_non_tensor", {}), "encoded_non_tensor")
        ),
        _storage_group_id=group,
    )


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def _as_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError(f"expected a MooncakeDataProtoRef or its handle, got {type(ref).__name__}")


# -- values in, values out ----------------------------------------------------------


def _items(section: Any) -> dict:
    """A mapping-like section (dict, TensorDict, None) as a dict."""
    if section is None:
        return {}
    if isinstance(section, Mapping):
        return dict(section.items())
    if hasattr(section, "keys") and hasattr(section, "__getitem__"):
        return {k: section[k] for k in section.keys()}
    raise TypeError(f"a DataProto section must be mapping-like, not {type(section).__name__}")


def _sections(data: Any) -> tuple[dict, dict, dict]:
    """(batch, non_tensor_batch, meta_info) of a DataProto-like value or dict."""
    if isinstance(data, Mapping):
        if (
            data
            and set(data) <= set(SECTIONS)
            and all(
                v is None or isinstance(v, Mapping) or hasattr(v, "keys") for v in data.values()
            )
        ):
            return tuple(_items(data.get(s)) for s in SECTIONS)  # type: ignore[return-value]
        return dict(data), {}, {}
    if all(hasattr(data, s) for s in SECTIONS):
        return tuple(_items(getattr(data, s)) for s in SECTIONS)  # type: ignore[return-value]
    raise TypeError(f"expected a DataProto-like value or a dict, got {type(data).__name__}")


def _batch_size(batch: dict, non_tensor: dict) -> int:
    sizes = {len(v) for v in [*batch.values(), *non_tensor.values()]}
    if len(sizes) > 1:
        raise ValueError(f"DataProto fields have inconsistent batch sizes: {sorted(sizes)}")
    both = set(batch) & set(non_tensor)
    if both:
        raise ValueError(
            f"DataProto batch and non_tensor_batch fields overlap (in both): {sorted(both)}"
        )
    return sizes.pop() if sizes else 0


def _check_schema_sections(sections: tuple[dict, dict, dict], schemas: Mapping) -> None:
    """A field a schema declares a section for must be in that section when the data
    has it at all (a same-named field may also be in another section: the schema then
    applies to the declared one only)."""
    for name, schema in schemas.items():
        declared = schema_section(name, schema)
        found = [sec for sec, fields in zip(SECTIONS, sections, strict=True) if name in fields]
        if declared is not None and found and declared not in found:
            raise ValueError(
                f"FieldSchema for {name!r} declares section {declared!r}, "
                f"but data contains it in {', '.join(repr(f) for f in found)}"
            )


def _rows(rows: Any, n: int) -> tuple[slice, list[int] | None] | None:
    """(covering slice with step, explicit indices relative to its start or None)."""
    if rows is None:
        return None
    if isinstance(rows, _st.StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("DataProto rows slice must be on axis 0")
        rows = slice(rows.start, rows.end, rows.step)
    if isinstance(rows, slice):
        if rows.step is not None and rows.step <= 0:
            raise ValueError("DataProto rows slice step must be positive")
        return slice(*rows.indices(n)), None
    if isinstance(rows, (str, bytes)) or not isinstance(rows, (Sequence, np.ndarray)):
        raise TypeError(
            "DataProto rows must be a slice, StructuredMemberSlice, or row index sequence"
        )
    out = []
    for i in list(rows):
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"DataProto row indices must be integers, not {i!r}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"DataProto row index {i} out of range for {n} rows")
        out.append(j)
    lo = min(out, default=0)
    hi = max(out, default=-1) + 1
    return slice(lo, max(lo, hi), 1), [j - lo for j in out]


def _take(value: Any, picks: list[int] | None) -> Any:
    if picks is None:
        return value
    if _is_tensor(value):
        import torch

        if getattr(value, "is_nested", False):  # jagged tensors cannot be indexed by a tensor
            return _st._nested_rows(value, picks)
        return value[torch.tensor(picks, dtype=torch.long)]
    return value[np.asarray(picks, dtype=np.int64)]


def _plain_rows(value: Any, cover: slice, picks: list[int] | None, is_tensor: bool) -> Any:
    """Rows of a field read by its covering slice (tensor slices are step 1)."""
    if is_tensor and cover.step != 1:
        if getattr(value, "is_nested", False):
            value = _st._nested_rows(value, list(range(0, value.size(0), cover.step)))
        else:
            value = value[:: cover.step]
    return _take(value, picks)


_SCHEMA_ERRORS = (TypeError, ValueError, RuntimeError, AttributeError)


def _encode_non_tensor(name: str, path: str, values: list, schema: Any) -> Any:
    """Column `name` encoded by its schema, or by inference without one (or for codec
    ``auto``). An error of the schema's codec keeps its type and says which field and
    codec failed."""
    if schema is None:
        return encode_column(path, values, None)
    try:
        check_nullable(path, values, schema)
        if schema.codec != "auto":
            return encode_column(path, values, schema)
    except _SCHEMA_ERRORS as e:
        text = (
            f"failed to encode non_tensor_batch field {name!r} "
            f"with FieldSchema codec {schema.codec!r}: {e}"
        )
        try:
            wrapped = type(e)(text)
        except Exception:  # an exception type that takes other arguments
            wrapped = ValueError(text)
        raise wrapped from e
    return encode_column(path, values, None)


def _off_pool(value: Any) -> Any:
    """`value`, copied into memory of its own when it lives in a BufferPool lease
    (the lease is on the array or on one of the arrays it views)."""
    base = value
    while isinstance(base, np.ndarray):
        if getattr(base, "_mooncake_pool_owner", None) is not None:
            return np.array(value)
        base = base.base
    return value


class _DataProtoMixin:
    """DataProto calls of `MooncakeBundleTransfer` (store, structured objects)."""

    # -- storage groups -------------------------------------------------------------

    @staticmethod
    def _config_group(config: Any) -> str | None:
        """The one storage group `config.group_ids` names: None when it names none
        (no config, None, an empty list), "" when it names the explicit no-group."""
        ids = None if config is None else getattr(config, "group_ids", None)
        if ids is None or (not isinstance(ids, str) and len(ids) == 0):
            return None
        if not isinstance(ids, str):
            if len(ids) > 1:
                raise ValueError("DataProto config.group_ids must hold at most one group id")
            ids = ids[0]
        if not isinstance(ids, str):
            raise ValueError("DataProto config.group_ids must contain strings")
        return ids

    @classmethod
    def _new_storage_group(cls, config: Any) -> str | None:
        """The storage group of a new DataProto: the config's one id, a new opaque one
        when the config names none, and none for an explicit ``group_ids=[""]``."""
        named = cls._config_group(config)
        if named is None:
            return f"structured-{uuid.uuid4().hex}"
        return named or None

    @classmethod
    def _check_append_group(cls, config: Any, current: str | None) -> None:
        """An append writes in the ref's group; a config naming another one is an
        error. A ref without a group (stored ungrouped, or by a writer that predates
        groups) takes the caller's config as given and stays without one."""
        named = cls._config_group(config)
        if current is not None and named and named != current:
            raise ValueError(
                f"DataProto storage group {named!r} conflicts with the ref's group {current!r}"
            )

    def _group_config(self, config: Any, gid: str | None) -> Any:
        """The config every write of a DataProto in group `gid` passes: a copy of the
        caller's with ``group_ids=[gid]``, or a new ReplicateConfig when the caller gave
        none, unless the store's ``put`` takes no config (a duck-typed store: the group
        stays on the ref only). An ungrouped write passes the caller's config as given,
        so an explicit ``group_ids=[""]`` reaches the store as upstream's does."""
        if gid is None:
            return config
        if config is None:
            if not _takes_config(self._fn["put"]):
                return None
            from mooncake.store import ReplicateConfig

            config = ReplicateConfig()
        return _st._copy_config(config, [gid])

    # -- writes -----------------------------------------------------------------------

    def put(
        self,
        data: Any,
        *,
        type: str = "dataproto",
        namespace: str = "default",
        partition: str = "default",
        stage: str = "default",
        chunk_bytes: int | None = None,
        policy: Any = None,
        field_schemas: Mapping[str, FieldSchema] | None = None,
        config: Any = None,
    ) -> MooncakeDataProtoRef:
        """Store a DataProto-like value (`type="dataproto"`) or a flat dict (`"dict"`)."""
        if type == "dict":
            batch, non_tensor, meta_info = _classify_dict(data, field_schemas or {})
        elif type == "dataproto":
            batch, non_tensor, meta_info = _sections(data)
        else:
            raise ValueError(f"unknown put type {type!r}: use 'dataproto' or 'dict'")
        n = _batch_size(batch, non_tensor)
        _check_schema_sections((batch, non_tensor, meta_info), field_schemas or {})
        gid = self._new_storage_group(config)
        ref = MooncakeDataProtoRef(n, {}, {}, dict(meta_info), namespace, partition, None, {}, gid)
        if not batch and not non_tensor:
            return ref
        return self._put_stage(
            ref, stage, batch, non_tensor, False, chunk_bytes, policy, field_schemas, config
        )

    def put_dataproto(self, data: Any, **kwargs: Any) -> MooncakeDataProtoRef:
        """`put(data, type="dataproto", ...)`."""
        return self.put(data, type="dataproto", **kwargs)

    def put_dict(self, data: Mapping, **kwargs: Any) -> MooncakeDataProtoRef:
        """`put(data, type="dict", ...)` (also `put_legacy_dict`)."""
        return self.put(data, type="dict", **kwargs)

    def get_dict(self, ref: Any) -> dict:
        """`get(ref, type="dict")` (also `get_legacy_dict`)."""
        return self.get(ref, type="dict")

    def remove_dict(self, ref: Any) -> None:
        """`cleanup_dataproto(ref)` (also `remove_legacy_dict`)."""
        self.cleanup_dataproto(ref)

    def append_dataproto_fields(
        self,
        ref: Any,
        data: Any,
        *,
        stage: str,
        overwrite: bool = False,
        chunk_bytes: int | None = None,
        policy: Any = None,
        field_schemas: Mapping[str, FieldSchema] | None = None,
        config: Any = None,
    ) -> MooncakeDataProtoRef:
        """A new ref: `ref` plus the fields of `data` in `stage` (meta_info merged)."""
        ref = _as_ref(ref)
        batch, non_tensor, meta_info = _sections(data)
        _check_schema_sections((batch, non_tensor, meta_info), field_schemas or {})
        n = _batch_size(batch, non_tensor)
        if (batch or non_tensor) and n != ref.batch_size:
            raise ValueError(
                f"DataProto append batch size {n} does not match ref batch size {ref.batch_size}"
            )
        ref = replace(ref, meta_info={**ref.meta_info, **meta_info})
        if not batch and not non_tensor:
            return ref
        return self._put_stage(
            ref, stage, batch, non_tensor, overwrite, chunk_bytes, policy, field_schemas, config
        )

    def _put_stage(
        self, ref, stage, batch, non_tensor, overwrite, chunk_bytes, policy, schemas, config
    ) -> MooncakeDataProtoRef:
        if not isinstance(stage, str) or not stage:
            raise ValueError("DataProto stage must be a non-empty string")
        names = [*batch, *non_tensor]
        existing = [n for n in names if n in ref.field_index]
        if existing and not overwrite:
            raise ValueError(f"DataProto fields already exist: {sorted(existing)}")
        old_stage_ref = ref.stage_refs.get(stage)
        if overwrite and old_stage_ref is not None:
            dangling = [
                n for n, loc in ref.field_index.items() if loc.stage == stage and n not in names
            ]
            if dangling:
                raise ValueError(
                    f"DataProto overwrite for stage {stage!r} must include existing fields: "
                    f"{sorted(dangling)}"
                )
        gid = ref._storage_group_id
        self._check_append_group(config, gid)
        write_config = self._group_config(config, gid)
        schemas = schemas or {}
        buffers, index, encoded = {}, {}, {}
        for name, value in batch.items():
            if not (
                _is_tensor(value) or isinstance(value, (np.ndarray, _st._TensorObjectBufferPayload))
            ):
                raise TypeError(
                    f"DataProto batch field {name!r} must be a tensor, an ndarray "
                    "or a tensor_object_buffer"
                )
            buffers[f"batch.{name}"] = value
            index[name] = StructuredFieldLocation(stage, f"batch.{name}", "batch")
        for name, value in non_tensor.items():
            member = f"non_tensor_batch.{name}"
            index[name] = StructuredFieldLocation(stage, member, "non_tensor_batch")
            schema = schemas.get(name)
            if schema is not None and schema_section(name, schema) not in (
                None,
                "non_tensor_batch",
            ):
                schema = None  # a schema for a same-named meta_info (or batch) field
            if not isinstance(value, np.ndarray) and not _is_tensor(value):
                if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
                    raise TypeError(
                        f"non_tensor_batch field {name!r} must be an ndarray or non-string sequence"
                    )
                value = object_array(list(value))
            dense = isinstance(value, np.ndarray) and not value.dtype.hasobject
            if dense and schema is not None and schema.codec == "ndarray":
                dt = schema_dtype(name, schema)
                value = value if dt is None else value.astype(dt, copy=False)
            if dense and (schema is None or schema.codec in ("auto", "ndarray")):
                buffers[member] = value
                continue
            enc = _encode_non_tensor(name, member, list(value), schema)
            payload_members = {p: f"{member}.{p}" for p in enc.payload}
            buffers.update({payload_members[p]: a for p, a in enc.payload.items()})
            encoded[name] = {
                "codec": enc.codec,
                "rows": enc.rows,
                "metadata": enc.metadata,
                "payload_members": payload_members,
            }
        payload = _st.StructuredObjectPayload(
            metadata={
                "layout": "dataproto_stage",
                "dataproto": {
                    "version": 1,
                    "namespace": ref.namespace,
                    "partition": ref.partition,
                    "stage": stage,
                    "batch_size": ref.batch_size,
                },
            },
            buffers=buffers,
        )
        kwargs = dict(
            partition=ref.partition, chunk_bytes=chunk_bytes, policy=policy, config=write_config
        )
        if old_stage_ref is not None and not overwrite:
            stage_ref = self._append_stage(old_stage_ref, payload, **kwargs)
        else:
            stage_ref = self.put_structured_object(payload, **kwargs)
        replaced = set(names) | (
            {n for n, loc in ref.field_index.items() if loc.stage == stage} if overwrite else set()
        )
        new_ref = replace(
            ref,
            stage_refs={**ref.stage_refs, stage: stage_ref},
            field_index={
                **{n: loc for n, loc in ref.field_index.items() if n not in replaced},
                **index,
            },
            encoded_non_tensor={
                **{n: d for n, d in ref.encoded_non_tensor.items() if n not in replaced},
                **encoded,
            },
            _storage_group_id=gid,
        )
        if overwrite and old_stage_ref is not None:
            self.remove_bundle(old_stage_ref)
        return new_ref

    def _append_stage(self, old_ref, payload, *, partition, chunk_bytes, policy, config):
        """A merged manifest: the old stage's members plus a new object's. The new
        object's own meta and manifest are removed once the merged one is written;
        removing the merged manifest removes everything the stage ever wrote."""
        store = self._bundle_store
        old = store.resolve_manifest(old_ref)
        old_key = store.manifest_key(old_ref)
        clash = sorted(set(old["buffers"]) & set(payload.buffers))
        if clash:
            raise ValueError(f"structured members already exist: {clash}")
        new_ref = self.put_structured_object(
            payload, partition=partition, chunk_bytes=chunk_bytes, policy=policy, config=config
        )
        new = new_ref.manifest
        temporary = [*store.payload_keys(new["meta"]), new_ref.manifest_key]
        try:
            old_meta = json.loads(store.read_payload(old["meta"]).decode())
            new_meta = json.loads(store.read_payload(new["meta"]).decode())
            if old_meta.get("dataproto") != new_meta.get("dataproto"):
                raise ValueError("DataProto stage metadata mismatch during manifest merge")
            fields_key = _st.STRUCTURED_FIELD_SPECS_KEY
            meta = {
                **old_meta,
                fields_key: {**old_meta.get(fields_key, {}), **new_meta.get(fields_key, {})},
            }
            merged = store.put_bundle_manifest(
                json.dumps(meta, separators=(",", ":")).encode(),
                {**old["buffers"], **new["buffers"]},
                partition=partition,
                chunk_bytes=chunk_bytes,
                policy=policy,
                config=config,
                cleanup_keys=[
                    *old.get("cleanup_keys", []),
                    *store.payload_keys(old["meta"]),
                    old_key,
                    *temporary,
                ],
            )
        except BaseException:
            self.remove_bundle(new_ref)
            raise
        store.remove_keys(temporary, strict=False)
        return merged

    # -- reads ------------------------------------------------------------------------

    def get(self, ref: Any, *, type: str = "dataproto", **kwargs: Any) -> Any:
        """`get_dataproto(ref, ...)`; with `type="dict"` one flat dict of every field."""
        if type == "dataproto":
            return self.get_dataproto(ref, **kwargs)
        if type != "dict":
            raise ValueError(f"unknown get type {type!r}: use 'dataproto' or 'dict'")
        if kwargs.get("data_cls") is not None:
            raise ValueError("data_cls applies to type='dataproto' only")
        got = self.get_dataproto(ref, **kwargs)
        out: dict = {}
        for section in SECTIONS:
            for name, value in got[section].items():
                if name in out:
                    raise ValueError(f"DataProto name {name!r} appears in two sections")
                if isinstance(value, np.ndarray) and value.dtype.hasobject:
                    value = value.tolist()
                out[name] = value
        return out

    def get_dataproto(
        self,
        ref: Any,
        *,
        fields: Sequence[str] | None = None,
        batch_fields: Sequence[str] | None = None,
        non_tensor_fields: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        data_cls: Any = None,
        destinations: Mapping[str, Any] | None = None,
        rows: Any = None,
    ) -> Any:
        """The selected fields (all by default) of the selected rows (all by default)."""
        ref = _as_ref(ref)
        names = self._selected_fields(ref, fields, batch_fields, non_tensor_fields)
        meta_keys = list(ref.meta_info) if meta_info_keys is None else list(meta_info_keys)
        unknown = [k for k in meta_keys if k not in ref.meta_info]
        if unknown:
            raise KeyError(f"unknown DataProto meta_info keys: {unknown}")
        sel = _rows(rows, ref.batch_size)
        dests = dict(destinations or {})
        unknown = [n for n in dests if n not in names]
        if unknown:
            raise KeyError(f"unknown DataProto fields: {unknown}")
        values: dict = {}
        by_stage: dict[str, list[str]] = {}
        for name in names:
            by_stage.setdefault(ref.field_index[name].stage, []).append(name)
        for stage, stage_names in by_stage.items():
            values.update(self._read_stage(ref, stage, stage_names, sel, dests))
        out = {s: {} for s in SECTIONS}
        for name in names:
            out[ref.field_index[name].section][name] = values[name]
        out["meta_info"] = {k: ref.meta_info[k] for k in meta_keys}
        return out if data_cls is None or data_cls is dict else _build(data_cls, out)

    @staticmethod
    def _selected_fields(ref, fields, batch_fields, non_tensor_fields) -> list[str]:
        if fields is not None and (batch_fields is not None or non_tensor_fields is not None):
            raise ValueError("fields cannot be combined with batch_fields or non_tensor_fields")
        if fields is not None:
            names = list(fields)
        elif batch_fields is None and non_tensor_fields is None:
            return list(ref.field_index)
        else:
            names = [*(batch_fields or []), *(non_tensor_fields or [])]
        unknown = [n for n in names if n not in ref.field_index]
        for section, chosen in (("batch", batch_fields), ("non_tensor_batch", non_tensor_fields)):
            unknown += [
                n
                for n in chosen or []
                if n in ref.field_index and ref.field_index[n].section != section
            ]
        if unknown:
            raise KeyError(f"unknown DataProto fields: {unknown}")
        return list(dict.fromkeys(names))

    def _read_stage(self, ref, stage, names, sel, dests) -> dict:
        stage_ref = ref.stage_refs[stage]
        _, manifest = self._resolve(stage_ref)
        spec = self.read_spec(stage_ref)
        members, plain = [], {}
        for name in names:
            member = ref.field_index[name].member
            desc = ref.encoded_non_tensor.get(name)
            if desc is None:
                members.append(member)
                plain[name] = member
            else:
                members += list(desc["payload_members"].values())
        spec = spec.select_members(members)
        member_dests = {}
        kinds = {}
        for name, member in plain.items():
            entry = manifest["buffers"].get(member)
            if entry is None:
                raise KeyError(f"unknown bundle buffers: {[member]}")
            kinds[name] = entry.get("kind") == "tensor" or entry.get("metadata_bytes") is not None
            if entry.get("format") == "torch_save" and name in dests:
                raise ValueError(
                    f"torch.save tensor member {member!r} does not support destinations"
                )
            if sel is not None:
                cover = sel[0]  # tensors are sliced with step 1, then stepped here
                step = 1 if kinds[name] else cover.step
                spec = spec.slice_member(member, 0, cover.start, cover.stop, step)
            gathered = sel is not None and (
                sel[1] is not None or (kinds[name] and sel[0].step != 1)
            )
            if name in dests and not gathered:
                member_dests[member] = dests[name]
        result = self.materialize_into(spec, member_dests)
        out = {}
        for name in names:
            member = ref.field_index[name].member
            if name in plain:
                value = result.objects[member]
                if sel is not None:
                    value = _plain_rows(value, *sel, kinds[name])
                if name in dests and member not in member_dests:
                    value = _into_destination(name, value, dests[name])
                out[name] = value
                continue
            desc = ref.encoded_non_tensor[name]
            payloads = {p: result.objects[m] for p, m in desc["payload_members"].items()}
            # decoded rows may be views of their payload: pool-backed payloads are
            # copied out first, so the leases can go back now
            owned = {p: _off_pool(v) for p, v in payloads.items()}
            self.release_result(payloads)
            column = decode_column(desc, owned, ref.batch_size)
            if sel is not None:
                cover, picks = sel
                column = column[cover]
                column = column if picks is None else [column[i] for i in picks]
            out[name] = object_array(column)
        return out

    # -- views and cleanup --------------------------------------------------------------

    def dataproto_manifest_view(self, ref: Any) -> dict:
        """Where every field of `ref` lives, with each member's stored field spec."""
        ref = _as_ref(ref)
        stages, specs = {}, {}
        for stage, stage_ref in ref.stage_refs.items():
            key, manifest = self._resolve(stage_ref)
            meta = json.loads(bytes(self._read_payload(manifest["meta"])).decode())
            stages[stage] = {"manifest_key": key, "dataproto": meta.get("dataproto")}
            specs[stage] = meta.get(_st.STRUCTURED_FIELD_SPECS_KEY, {})
        view = {
            "namespace": ref.namespace,
            "partition": ref.partition,
            "batch_size": ref.batch_size,
            "batch_fields": {},
            "non_tensor_fields": {},
            "meta_info_keys": list(ref.meta_info),
            "stages": stages,
        }
        for name, loc in ref.field_index.items():
            stage_specs = specs[loc.stage]
            spec = stage_specs.get(loc.member, {"encoding": "bytes"})
            desc = ref.encoded_non_tensor.get(name)
            if desc is not None:  # an encoded column: its codec, and the spec of each payload
                members = dict(desc["payload_members"])
                spec = {
                    "encoding": "structured_non_tensor",
                    "codec": desc["codec"],
                    "metadata": desc.get("metadata"),
                    "payload_members": members,
                    "payload_specs": {
                        p: stage_specs.get(m, {"encoding": "bytes"}) for p, m in members.items()
                    },
                }
            entry = {"section": loc.section, "stage": loc.stage, "member": loc.member, "spec": spec}
            view["batch_fields" if loc.section == "batch" else "non_tensor_fields"][name] = entry
        return view

    def cleanup_dataproto(self, ref: Any) -> None:
        """Remove every stage bundle of `ref` (each distinct manifest once)."""
        ref = _as_ref(ref)
        seen = set()
        for stage_ref in ref.stage_refs.values():
            if stage_ref.manifest_key not in seen:
                seen.add(stage_ref.manifest_key)
                self.remove_bundle(stage_ref)

    put_legacy_dict = put_dict
    get_legacy_dict = get_dict
    remove_legacy_dict = remove_dict


def _takes_config(fn: Any) -> bool:
    """Whether a store method accepts ``config=`` (True when its signature is unknown,
    as for native methods)."""
    import inspect

    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "config" or p.kind is p.VAR_KEYWORD for p in params)


def _into_destination(name: str, value: Any, dest: Any) -> Any:
    """Gathered rows of a field copied into the caller's destination: an ndarray (that
    same object back), a raw_destination (an ndarray over it for ndarray fields) or, for
    tensor fields, a raw_destination/tensor_object_buffer that gets the stored-tensor
    object (header, then data) and comes back itself."""
    import ctypes

    if _is_tensor(value):
        if not isinstance(dest, (_st._RawDestinationBuffer, _st._TensorObjectBufferPayload)):
            raise TypeError(
                f"destination for tensor field {name!r} must be a tensor_object_buffer "
                "or a raw_destination"
            )
        from mooncake.store import _serialize_tensor

        header, ptr, nbytes, owner = _serialize_tensor(value.contiguous())
        need = len(header) + nbytes
        if dest.size < need:
            raise ValueError(f"tensor destination has {dest.size} bytes, expected at least {need}")
        ctypes.memmove(dest.ptr, bytes(header), len(header))
        if nbytes:
            ctypes.memmove(dest.ptr + len(header), ptr, nbytes)
        del owner
        return dest
    value = np.ascontiguousarray(value)
    if isinstance(dest, _st._RawDestinationBuffer):
        if dest.size < value.nbytes:
            raise ValueError(
                f"raw destination has {dest.size} bytes, expected at least {value.nbytes}"
            )
        if value.nbytes == 0:
            return np.empty(value.shape, value.dtype)
        raw = (ctypes.c_ubyte * value.nbytes).from_address(dest.ptr)
        out = np.ctypeslib.as_array(raw).view(value.dtype).reshape(value.shape)
        out[...] = value
        return out
    _st._check_ndarray_destination(name, dest, value.dtype, list(value.shape))
    dest[...] = value
    return dest


def _build(data_cls: Any, out: dict) -> Any:
    batch, non_tensor, meta = out["batch"], out["non_tensor_batch"], out["meta_info"]
    from_dict = getattr(data_cls, "from_dict", None)
    if from_dict is not None:
        try:
            return from_dict(batch, non_tensor, meta_info=meta)
        except TypeError:
            pass
    try:
        return data_cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)
    except TypeError as e:
        raise TypeError(
            f"{getattr(data_cls, '__name__', data_cls)!r} cannot be constructed from "
            "batch, non_tensor_batch, and meta_info"
        ) from e


def _classify_dict(data: Any, schemas: Mapping[str, FieldSchema]) -> tuple[dict, dict, dict]:
    """A flat dict split into batch (row-aligned tensors/ndarrays), non_tensor (equal-length
    sequences) and meta_info (the rest); a schema's ``section`` decides for its field."""
    if not isinstance(data, Mapping):
        raise TypeError(f"put(type='dict') takes a mapping, not {type(data).__name__}")

    def is_array(v: Any) -> bool:
        return (_is_tensor(v) and v.dim() >= 1) or (
            isinstance(v, np.ndarray) and not v.dtype.hasobject and v.ndim >= 1
        )

    def is_rows(v: Any) -> bool:
        return isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.dtype.hasobject)

    n = next((len(v) for v in data.values() if is_array(v)), None)
    if n is None:
        n = next((len(v) for v in data.values() if is_rows(v)), None)
    sections: tuple[dict, dict, dict] = ({}, {}, {})
    for name, value in data.items():
        schema = schemas.get(name)
        section = None if schema is None else schema_section(name, schema)
        if section is None:
            if is_array(value) and len(value) == n:
                section = "batch"
            elif is_rows(value) and len(value) == n:
                section = "non_tensor_batch"
            else:
                section = "meta_info"
        if section == "non_tensor_batch" and not isinstance(value, np.ndarray):
            value = object_array(list(value))
        sections[SECTIONS.index(section)][name] = value
    return sections
