"""The two inner objects of `MooncakeBundleTransfer`, under upstream's names.

Upstream's transfer keeps its manifest logic in ``transfer._bundle_store``
and its byte-moving policy in ``transfer._transport``; callers and tests
reach into both (to merge manifests, list a payload's keys, or see which put
mode a set of chunks gets). Here both are thin views over the transfer's
own methods, and the transfer calls through them, so replacing one of their
methods on an instance changes what the transfer does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mooncake._structured_types import (
    AUTO_PARALLEL_MIN_BYTES,
    AUTO_PARALLEL_MIN_CHUNKS,
    BundleTransferPolicy,
    RemoteBundleRef,
)


class _PayloadTransport:
    """How payload chunks move: the buffer pool and the put mode of chunk groups."""

    def __init__(self, transfer: Any) -> None:
        self._transfer = transfer

    def _ensure_buffer_pool(self) -> Any:
        """The pool chunk writes and pool-backed reads use (None: none)."""
        return self._transfer._buffer_pool()

    def _resolve_buffer_group_put_mode(
        self, chunk_groups: Sequence[Sequence[Any]], transfer_policy: BundleTransferPolicy
    ) -> str:
        """``"parallel"`` or ``"batch"`` for writing `chunk_groups` (lists of buffers)
        under `transfer_policy`: as given, or for ``auto`` parallel only with at least
        two puts in flight, 8 chunks and 64 MiB."""
        if transfer_policy.put_mode in ("parallel", "batch"):
            return transfer_policy.put_mode
        inflight = transfer_policy.max_inflight_put
        if inflight <= 1 or len(chunk_groups) < AUTO_PARALLEL_MIN_CHUNKS:
            return "batch"
        total = sum(_nbytes(b) for group in chunk_groups for b in group)
        if total < AUTO_PARALLEL_MIN_BYTES or min(inflight, len(chunk_groups)) < 2:
            return "batch"
        return "parallel"


def _nbytes(buffer: Any) -> int:
    """Bytes in one buffer of a chunk group: a memoryview's nbytes, else its len()
    (upstream sizes groups by len(), so any sized object is a buffer here)."""
    return buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)


class _BundleManifestStore:
    """Manifests: resolving and validating them, their keys, merged manifests."""

    def __init__(self, transfer: Any) -> None:
        self._transfer = transfer

    def resolve_manifest(self, ref: RemoteBundleRef | Mapping[str, Any]) -> dict:
        """The validated manifest of `ref` (embedded, else read from the store)."""
        return self._transfer._resolve(ref)[1]

    def manifest_key(self, ref: RemoteBundleRef | Mapping[str, Any]) -> str:
        """The manifest key of `ref`, checked against its manifest's object id."""
        return self._transfer._manifest_key(ref)

    def payload_keys(self, payload_spec: Mapping[str, Any]) -> list[str]:
        """The store keys holding one payload (its chunks)."""
        return [c["key"] for c in payload_spec["chunks"]]

    def read_payload(self, payload_spec: Mapping[str, Any]) -> bytes:
        """All bytes of one payload."""
        return bytes(self._transfer._read_payload(payload_spec))

    def remove_keys(self, keys: Sequence[str], *, strict: bool) -> None:
        """Remove `keys`; with `strict`, RuntimeError if some could not be removed."""
        self._transfer._cleanup(list(keys), strict=strict)

    def _put_direct_copy_payload(
        self,
        key: str,
        value: Any,
        chunk_bytes: int,
        transfer_policy: BundleTransferPolicy,
        config: Any = None,
    ) -> tuple[dict, list[str]]:
        """Write one `_DirectCopyPayload` under `key` (arrays grouped whole into
        chunks of at most `chunk_bytes`); its payload spec and the keys written.
        A failure removes every chunk key of the payload, written or not."""
        written: list[str] = []
        try:
            spec = self._transfer._put_direct(
                key, list(value.arrays), chunk_bytes, transfer_policy, config, written
            )
        except BaseException:
            self._transfer._cleanup(written, strict=False)
            raise
        return spec, written

    def put_bundle_manifest(
        self,
        meta: Any,
        buffers: Mapping[str, dict],
        *,
        partition: str,
        chunk_bytes: int | None = None,
        policy: BundleTransferPolicy | None = None,
        config: Any = None,
        cleanup_keys: Sequence[str] | None = None,
        buffer_object_ids: Sequence[str] | None = None,
    ) -> RemoteBundleRef:
        """A new object whose manifest names payloads other objects already stored
        (`buffer_object_ids`, by default the objects the payload keys belong to);
        removing it also removes `cleanup_keys`. Writes only the meta and manifest."""
        return self._transfer._put_bundle_manifest(
            meta,
            buffers,
            partition=partition,
            chunk_bytes=chunk_bytes,
            policy=policy,
            config=config,
            cleanup_keys=cleanup_keys,
            buffer_object_ids=buffer_object_ids,
        )
