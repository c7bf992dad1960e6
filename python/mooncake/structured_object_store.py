"""mooncake.structured_object_store: objects of named members over a Mooncake store.

`MooncakeBundleTransfer(store)` writes one logical object as several store
keys and reads it back whole or in part, with upstream's on-store layout,
so objects written by either implementation read back in the other:

* ``{prefix}/{partition}/{hex}/meta``: the object's metadata (JSON for
  structured objects);
* ``{prefix}/{partition}/{hex}/buffer/{name}``: one member; a member larger
  than `chunk_bytes` is split into ``.../buffer/{name}/chunk/{i}``; an empty
  member writes no key;
* ``{prefix}/{partition}/{hex}/manifest``: compact JSON naming every key and
  its size, written last.

Structured objects (`put_structured_object`) record each member's encoding
in the metadata under ``"__mooncake_structured_fields__"``: ``bytes``,
``ndarray`` (numpy ``dtype.str`` and shape; the payload is the C-order
bytes) or ``torch_tensor``. Reads start from `read_spec(ref)`, narrowed
with `select_members` and `slice_member` (axis 0, ranged reads of only the
slice's bytes), then `materialize` (new objects) or `materialize_into`
(caller-owned ndarrays). `remove_bundle` removes every key of an object.
`put_object`/`get_object` store a mapping (or one wrapped value) the same
way. Upstream's inner objects are here as views: ``transfer._transport``
(put modes) and ``transfer._bundle_store`` (manifests, merged manifests).

The DataProto layer (``put_dataproto``/``get_dataproto``, refs and their
handles, non-tensor codecs) lives in `mooncake._dataproto` and
`mooncake._dataproto_codecs`; its names are exported here.
"""

from __future__ import annotations

import ctypes
import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from mooncake._structured_types import (  # the value types; names re-exported here
    _STORE_METHODS,
    ALREADY_REGISTERED,  # noqa: F401  (public here as upstream's)
    AUTO_PARALLEL_MIN_BYTES,
    AUTO_PARALLEL_MIN_CHUNKS,
    DEFAULT_BUNDLE_CHUNK_BYTES,
    MISSING_OBJECT_ERROR,
    STRUCTURED_FIELD_SPECS_KEY,
    BundleTransferPolicy,
    RemoteBundleRef,
    StructuredMemberSlice,
    StructuredObjectPayload,
    StructuredObjectReadSpec,
    StructuredObjectResult,
    _array_view,
    _bytes_view,
    _check_ndarray_destination,
    _chunk_groups,
    _config_for_grouped_keys,
    _decode_manifest,
    _DirectCopyPayload,
    _MultiBufferPayload,
    _nested_rows,
    _RawDestinationBuffer,
    _TensorObjectBufferPayload,
    _typed_spec,
    _valid_name,
    raw_destination,
    tensor_object_buffer,
)

_COPY = BundleTransferPolicy(copy_mode="copy")
WRAPPED_OBJECT_KEY = "__mooncake_wrapped_object__"


class _PoolArray(np.ndarray):
    """An ndarray over a BufferPool lease; `_mooncake_pool_owner` is the lease."""

    _mooncake_pool_owner: Any = None


from mooncake._dataproto import (  # noqa: E402  (the DataProto layer uses the names above)
    DATAPROTO_REF_HANDLE_TYPE,
    DATAPROTO_REF_HANDLE_VERSION,
    STORAGE_GROUP_ID,
    MooncakeDataProtoRef,
    StructuredFieldLocation,
    _DataProtoMixin,
    export_dataproto_ref,
    export_ref,
    import_dataproto_ref,
    import_ref,
    is_dataproto_ref_handle,
)
from mooncake._dataproto_codecs import (  # noqa: E402
    MISSING,
    FieldSchema,
    _choose_leaf_codec,
    _CodecDecision,
    _decode_msgpack_ragged_values,  # noqa: F401  (upstream's tests call these from here)
    _decode_typed_ragged_values,  # noqa: F401
    _encode_msgpack_ragged_values,
    _encode_typed_ragged_regular_ndarray_rows,
    _encode_typed_ragged_values,
    _escape_key,
    _Missing,
)
from mooncake._dataproto_codecs import (  # noqa: E402,F401  (upstream's name)
    encode_column as _encode_with_schema,
)
from mooncake._dataproto_structure import _InferredLeaf, _InferredNode, infer_structure  # noqa: E402
from mooncake._structured_parts import _BundleManifestStore, _PayloadTransport  # noqa: E402

try:  # the native copy of whole arrays into one lease; None: concatenate, then put
    from mooncake._fast_copy import concat_arrays_into as _concat_arrays_into
except ImportError:  # pragma: no cover - the module is pure Python here
    _concat_arrays_into = None


def _has_tensor_codec_helpers() -> bool:
    """Whether mooncake.store has the tensor header codec (else tensors go by torch.save)."""
    try:
        from mooncake import store
    except ImportError:
        return False
    return callable(getattr(store, "_serialize_tensor", None)) and callable(
        getattr(store, "_deserialize_tensor", None)
    )


__all__ = [
    "AUTO_PARALLEL_MIN_BYTES",
    "AUTO_PARALLEL_MIN_CHUNKS",
    "DATAPROTO_REF_HANDLE_TYPE",
    "DATAPROTO_REF_HANDLE_VERSION",
    "DEFAULT_BUNDLE_CHUNK_BYTES",
    "MISSING",
    "MISSING_OBJECT_ERROR",
    "STORAGE_GROUP_ID",
    "STRUCTURED_FIELD_SPECS_KEY",
    "BundleTransferPolicy",
    "FieldSchema",
    "MooncakeBundleTransfer",
    "MooncakeDataProtoRef",
    "RemoteBundleRef",
    "StructuredFieldLocation",
    "StructuredMemberSlice",
    "StructuredObjectPayload",
    "StructuredObjectReadSpec",
    "StructuredObjectResult",
    "_CodecDecision",
    "_InferredLeaf",
    "_InferredNode",
    "_Missing",
    "_choose_leaf_codec",
    "_concat_arrays_into",
    "_encode_msgpack_ragged_values",
    "_encode_typed_ragged_regular_ndarray_rows",
    "_encode_typed_ragged_values",
    "_escape_key",
    "_has_tensor_codec_helpers",
    "infer_structure",
    "export_dataproto_ref",
    "export_ref",
    "import_dataproto_ref",
    "import_ref",
    "is_dataproto_ref_handle",
    "raw_destination",
    "tensor_object_buffer",
]


class MooncakeBundleTransfer(_DataProtoMixin):
    """Writes and reads bundles and structured objects (and DataProtos) on `store`."""

    def __init__(
        self,
        store: Any,
        key_prefix: str = "bundle",
        default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
        buffer_pool: Any = None,
    ) -> None:
        prefix = key_prefix.strip("/") if isinstance(key_prefix, str) else ""
        if not prefix or any(ord(c) < 0x20 for c in prefix):
            raise ValueError(f"key_prefix must be a non-empty key prefix, got {key_prefix!r}")
        if default_chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.store = store
        self.key_prefix = prefix
        self.default_chunk_bytes = default_chunk_bytes
        self._pool = buffer_pool
        self._pool_checked = buffer_pool is not None
        self._fn = {name: getattr(store, name, None) for name in _STORE_METHODS}
        self._transport = _PayloadTransport(self)
        self._bundle_store = _BundleManifestStore(self)

    # -- pool ------------------------------------------------------------------

    def _buffer_pool(self) -> Any:
        if not self._pool_checked:
            self._pool_checked = True
            capsule = getattr(self.store, "_get_pyclient_capsule", None)
            try:
                if capsule is not None and capsule() is not None:
                    from mooncake.buffer_pool import BufferPool

                    self._pool = BufferPool(self.store)
            except (ImportError, AttributeError, RuntimeError, TypeError):
                self._pool = None
        return self._pool

    # -- writes ----------------------------------------------------------------

    def put_bundle(
        self,
        meta: Any,
        buffers: Mapping[str, Any],
        partition: str = "default",
        chunk_bytes: int | None = None,
        policy: BundleTransferPolicy | None = None,
        max_inflight_put: int | None = None,
        config: Any = None,
    ) -> RemoteBundleRef:
        """Write `meta` and named raw `buffers` as one object; its ref."""
        meta_view = _bytes_view(meta, "meta")
        members = {}
        for name, value in buffers.items():
            if not _valid_name(name):
                raise ValueError(f"invalid bundle buffer name: {name!r}")
            members[name] = ("bytes", [_bytes_view(value, name)], {})
        return self._write(
            meta_view, members, partition, chunk_bytes, policy, max_inflight_put, config
        )

    def put_structured_object(
        self,
        payload: StructuredObjectPayload,
        partition: str = "default",
        chunk_bytes: int | None = None,
        policy: BundleTransferPolicy | None = None,
        max_inflight_put: int | None = None,
        config: Any = None,
        pre_registered_buffers: Mapping[str, bool] | None = None,
    ) -> RemoteBundleRef:
        """Write a structured object (metadata + bytes/ndarray/tensor members); its ref.

        `pre_registered_buffers` names members whose memory the caller registered with
        the store: they are written with `batch_put_from` straight from that memory
        (no copy, no registration here) and must be writable C-contiguous buffers
        (ValueError otherwise, and for a name that is not a member). With
        ``copy_mode="copy"`` it is ignored: every member is copied.
        """
        metadata = payload.metadata
        if not isinstance(metadata, Mapping):
            raise TypeError("structured object metadata must be a mapping")
        if STRUCTURED_FIELD_SPECS_KEY in metadata:
            raise ValueError(f"metadata key {STRUCTURED_FIELD_SPECS_KEY!r} is reserved")
        if "layout" in metadata and not isinstance(metadata["layout"], str):
            raise TypeError("structured object metadata 'layout' must be a string")
        registered = self._pre_registered(payload, pre_registered_buffers, policy)
        members, specs = {}, {}
        for name, value in payload.buffers.items():
            if not _valid_name(name):
                raise ValueError(f"invalid bundle buffer name: {name!r}")
            kind, data, spec = self._encode_member(name, value)
            if name in registered:
                kind = "registered"
            members[name] = (kind, data, {})
            specs[name] = spec
        doc = {"layout": "structured", **metadata}
        if specs:
            doc[STRUCTURED_FIELD_SPECS_KEY] = specs
        try:
            meta = json.dumps(doc, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise TypeError(f"structured object metadata must be JSON-serializable: {e}") from e
        return self._write(
            memoryview(meta), members, partition, chunk_bytes, policy, max_inflight_put, config
        )

    @staticmethod
    def _pre_registered(payload, names: Mapping[str, bool] | None, policy) -> set[str]:
        """The members to write from the caller's registered memory (checked)."""
        if not names:
            return set()
        unknown = sorted(n for n in names if n not in payload.buffers)
        if unknown:
            raise ValueError(f"unknown pre-registered structured buffer(s): {unknown}")
        if policy is not None and policy.copy_mode == "copy":
            return set()
        chosen = {n for n, flag in names.items() if flag}
        for name in chosen:
            value = payload.buffers[name]
            try:
                m = memoryview(value)
            except TypeError:
                m = None
            if m is None or m.readonly or not m.c_contiguous:
                raise ValueError(
                    f"pre-registered structured buffer {name!r} must be a writable "
                    "C-contiguous buffer (it is written from its own memory)"
                )
        return chosen

    def _encode_member(self, name: str, value: Any) -> tuple[str, Any, dict]:
        if isinstance(value, np.ndarray):
            arr = np.ascontiguousarray(value)
            if arr.dtype.hasobject:
                raise TypeError(f"{name}: object ndarrays cannot be stored")
            spec = {"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)}
            return "bytes", [_array_view(arr)], spec
        if isinstance(value, _TensorObjectBufferPayload):
            # Written as given: the caller vouches for the [header][data] layout.
            return "tensor_buffer", value, {"encoding": "torch_tensor"}
        if isinstance(value, _MultiBufferPayload):
            views = [_bytes_view(b, name) for b in value.buffers]
            return "bytes", views, _typed_spec(name, value, sum(v.nbytes for v in views))
        if isinstance(value, _DirectCopyPayload):
            arrays = list(value.arrays)
            if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in arrays):
                raise TypeError(f"{name}: direct-copy payloads take C-contiguous ndarrays")
            if sum(a.nbytes for a in arrays) != value.total_bytes:
                raise ValueError(f"{name}: total_bytes does not match the arrays")
            return "direct", arrays, _typed_spec(name, value, value.total_bytes)
        if _is_tensor(value):
            if getattr(value, "is_nested", False):
                return self._encode_nested(name, value)
            spec = {
                "encoding": "torch_tensor",
                "dtype": str(value.dtype),
                "shape": list(value.shape),
                "element_size": value.element_size(),
            }
            return "tensor", value, spec
        return "bytes", [_bytes_view(value, name)], {"encoding": "bytes"}

    @staticmethod
    def _encode_nested(name: str, value: Any) -> tuple[str, Any, dict]:
        """A jagged nested tensor as its serialized values, offsets (and lengths)."""
        import torch

        from mooncake.store import _serialize_tensor

        if value.layout != torch.jagged:
            raise ValueError(f"{name}: only jagged nested tensors can be stored")
        lengths = value.lengths()
        parts = [value.values(), value.offsets()] + ([] if lengths is None else [lengths])
        blobs = []
        for part in parts:
            header, ptr, nbytes, owner = _serialize_tensor(part)
            blobs.append(header + (ctypes.string_at(ptr, nbytes) if nbytes else b""))
            del owner
        spec = {
            "encoding": "torch_tensor",
            "dtype": str(value.dtype),
            "nested": True,
            "format": "tensor_parts",
            "part_bytes": [len(b) for b in blobs],
            "has_lengths": lengths is not None,
            "ragged_idx": int(value._ragged_idx),
        }
        return "bytes", [memoryview(b"".join(blobs))], spec

    def _write(
        self, meta, members, partition, chunk_bytes, policy, max_inflight, config
    ) -> RemoteBundleRef:
        if not _valid_name(partition):
            raise ValueError(f"invalid bundle partition: {partition!r}")
        chunk = self.default_chunk_bytes if chunk_bytes is None else chunk_bytes
        if chunk <= 0:
            raise ValueError("chunk_bytes must be positive")
        policy = _checked_policy(policy, max_inflight)
        object_id, base = self._new_object(partition)
        written: list[str] = []
        try:
            meta_spec = self._put_meta(base, meta, chunk, config, written)
            specs = {}
            for name, (kind, data, extra) in members.items():
                key = f"{base}/buffer/{name}"
                if kind == "tensor":
                    spec = self._put_tensor(key, data, policy.copy_mode, config, written)
                elif kind == "tensor_buffer":
                    spec = self._put_tensor_buffer(key, data, config, written)
                elif kind == "direct":
                    spec = self._put_direct(key, data, chunk, policy, config, written)
                elif kind == "registered":
                    spec = self._put_registered(key, data[0], chunk, policy, config, written)
                else:
                    spec = self._put_payload(key, data, chunk, policy, config, written)
                specs[name] = {**spec, **extra}
            manifest = {
                "version": 1,
                "layout": "bundle",
                "object_id": object_id,
                "meta": meta_spec,
                "buffers": specs,
            }
            return self._put_manifest(base, manifest, config, written)
        except BaseException:
            self._cleanup(written, strict=False)
            raise

    def _new_object(self, partition: str) -> tuple[str, str]:
        """(object id, key base) of a new object in `partition`."""
        object_id = f"{partition}/{uuid.uuid4().hex}"
        return object_id, f"{self.key_prefix}/{object_id}"

    def _put_meta(self, base: str, meta: memoryview, chunk: int, config, written) -> dict:
        """Write an object's metadata (plain puts, as upstream)."""
        policy = BundleTransferPolicy(copy_mode="copy")
        return self._put_payload(f"{base}/meta", [meta], chunk, policy, config, written)

    def _put_manifest(self, base: str, manifest: dict, config, written) -> RemoteBundleRef:
        manifest_key = f"{base}/manifest"
        raw = json.dumps(manifest, separators=(",", ":")).encode()
        written.append(manifest_key)
        rc = self._call("put", config, 1, manifest_key, memoryview(raw))
        self._check("put", manifest_key, rc)
        return RemoteBundleRef(manifest_key, manifest)

    def _put_bundle_manifest(
        self,
        meta: Any,
        buffers: Mapping[str, dict],
        *,
        partition: str,
        chunk_bytes: int | None,
        policy: BundleTransferPolicy | None,
        config: Any,
        cleanup_keys: Sequence[str] | None,
        buffer_object_ids: Sequence[str] | None,
    ) -> RemoteBundleRef:
        """See `_BundleManifestStore.put_bundle_manifest` (the meta is written in copy
        mode whatever the policy; the policy is checked as for any write)."""
        _checked_policy(policy, None)
        if not _valid_name(partition):
            raise ValueError(f"invalid bundle partition: {partition!r}")
        chunk = self.default_chunk_bytes if chunk_bytes is None else chunk_bytes
        if chunk <= 0:
            raise ValueError("chunk_bytes must be positive")
        if buffer_object_ids is None:
            prefix = f"{self.key_prefix}/"
            buffer_object_ids = sorted(
                {
                    spec["key"].removeprefix(prefix).split("/buffer/", 1)[0]
                    for spec in buffers.values()
                }
            )
        object_id, base = self._new_object(partition)
        written: list[str] = []
        try:
            meta_spec = self._put_meta(base, _bytes_view(meta, "meta"), chunk, config, written)
            manifest = {
                "version": 1,
                "layout": "bundle",
                "object_id": object_id,
                "meta": meta_spec,
                "buffers": dict(buffers),
                "buffer_object_ids": list(dict.fromkeys(buffer_object_ids)),
            }
            if cleanup_keys:
                manifest["cleanup_keys"] = list(dict.fromkeys(cleanup_keys))
            self._validate(manifest)
            return self._put_manifest(base, manifest, config, written)
        except BaseException:
            self._cleanup(written, strict=False)
            raise

    def _manifest_key(self, ref: Any) -> str:
        """The manifest key of `ref`, which must be its manifest object's own."""
        key, manifest = self._resolve(ref)
        self._check_manifest_key(key, manifest)
        return key

    def _check_manifest_key(self, key: str, manifest: dict) -> None:
        if key != f"{self.key_prefix}/{manifest['object_id']}/manifest":
            raise ValueError(f"bundle manifest_key does not match manifest object_id: {key!r}")

    def _call(self, name: str, config: Any, n: int, *args: Any) -> Any:
        fn = self._fn[name]
        if fn is None:
            raise RuntimeError(f"{name} is unavailable")
        cfg = _config_for_grouped_keys(config, n)
        return fn(*args) if cfg is None else fn(*args, config=cfg)

    @staticmethod
    def _check(op: str, key: str, status: Any) -> None:
        if isinstance(status, list):
            status = next((s for s in status if s not in (None, 0)), 0)
        if status not in (None, 0):
            raise RuntimeError(f"{op} failed for {key}: {status}")

    @staticmethod
    def _chunk_keys(key: str, n: int) -> list[str]:
        return [key] if n == 1 else [f"{key}/chunk/{i}" for i in range(n)]

    @staticmethod
    def _payload_spec(key: str, keys: list[str], sizes: list[int]) -> dict:
        return {
            "key": key,
            "bytes": sum(sizes),
            "chunks": [{"key": k, "bytes": z} for k, z in zip(keys, sizes, strict=True)],
        }

    def _write_pool(self, policy: BundleTransferPolicy) -> Any:
        """The pool chunk writes go through (None: plain put)."""
        if policy.copy_mode == "zero_copy":
            raise RuntimeError(
                "zero-copy put requested for a member that is neither a tensor-object "
                "buffer nor pre-registered (pre_registered_buffers); use copy_mode "
                "'auto' or 'copy'"
            )
        pool = None if policy.copy_mode == "copy" else self._buffer_pool()
        if pool is not None and self._fn["batch_put_from"] is None:
            raise RuntimeError("batch_put_from is unavailable")
        return pool

    def _put_payload(self, key, parts: list[memoryview], chunk, policy, config, written) -> dict:
        """Write the concatenation of `parts` as chunks of exactly `chunk` bytes (the last
        shorter); a chunk may take bytes of several parts."""
        groups = _chunk_groups(parts, chunk)
        keys = self._chunk_keys(key, len(groups))
        spec = self._payload_spec(key, keys, [sum(p.nbytes for p in g) for g in groups])
        pool = self._write_pool(policy)

        def put_one(k: str, group: list[memoryview]) -> None:
            size = sum(p.nbytes for p in group)
            if pool is None:
                value = group[0] if len(group) == 1 else memoryview(b"".join(group))
                self._check("put", k, self._call("put", config, 1, k, value))
                return
            lease = pool.acquire(size)
            try:
                _copy_into_lease(lease, group)
                rc = self._call("batch_put_from", config, 1, [k], [lease.ptr], [size])
            finally:
                lease.release()
            self._check("batch_put_from", k, rc)

        parallel = self._transport._resolve_buffer_group_put_mode(groups, policy) == "parallel"
        self._run_puts(list(zip(keys, groups, strict=True)), put_one, parallel, policy, written)
        return spec

    def _put_registered(self, key, view: memoryview, chunk, policy, config, written) -> dict:
        """Write a member the caller registered with the store, chunk by chunk, with
        `batch_put_from` from its own memory."""
        view = view.cast("B")
        sizes = [min(chunk, view.nbytes - off) for off in range(0, view.nbytes, chunk)]
        keys = self._chunk_keys(key, len(sizes)) if sizes else []
        spec = self._payload_spec(key, keys, sizes)
        if not sizes:
            return spec
        if self._fn["batch_put_from"] is None:
            raise RuntimeError(
                "zero-copy put requested for a pre-registered buffer, "
                "but the store has no batch_put_from"
            )
        base = ctypes.addressof(ctypes.c_char.from_buffer(view))
        offsets = [i * chunk for i in range(len(sizes))]

        def put_one(k: str, item: tuple[int, int]) -> None:
            off, size = item
            rc = self._call("batch_put_from", config, 1, [k], [base + off], [size])
            self._check("batch_put_from", k, rc)

        groups = [[view[o : o + z]] for o, z in zip(offsets, sizes, strict=True)]
        parallel = self._transport._resolve_buffer_group_put_mode(groups, policy) == "parallel"
        items = list(zip(keys, zip(offsets, sizes, strict=True), strict=True))
        self._run_puts(items, put_one, parallel, policy, written)
        return spec

    def _put_direct(self, key, arrays: list, chunk, policy, config, written) -> dict:
        """Write ndarrays grouped whole into chunks of at most `chunk` bytes, each copied
        into a pool lease by `concat_arrays_into` and written with `batch_put_from`."""
        pool = self._write_pool(policy)
        concat_arrays_into = _concat_arrays_into
        if (
            len(arrays) == 1
            or pool is None
            or concat_arrays_into is None
            or any(a.nbytes > chunk for a in arrays)
        ):
            return self._put_payload(
                key, [_array_view(a) for a in arrays], chunk, policy, config, written
            )

        batches: list[tuple[int, int, int]] = []  # (start, count, bytes)
        for i, a in enumerate(arrays):
            if batches and batches[-1][2] + a.nbytes <= chunk:
                start, count, size = batches[-1]
                batches[-1] = (start, count + 1, size + a.nbytes)
            else:
                batches.append((i, 1, a.nbytes))
        batches = [b for b in batches if b[2] > 0]
        keys = self._chunk_keys(key, len(batches))
        spec = self._payload_spec(key, keys, [b[2] for b in batches])

        def put_one(k: str, batch: tuple[int, int, int]) -> None:
            start, count, size = batch
            lease = pool.acquire(size)
            try:
                wrote = concat_arrays_into(arrays, lease.ptr, size, start, count)
                if wrote != size:
                    raise RuntimeError(f"native fast-copy wrote {wrote} bytes, expected {size}")
                rc = self._call("batch_put_from", config, 1, [k], [lease.ptr], [size])
            finally:
                lease.release()
            self._check("batch_put_from", k, rc)

        parallel = (
            policy.put_mode != "batch"
            and len(batches) >= AUTO_PARALLEL_MIN_CHUNKS
            and spec["bytes"] >= AUTO_PARALLEL_MIN_BYTES
        )
        self._run_puts(list(zip(keys, batches, strict=True)), put_one, parallel, policy, written)
        return spec

    @staticmethod
    def _run_puts(items: list, put_one, parallel: bool, policy, written: list[str]) -> None:
        """Run put_one(key, item) for each item, on max_inflight_put threads when parallel.
        Every key is recorded in `written` first: a failure removes it, landed or not."""
        workers = min(policy.max_inflight_put, len(items))
        if not parallel or workers < 2:
            for k, item in items:
                written.append(k)
                put_one(k, item)
            return
        from concurrent.futures import ThreadPoolExecutor

        written.extend(k for k, _ in items)
        with ThreadPoolExecutor(workers) as ex:
            for f in [ex.submit(put_one, k, item) for k, item in items]:
                f.result()

    def _put_tensor_buffer(self, key, buf: _TensorObjectBufferPayload, config, written) -> dict:
        """A tensor object already in registered memory, written by one zero-copy call."""
        if config is None and self._fn["put_tensor_from"] is not None:
            name, rc_fn = "put_tensor_from", self._fn["put_tensor_from"]
        elif self._fn["put_from"] is not None:
            name, rc_fn = "put_from", self._fn["put_from"]
        else:
            raise RuntimeError("put_from is unavailable")
        written.append(key)
        cfg = _config_for_grouped_keys(config, 1)
        rc = (
            rc_fn(key, buf.ptr, buf.size)
            if cfg is None
            else rc_fn(key, buf.ptr, buf.size, config=cfg)
        )
        self._check(name, key, rc)
        return self._payload_spec(key, [key], [buf.size])

    def _put_tensor(self, key: str, tensor: Any, copy_mode: str, config, written) -> dict:
        """A tensor member: the store's tensor call, else staged in a pool lease we
        already hold, else as bytes (header and data, or torch.save without the codec
        helpers and for 0-dim tensors)."""
        from mooncake._tensor import HEADER_SIZE

        if copy_mode == "zero_copy":
            raise ValueError(
                "zero-copy structured tensor fields require a BufferPool tensor-object buffer"
            )
        size = HEADER_SIZE + tensor.numel() * tensor.element_size()
        tensor_spec = {
            "key": key,
            "bytes": size,
            "chunks": [{"key": key, "bytes": size}],
            "kind": "tensor",
            "dtype": str(tensor.dtype),
            "shape": list(tensor.shape),
            "metadata_bytes": HEADER_SIZE,
        }
        if copy_mode != "copy":
            name = "put_tensor" if config is None else "pub_tensor"
            if self._fn[name] is not None:
                written.append(key)
                self._check(name, key, self._call(name, config, 1, key, tensor))
                return tensor_spec
            if self._pool is not None and _has_tensor_codec_helpers():
                written.append(key)
                self._put_tensor_from_pool(key, tensor, size, config)
                return tensor_spec
        if not _has_tensor_codec_helpers() or tensor.dim() == 0:
            import io

            import torch

            buf = io.BytesIO()
            torch.save(tensor.detach().cpu(), buf)
            raw = buf.getvalue()
            spec = self._put_payload(key, [memoryview(raw)], len(raw) or 1, _COPY, config, written)
            return {**spec, "format": "torch_save"}
        from mooncake.store import _serialize_tensor

        header, ptr, nbytes, owner = _serialize_tensor(tensor)
        raw = bytes(header) + (ctypes.string_at(ptr, nbytes) if nbytes else b"")
        del owner
        spec = self._put_payload(key, [memoryview(raw)], len(raw), _COPY, config, written)
        return {**spec, "metadata_bytes": len(header)}

    def _put_tensor_from_pool(self, key: str, tensor: Any, size: int, config) -> None:
        """Copy the tensor object into a pool lease and write it with one zero-copy call."""
        from mooncake.store import _serialize_tensor

        header, ptr, nbytes, owner = _serialize_tensor(tensor)
        lease = self._pool.acquire(size)
        try:
            ctypes.memmove(lease.ptr, bytes(header), len(header))
            if nbytes:
                ctypes.memmove(lease.ptr + len(header), ptr, nbytes)
            del owner
            buf = _TensorObjectBufferPayload(lease.ptr, size, lease)
            self._put_tensor_buffer(key, buf, config, [])
        finally:
            lease.release()

    # -- manifests -------------------------------------------------------------

    def _resolve(self, ref: Any) -> tuple[str, dict]:
        if isinstance(ref, RemoteBundleRef):
            key, manifest = ref.manifest_key, ref.manifest
        elif isinstance(ref, Mapping) and "manifest_key" in ref:
            key, manifest = ref["manifest_key"], ref.get("manifest")
        else:
            raise ValueError("bundle ref must include manifest_key")
        if not isinstance(key, str):
            raise ValueError("bundle ref must include manifest_key")
        if not manifest:  # None, or {} as in refs imported from a DataProto handle
            raw = self._fn["get"](key) if self._fn["get"] else None
            if not raw:
                raise RuntimeError(f"get failed for {key}: manifest not found")
            manifest = _decode_manifest(raw)
        self._validate(manifest)
        return key, manifest

    def _validate(self, m: dict) -> None:
        if m.get("version") != 1 or m.get("layout") != "bundle":
            raise ValueError("invalid bundle manifest: version 1 and layout 'bundle' required")
        oid = m.get("object_id")
        if not isinstance(oid, str):
            raise ValueError("bundle manifest object_id must be a string")
        allowed = m.get("buffer_object_ids", [oid])
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise ValueError("bundle manifest buffer_object_ids must be a list of strings")
        if not isinstance(m.get("meta"), dict) or not isinstance(m.get("buffers"), dict):
            raise ValueError("bundle manifest needs meta and buffers objects")
        self._validate_payload("meta", m["meta"], [oid])
        for name, spec in m["buffers"].items():
            if not isinstance(spec, dict):
                raise ValueError(f"bundle manifest buffer {name!r} is not an object")
            self._validate_payload(name, spec, allowed)
        bases = [f"{self.key_prefix}/{a}" for a in allowed]
        cleanup = m.get("cleanup_keys", [])
        if not isinstance(cleanup, list):
            raise ValueError("bundle manifest cleanup_keys must be a list")
        sibling = f"{self.key_prefix}/{oid.split('/', 1)[0]}/"
        for k in cleanup:
            if not isinstance(k, str) or not (
                any(k == f"{b}/manifest" or k.startswith(f"{b}/") for b in bases)
                or _sibling_meta_key(k, sibling)
            ):
                raise ValueError(
                    f"bundle manifest cleanup_keys are outside the bundle namespace: {k!r}"
                )

    def _validate_payload(self, name: str, spec: dict, allowed: list[str]) -> None:
        key, n, chunks = spec.get("key"), spec.get("bytes"), spec.get("chunks")
        if not isinstance(key, str) or not any(
            key.startswith(f"{self.key_prefix}/{a}/") for a in allowed
        ):
            raise ValueError(f"bundle payload {name!r} key {key!r} is outside the bundle namespace")
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"bundle payload {name!r} has an invalid byte count")
        if not isinstance(chunks, list) or (n > 0 and not chunks):
            raise ValueError(f"bundle payload {name!r} has invalid chunks")
        seen, total = set(), 0
        for c in chunks:
            ck, cn = (c.get("key"), c.get("bytes")) if isinstance(c, dict) else (None, None)
            if not isinstance(ck, str) or not (ck == key or ck.startswith(f"{key}/")):
                raise ValueError(
                    f"bundle payload {name!r}: chunk key {ck!r} is outside the payload namespace"
                )
            if ck in seen:
                raise ValueError(f"bundle payload {name!r}: chunk keys must be unique ({ck!r})")
            if not isinstance(cn, int) or cn < 0:
                raise ValueError(f"bundle payload {name!r}: chunk bytes must be non-negative")
            seen.add(ck)
            total += cn
        if total != n:
            raise ValueError(f"bundle payload {name!r} chunks total {total} bytes, expected {n}")

    # -- reads -----------------------------------------------------------------

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        """A read of the whole object behind `ref`; narrow it with select_members/slice_member."""
        return StructuredObjectReadSpec(ref)

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        """Read the selected members into new objects."""
        return self.materialize_into(spec, None)

    def materialize_into(
        self, spec: StructuredObjectReadSpec, destinations: Mapping[str, Any] | None
    ) -> StructuredObjectResult:
        """Read the selected members; ndarray members named in `destinations` fill those arrays."""
        if spec.member_names == ():
            raise ValueError("structured object read selected no members")
        _, manifest = self._resolve(spec.ref)
        metadata = json.loads(bytes(self._read_payload(manifest["meta"])).decode("utf-8"))
        buffers = manifest["buffers"]
        names = list(buffers) if spec.member_names is None else list(spec.member_names)
        unknown = [n for n in names if n not in buffers]
        if unknown:
            raise KeyError(f"unknown bundle buffers: {unknown}")
        fields = metadata.get(STRUCTURED_FIELD_SPECS_KEY, {}) if isinstance(metadata, dict) else {}
        dests = destinations or {}
        objects = {}
        for name in names:
            fspec = fields.get(name, {"encoding": "bytes"})
            enc = fspec.get("encoding")
            payload, sl, dest = buffers[name], spec.member_slice(name), dests.get(name)
            if enc == "bytes":
                if sl is not None:
                    raise ValueError(f"bytes member {name!r} does not support slicing")
                if dest is not None:
                    raise ValueError(f"bytes member {name!r} does not support materialize_into")
                objects[name] = self._read_bytes(payload)
            elif enc == "ndarray":
                objects[name] = self._read_ndarray(name, payload, fspec, sl, dest)
            elif enc == "torch_tensor":
                objects[name] = self._read_tensor(name, payload, fspec, sl, dest)
            else:
                raise ValueError(f"unsupported structured field encoding: {enc!r}")
        return StructuredObjectResult(metadata, objects)

    def put_object(
        self,
        obj: Any,
        partition: str = "default",
        chunk_bytes: int | None = None,
        policy: BundleTransferPolicy | None = None,
        max_inflight_put: int | None = None,
        config: Any = None,
    ) -> RemoteBundleRef:
        """Store `obj`: a mapping as one member per item, any other value (ndarray,
        tensor, bytes) as the single member ``value`` of a wrapped object."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload(metadata={}, buffers=dict(obj))
        else:
            payload = StructuredObjectPayload(
                metadata={WRAPPED_OBJECT_KEY: True}, buffers={"value": obj}
            )
        return self.put_structured_object(
            payload, partition, chunk_bytes, policy, max_inflight_put, config
        )

    def get_object(self, ref: Any) -> Any:
        """What `put_object` stored: a dict of the members, or the wrapped value."""
        result = self.materialize(self.read_spec(ref))
        if result.metadata.get(WRAPPED_OBJECT_KEY) is True:
            return result.objects["value"]
        return dict(result.objects)

    def _read_payload(self, payload: dict) -> bytearray:
        out = bytearray(payload["bytes"])
        if not out:
            return out
        chunks = payload["chunks"]
        bgi, reg, unreg = (
            self._fn[n] for n in ("batch_get_into", "register_buffer", "unregister_buffer")
        )
        if bgi is not None and reg is not None and unreg is not None:
            base = _address(out)
            rc = reg(base, len(out))
            try:
                offs = np.cumsum([0] + [c["bytes"] for c in chunks[:-1]]).tolist()
                res = bgi(
                    [c["key"] for c in chunks],
                    [base + o for o in offs],
                    [c["bytes"] for c in chunks],
                )
                for c, r in zip(chunks, res, strict=True):
                    if r != c["bytes"]:
                        raise RuntimeError(f"batch_get_into failed for {c['key']}: {r}")
            finally:
                if rc == 0:
                    unreg(base)
            return out
        off = 0
        for c in chunks:
            data = self._fn["get"](c["key"])
            if data is None or len(data) != c["bytes"]:
                raise RuntimeError(f"get failed for {c['key']}")
            out[off : off + len(data)] = data
            off += len(data)
        return out

    def _ranges_into(self, payload: dict, start: int, length: int, ptr: int) -> None:
        """Read object bytes [start, start+length) of a payload into ptr, ranged."""
        keys, dst, src, sizes = [], [], [], []
        off = 0
        for c in payload["chunks"]:
            lo, hi = max(start, off), min(start + length, off + c["bytes"])
            if lo < hi:
                keys.append(c["key"])
                dst.append([lo - start])
                src.append([lo - off])
                sizes.append([hi - lo])
            off += c["bytes"]
        if not keys:
            return
        gir = self._fn["get_into_ranges"]
        if gir is None:
            raise RuntimeError("get_into_ranges is unavailable")
        res = gir([ptr], [keys], [dst], [src], [sizes])
        for k, want, got in zip(keys, sizes, res[0], strict=True):
            if list(got) != want:
                raise RuntimeError(f"get_into_ranges failed for {k}: {got}")

    def _pool_array(self, nbytes: int) -> tuple[np.ndarray, Any] | None:
        pool = self._buffer_pool()
        if pool is None or nbytes == 0 or self._fn["get_into_ranges"] is None:
            return None
        lease = pool.acquire(nbytes)

        raw = (ctypes.c_ubyte * nbytes).from_address(lease.ptr)
        arr = np.ctypeslib.as_array(raw).view(_PoolArray)
        arr._mooncake_pool_owner = lease
        return arr, lease

    def _read_bytes(self, payload: dict) -> Any:
        got = self._pool_array(payload["bytes"])
        if got is None:
            return bytes(self._read_payload(payload))
        arr, lease = got
        try:
            self._ranges_into(payload, 0, payload["bytes"], lease.ptr)
        except BaseException:
            arr._mooncake_pool_owner = None
            lease.release()
            raise
        return arr

    def _read_ndarray(self, name, payload, fspec, sl, dest) -> Any:
        dtype, shape = fspec.get("dtype"), fspec.get("shape")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise ValueError(f"ndarray member {name!r} needs a dtype string and a shape list")
        dt = np.dtype(dtype)
        rows = shape[0] if shape else 1
        row_bytes = dt.itemsize * int(np.prod(shape[1:], dtype=np.int64)) if shape else dt.itemsize
        start, count, step = 0, rows, 1
        out_shape = list(shape)
        if sl is not None:
            if sl.axis != 0 or not shape:
                raise ValueError(f"ndarray member {name!r}: slicing supports axis=0 only")
            if sl.step <= 0:
                raise ValueError(f"ndarray member {name!r}: slice step must be positive")
            start, stop, step = slice(sl.start, sl.end, sl.step).indices(rows)
            count = len(range(start, stop, step))
            out_shape[0] = count
        nbytes = count * row_bytes
        span = 0 if count == 0 else ((count - 1) * step + 1) * row_bytes
        src_off = start * row_bytes
        if dest is None and step == 1:
            got = self._pool_array(nbytes)
            if got is not None:
                arr, lease = got
                try:
                    self._ranges_into(payload, src_off, nbytes, lease.ptr)
                except BaseException:
                    arr._mooncake_pool_owner = None
                    lease.release()
                    raise
                return arr.view(dt).reshape(out_shape)
        if isinstance(dest, _RawDestinationBuffer):
            if dest.size < nbytes:
                raise ValueError(
                    f"raw destination for {name!r} holds {dest.size} bytes, needs {nbytes}"
                )
            ptr, registered, out = dest.ptr, dest.pre_registered, dest
        else:
            out = (
                np.empty(out_shape, dtype=dt)
                if dest is None
                else _check_ndarray_destination(name, dest, dt, out_shape)
            )
            ptr, registered = out.ctypes.data, False
        if span == 0:
            return out
        if step == 1:
            self._fill(payload, src_off, nbytes, ptr, registered)
        else:
            tmp = np.empty(span, dtype=np.uint8)
            self._fill(payload, src_off, span, tmp.ctypes.data, False)
            picked = np.ascontiguousarray(
                tmp.view(dt).reshape([(count - 1) * step + 1, *out_shape[1:]])[::step]
            )
            ctypes.memmove(ptr, picked.ctypes.data, nbytes)
        return out

    def _fill(self, payload: dict, src_off: int, nbytes: int, ptr: int, registered: bool) -> None:
        """Write payload bytes [src_off, src_off+nbytes) to `ptr`, registering the range
        for the read unless `registered`; ranged reads, or whole chunks without them."""
        if nbytes == 0:
            return
        reg, unreg = self._fn["register_buffer"], self._fn["unregister_buffer"]
        chunks = payload["chunks"]
        if (
            reg is None
            or unreg is None
            or (self._fn["get_into"] is None and self._fn["get_into_ranges"] is None)
        ):
            full = self._read_payload(payload)
            src = (ctypes.c_char * len(full)).from_buffer(full)
            ctypes.memmove(ptr, ctypes.addressof(src) + src_off, nbytes)
            return
        rc = -1 if registered else reg(ptr, nbytes)
        try:
            whole = len(chunks) == 1 and src_off == 0 and nbytes == payload["bytes"]
            if whole and self._fn["get_into"] is not None:
                got = self._fn["get_into"](chunks[0]["key"], ptr, nbytes)
                if got != nbytes:
                    raise RuntimeError(f"get_into failed for {chunks[0]['key']}: {got}")
            else:
                self._ranges_into(payload, src_off, nbytes, ptr)
        finally:
            if rc == 0:
                unreg(ptr)

    def _read_tensor(self, name: str, payload: dict, fspec: dict, sl, dest) -> Any:
        if fspec.get("nested"):
            if dest is not None:
                raise ValueError(f"nested tensor member {name!r} does not support destinations")
            return self._read_nested(name, payload, fspec, sl)
        if payload.get("format") == "torch_save":
            if dest is not None:
                raise ValueError(f"torch.save tensor member {name!r} does not support destinations")
            import io

            import torch

            value = torch.load(io.BytesIO(bytes(self._read_payload(payload))), weights_only=True)
            if sl is None:
                return value
            if sl.axis != 0 or value.dim() == 0:
                raise ValueError(f"tensor member {name!r}: slicing supports axis=0 only")
            if sl.step <= 0:
                raise ValueError(f"tensor member {name!r}: slice step must be positive")
            return value[slice(sl.start, sl.end, sl.step)]  # read whole: no ranged reads
        if dest is not None and not isinstance(
            dest, (_TensorObjectBufferPayload, _RawDestinationBuffer)
        ):
            raise TypeError(
                f"destination for tensor member {name!r} must be a tensor_object_buffer "
                "or a raw_destination"
            )
        tensor_kind = payload.get("kind") == "tensor"
        if sl is None and dest is None:
            if tensor_kind:
                if self._fn["get_tensor"] is None:
                    raise RuntimeError(f"tensor member {name!r}: store does not support get_tensor")
                t = self._fn["get_tensor"](payload["key"])
                if t is None:
                    raise RuntimeError(f"get_tensor failed for {payload['key']}")
                return t
            return self._tensor_from_bytes(name, self._read_payload(payload))
        if sl is None and tensor_kind and self._fn["get_tensor_into"] is not None:
            return self._fn["get_tensor_into"](payload["key"], dest.ptr, dest.size)
        if sl is None and not tensor_kind:
            return self._read_raw_into(name, payload, dest)
        return self._read_tensor_range(name, payload, sl, dest, tensor_kind)

    def _read_raw_into(self, name: str, payload: dict, dest: Any) -> Any:
        """A whole tensor-object member copied as stored into `dest` (ranged reads of
        registered caller memory; plain gets without them); `dest` itself back."""
        total = payload["bytes"]
        if dest.size < total:
            raise ValueError(f"destination for {name!r} holds {dest.size} bytes, needs {total}")
        reg, unreg = self._fn["register_buffer"], self._fn["unregister_buffer"]
        if total and self._fn["get_into_ranges"] is not None and reg and unreg:
            rc = -1 if getattr(dest, "pre_registered", False) else reg(dest.ptr, total)
            try:
                self._ranges_into(payload, 0, total, dest.ptr)
            finally:
                if rc == 0:
                    unreg(dest.ptr)
        elif total:
            raw = self._read_payload(payload)
            ctypes.memmove(dest.ptr, bytes(raw), total)
        return dest

    def _read_tensor_range(self, name, payload, sl, dest, tensor_kind: bool) -> Any:
        """Read a tensor member's header and the data of rows [start, end) of axis 0 only
        (all rows without `sl`), into `dest` when given, else into new memory."""
        from mooncake._tensor import HEADER_SIZE, parse_header

        total = payload["bytes"]
        header = bytearray(HEADER_SIZE)
        self._fill(payload, 0, HEADER_SIZE, _address(header), False)
        meta = parse_header(bytes(header), total)
        if meta is None:
            raise ValueError(f"tensor member {name!r} is not a valid tensor object")
        data_off, data_len = meta["data_offset"], total - meta["data_offset"]
        if sl is not None:
            shape = meta["local_shape"]
            if sl.axis != 0 or not shape:
                raise ValueError(f"tensor member {name!r}: slicing supports axis=0 only")
            if sl.step != 1:
                raise ValueError(f"tensor member {name!r}: slicing requires step=1")
            start, stop, _ = slice(sl.start, sl.end, 1).indices(shape[0])
            count = max(0, stop - start)
            row_bytes = data_len // shape[0] if shape[0] else 0
            data_off += start * row_bytes
            data_len = count * row_bytes
            _patch_rows(header, count)
        need = HEADER_SIZE + data_len
        if dest is None:
            buf = bytearray(need)
            buf[:HEADER_SIZE] = header
            self._fill(payload, data_off, data_len, _address(buf) + HEADER_SIZE, False)
            return self._tensor_from_bytes(name, buf)
        if dest.size < need:
            raise ValueError(f"destination for {name!r} holds {dest.size} bytes, needs {need}")
        ctypes.memmove(dest.ptr, bytes(header), HEADER_SIZE)
        registered = getattr(dest, "pre_registered", False)
        self._fill(payload, data_off, data_len, dest.ptr + HEADER_SIZE, registered)
        return _tensor_view(dest.ptr, need) if tensor_kind else dest

    @staticmethod
    def _tensor_from_bytes(name: str, raw: Any) -> Any:
        from mooncake.store import _deserialize_tensor

        t = _deserialize_tensor(bytes(raw))
        if t is None:
            raise ValueError(f"tensor member {name!r} is not a valid tensor object")
        return t

    def _read_nested(self, name: str, payload: dict, fspec: dict, sl) -> Any:
        """A jagged nested tensor member; with `sl`, the rows it selects (axis 0)."""
        import torch

        raw = bytes(self._read_payload(payload))
        sizes = fspec.get("part_bytes")
        if not isinstance(sizes, list) or sum(sizes) != len(raw):
            raise ValueError(f"nested tensor member {name!r} has invalid part_bytes")
        parts, off = [], 0
        for z in sizes:
            parts.append(self._tensor_from_bytes(name, raw[off : off + z]))
            off += z
        values, offsets = parts[0], parts[1]
        lengths = parts[2] if fspec.get("has_lengths") else None
        nested = torch.nested.nested_tensor_from_jagged(
            values, offsets, lengths, jagged_dim=int(fspec.get("ragged_idx", 1))
        )
        if sl is None:
            return nested
        if sl.axis != 0:
            raise ValueError(f"nested tensor member {name!r}: slicing supports axis=0 only")
        if sl.step <= 0:
            raise ValueError(f"nested tensor member {name!r}: slice step must be positive")
        picks = list(range(*slice(sl.start, sl.end, sl.step).indices(nested.size(0))))
        return _nested_rows(nested, picks)

    @staticmethod
    def release_result(obj: Any) -> None:
        """Return the pool leases behind a read result (each once); idempotent."""
        seen: set[int] = set()

        def walk(o: Any) -> None:
            if isinstance(o, StructuredObjectResult):
                walk(o.objects)
            elif isinstance(o, Mapping):
                for v in o.values():
                    walk(v)
            elif isinstance(o, (list, tuple)):
                for v in o:
                    walk(v)
            elif isinstance(o, np.ndarray):
                if o.dtype.hasobject:
                    for v in o.flat:
                        walk(v)
                    return
                base = o
                while base is not None:
                    owner = getattr(base, "_mooncake_pool_owner", None)
                    if owner is not None and id(owner) not in seen:
                        seen.add(id(owner))
                        owner.release()
                    base = base.base if isinstance(base.base, np.ndarray) else None

        walk(obj)

    # -- removal ---------------------------------------------------------------

    def remove_bundle(self, ref: Any) -> None:
        """Remove every key of the object behind `ref` (RuntimeError if some stay)."""
        key, manifest = self._resolve(ref)
        self._check_manifest_key(key, manifest)
        keys = [c["key"] for c in manifest["meta"]["chunks"]]
        for spec in manifest["buffers"].values():
            keys.extend(c["key"] for c in spec["chunks"])
        keys.extend(manifest.get("cleanup_keys", []))
        keys.append(key)
        self._cleanup(keys, strict=True)

    def _cleanup(self, keys: list[str], strict: bool) -> None:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        retry = keys
        br = self._fn["batch_remove"]
        if br is not None:
            try:
                try:
                    res = br(keys, True)
                except TypeError:
                    res = br(keys)
            except Exception:  # noqa: BLE001  (best effort unless strict: retry one by one)
                if strict:
                    raise
                res = [-1] * len(keys)
            if len(res) != len(keys):
                if strict:
                    raise RuntimeError(
                        f"batch_remove returned {len(res)} results for {len(keys)} keys"
                    )
                return
            retry = [
                k
                for k, r in zip(keys, res, strict=True)
                if r not in (None, 0, MISSING_OBJECT_ERROR)
            ]
        failed = []
        for k in retry:
            try:
                r = self._fn["remove"](k, True) if self._fn["remove"] else -1
            except KeyError:
                continue
            except Exception as e:  # noqa: BLE001  (best effort unless strict)
                if strict:
                    raise
                failed.append((k, e))
                continue
            if r not in (None, 0, MISSING_OBJECT_ERROR):
                failed.append((k, r))
        if failed and strict:
            raise RuntimeError(f"failed to remove {len(failed)} Mooncake keys: {failed}")


def _checked_policy(policy: BundleTransferPolicy | None, max_inflight: int | None):
    """`policy` (default: the defaults) with `max_inflight` applied; ValueError for
    modes or counts upstream refuses."""
    policy = policy or BundleTransferPolicy()
    if policy.copy_mode not in ("auto", "zero_copy", "copy"):
        raise ValueError(f"unsupported copy_mode: {policy.copy_mode!r}")
    if policy.put_mode not in ("auto", "batch", "parallel"):
        raise ValueError(f"unsupported put_mode: {policy.put_mode!r}")
    inflight = policy.max_inflight_put if max_inflight is None else max_inflight
    if inflight < 1:
        raise ValueError("max_inflight_put must be positive")
    return replace(policy, max_inflight_put=inflight)


def _sibling_meta_key(key: str, partition_prefix: str) -> bool:
    """Whether `key` is the manifest or meta of another object in the same partition
    (an earlier merged manifest of a DataProto stage, which owns no payloads)."""
    if not key.startswith(partition_prefix):
        return False
    parts = key[len(partition_prefix) :].split("/")
    if len(parts) < 2 or not parts[0] or any(ord(c) < 0x20 for c in parts[0]):
        return False
    rest = parts[1:]
    return rest in (["manifest"], ["meta"]) or (
        len(rest) == 3 and rest[:2] == ["meta", "chunk"] and rest[2].isdigit()
    )


def _copy_into_lease(lease: Any, parts: list[memoryview]) -> None:
    """Copy `parts` back to back into a pool lease: its own copy_from_buffers when it
    has one, else through its ``buffer`` memoryview (released before returning)."""
    copy = getattr(lease, "copy_from_buffers", None)
    if callable(copy):
        copy(parts)
        return
    view = lease.buffer
    dest = view.cast("B")  # a ctypes-backed lease's view has format "<c"
    try:
        off = 0
        for p in parts:
            dest[off : off + p.nbytes] = p.cast("B") if p.format != "B" else p
            off += p.nbytes
    finally:
        dest.release()
        view.release()


def _address(buf: bytearray) -> int:
    """Address of a (non-empty) bytearray's storage."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def _patch_rows(header: bytearray, rows: int) -> None:
    """Make a tensor header describe `rows` rows of axis 0 (data size and both shapes)."""
    import struct

    old_rows = struct.unpack_from("<q", header, 104)[0]
    data_bytes = struct.unpack_from("<Q", header, 32)[0]
    row_bytes = data_bytes // old_rows if old_rows else 0
    struct.pack_into("<Q", header, 32, rows * row_bytes)
    struct.pack_into("<q", header, 40, rows)
    struct.pack_into("<q", header, 104, rows)


def _tensor_view(ptr: int, total: int) -> Any:
    """A tensor viewing the stored-tensor object of `total` bytes at `ptr` (no copy)."""
    import torch

    from mooncake._tensor import parse_header

    meta = parse_header(ctypes.string_at(ptr, 304), total)
    if meta is None:
        raise ValueError("destination does not hold a valid tensor object")
    nbytes = total - meta["data_offset"]
    dtype = getattr(torch, meta["dtype"])
    if nbytes == 0:
        return torch.empty(meta["local_shape"], dtype=dtype)
    raw = (ctypes.c_ubyte * nbytes).from_address(ptr + meta["data_offset"])
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(meta["local_shape"])


def _is_tensor(value: Any) -> bool:
    """A torch.Tensor (or subclass: Parameter, NestedTensor), without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)
