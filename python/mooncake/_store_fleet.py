"""Store-RS fleet operations of `MooncakeDistributedStore` (docs/store-operations.md).

`_FleetOps` is a mixin that `mooncake.store.MooncakeDistributedStore`
inherits; it expects the store's ``_handle``. It adds:

* setup options: the namespace (``keyspace``, ``tenant``, ``domain``,
  ``object_set``, with ``MC_STORE_RS_*`` fallbacks), routed writes
  (``routed_writes``, ``replica_count``, ``route_topk``) and segment
  eviction watermarks (``eviction_high_watermark_percent``,
  ``eviction_low_watermark_percent``), parsed by `split_fleet_options`;
* the segment lifecycle: ``activate``, ``enter_standby``,
  ``enter_draining``, ``drain_segment``, ``retire_segment``,
  ``evacuate_owned_replicas``, ``plan_handoff``, ``expand_local_memory``;
* ``query_route(key)``: where an object's replicas live;
* observability: ``init_tracing``, ``metrics_text``, ``breakdown``,
  ``start_metrics_server``, ``stop_metrics_server``, ``metrics_server_address``.

Lifecycle calls are strict: a failure raises `StoreOperationError`
carrying the error number, as Store-RS's admin APIs raise exceptions.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from mooncake import _lib
from mooncake._lib import I64, INT, PTR, STR, U64, P

_SIGNATURES = {
    "mc_store_set_fleet_options": ([U64, STR, P(PTR)], INT),
    "mc_store_segment_ids": ([U64, P(PTR)], INT),
    "mc_store_set_segment_mode": ([U64, P(STR), INT, INT, P(PTR)], INT),
    "mc_store_evacuate": ([U64, INT, P(STR), INT, I64, P(PTR), P(PTR)], INT),
    "mc_store_plan_handoff": ([U64, P(STR), INT, P(PTR), P(PTR)], INT),
    "mc_store_replica_desc": ([U64, INT, P(STR)], PTR),
    "mc_store_init_tracing": ([STR, P(PTR), P(PTR)], INT),
    "mc_store_metrics_text": ([U64], PTR),
    "mc_store_breakdown": ([U64], PTR),
    "mc_store_start_metrics_server": ([U64, STR, P(PTR), P(PTR)], INT),
    "mc_store_stop_metrics_server": ([U64], INT),
    "mc_store_metrics_server_address": ([U64], PTR),
}

# Segment modes and evacuation operations, numbered as the C ABI's.
_ACTIVE, _STANDBY, _DRAINING = 0, 1, 2
_EVACUATE, _DRAIN, _RETIRE = 0, 1, 2

_NAMESPACE = ("keyspace", "tenant", "domain", "object_set")
_WATERMARKS = ("eviction_high_watermark_percent", "eviction_low_watermark_percent")
_ROUTING = ("routed_writes", "replica_count", "route_topk")
FLEET_SETUP_KEYWORDS = _NAMESPACE + _ROUTING + _WATERMARKS

# The environment variables setup falls back to when a keyword is absent.
_ENV_FALLBACKS = {
    "keyspace": "MC_STORE_RS_KEYSPACE",
    "tenant": "MC_STORE_RS_TENANT",
    "domain": "MC_STORE_RS_DOMAIN",
    "object_set": "MC_STORE_RS_OBJECT_SET",
    "eviction_high_watermark_percent": "MC_STORE_RS_EVICTION_HIGH_WATERMARK_PERCENT",
    "eviction_low_watermark_percent": "MC_STORE_RS_EVICTION_LOW_WATERMARK_PERCENT",
}

# Watermark defaults when only one of the two is given.
_DEFAULT_HIGH, _DEFAULT_LOW = 90, 80

_DEFAULT_TIMEOUT = 120.0


class StoreOperationError(RuntimeError):
    """A lifecycle or admin call failed; ``code`` is the error number."""

    def __init__(self, name: str, code: int, message: str) -> None:
        super().__init__(f"{name} failed ({code}): {message}")
        self.code = code


_TRACE_VARS = (
    "MC_STORE_RS_TRACE",
    "MC_STORE_RS_TRACE_FILE",
    "MC_STORE_RS_TRACE_JSONL_FILE",
    "MC_STORE_RS_TRACE_KEY_MODE",
)


def tracing_requested() -> bool:
    """Whether a MC_STORE_RS_TRACE* variable is set (setup then calls `init_tracing`)."""
    return any(os.environ.get(v) for v in _TRACE_VARS)


def init_tracing() -> dict:
    """Open the trace sinks the MC_STORE_RS_TRACE* variables name (process-wide),
    as `os.environ` holds them now.

    Setup does this by itself when one is set; call it again after changing
    them. Returns where spans go: ``{"text", "text_file", "jsonl_file",
    "key_mode"}``. Raises StoreOperationError when a file cannot be opened
    or the key mode is neither ``hash`` nor ``full``.
    """
    env = os.environ
    settings = {
        "text": _truthy(env.get("MC_STORE_RS_TRACE", "")),
        "text_file": env.get("MC_STORE_RS_TRACE_FILE", ""),
        "jsonl_file": env.get("MC_STORE_RS_TRACE_JSONL_FILE", ""),
        "key_mode": env.get("MC_STORE_RS_TRACE_KEY_MODE", "hash"),
    }
    status, err = PTR(), PTR()
    rc = _lib.bind(_SIGNATURES).mc_store_init_tracing(
        json.dumps(settings).encode(), ctypes.byref(status), ctypes.byref(err)
    )
    if rc != 0:
        raise StoreOperationError("init_tracing", rc, _lib.take_string(err.value) or "")
    return json.loads(_lib.take_string(status.value) or "{}")


def _int_option(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def split_fleet_options(source: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split setup's arguments into (the others, the fleet options as the C ABI takes them).

    Namespace parts and watermarks absent from `source` come from their
    ``MC_STORE_RS_*`` variables. Raises ValueError for a bad value: a
    watermark outside 1..100, a low one not below the high one, routed
    writes without ``1 <= replica_count <= route_topk``.
    """
    rest = {k: v for k, v in source.items() if k not in FLEET_SETUP_KEYWORDS}
    given = {k: v for k, v in source.items() if k in FLEET_SETUP_KEYWORDS}
    for key, var in _ENV_FALLBACKS.items():
        if given.get(key) in (None, "") and os.environ.get(var, "") != "":
            given[key] = os.environ[var]
    namespace = {k: "" if given.get(k) is None else str(given[k]) for k in _NAMESPACE}
    options: dict[str, Any] = {"namespace": namespace}
    routed = _truthy(given.get("routed_writes", False))
    options["routed_writes"] = routed
    for key in ("replica_count", "route_topk"):
        if given.get(key) is not None:
            options[key] = _int_option(key, given[key])
    if routed:
        count = options.setdefault("replica_count", 1)
        topk = options.setdefault("route_topk", count)
        if not 1 <= count <= topk:
            raise ValueError(
                f"routed writes need 1 <= replica_count ({count}) <= route_topk ({topk})"
            )
    elif "replica_count" in options or "route_topk" in options:
        raise ValueError("replica_count and route_topk apply to routed writes (routed_writes=True)")
    high, low = (given.get(k) for k in _WATERMARKS)
    if high is not None or low is not None:
        hi = _DEFAULT_HIGH if high is None else _int_option(_WATERMARKS[0], high)
        lo = _DEFAULT_LOW if low is None else _int_option(_WATERMARKS[1], low)
        if not 1 <= hi <= 100:
            raise ValueError(f"eviction_high_watermark_percent={hi}: want 1..100")
        if not 0 <= lo < hi:
            raise ValueError(f"eviction_low_watermark_percent={lo}: want 0 <= low < high ({hi})")
        options[_WATERMARKS[0]], options[_WATERMARKS[1]] = hi, lo
    return rest, options


def _ids(segment_ids: str | Sequence[str] | None) -> list[str]:
    if segment_ids is None:
        return []
    ids = [segment_ids] if isinstance(segment_ids, str) else list(segment_ids)
    if not all(isinstance(i, str) and i for i in ids):
        raise ValueError(f"segment ids must be non-empty strings, not {segment_ids!r}")
    return ids


def _timeout_ms(timeout_seconds: float) -> int:
    if not timeout_seconds > 0:
        raise ValueError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
    return max(1, int(timeout_seconds * 1000))


class _FleetOps:
    """The fleet calls of `MooncakeDistributedStore`."""

    _handle: int

    @staticmethod
    def _fleet() -> ctypes.CDLL:
        return _lib.bind(_SIGNATURES)

    def _set_fleet_options(self, options: dict[str, Any]) -> None:
        """Hand `options` (from `split_fleet_options`) to the next native setup."""
        err = PTR()
        rc = self._fleet().mc_store_set_fleet_options(
            self._handle, json.dumps(options).encode(), ctypes.byref(err)
        )
        if rc != 0:
            raise StoreOperationError("setup", rc, _lib.take_string(err.value) or "")

    def _check(self, name: str, rc: int, err: PTR) -> None:
        if rc != 0:
            raise StoreOperationError(name, rc, _lib.take_string(err.value) or "")

    def segment_ids(self) -> list[str]:
        """The ids of this client's mounted segments, the setup segment first."""
        out = PTR()
        rc = self._fleet().mc_store_segment_ids(self._handle, ctypes.byref(out))
        if rc != 0:
            raise StoreOperationError("segment_ids", rc, _lib.last_error())
        return [i for i in (_lib.take_string(out.value) or "").split("\n") if i]

    def _set_mode(self, name: str, mode: int, segment_ids: str | Sequence[str] | None) -> None:
        ids, err = _ids(segment_ids), PTR()
        rc = self._fleet().mc_store_set_segment_mode(
            self._handle, _lib.key_array(ids), len(ids), mode, ctypes.byref(err)
        )
        self._check(name, rc, err)

    def activate(self, segment_ids: str | Sequence[str] | None = None) -> None:
        """Open this client's segments (or those given) to new replicas again.

        A retired segment cannot be activated: StoreOperationError with code
        -1010 (UNAVAILABLE_IN_CURRENT_STATUS).
        """
        self._set_mode("activate", _ACTIVE, segment_ids)

    def enter_standby(self, segment_ids: str | Sequence[str] | None = None) -> None:
        """Serve reads only: no new replicas land on the segments; theirs stay."""
        self._set_mode("enter_standby", _STANDBY, segment_ids)

    def enter_draining(self, segment_ids: str | Sequence[str] | None = None) -> None:
        """Mark the segments as leaving: reads only, ready for `evacuate_owned_replicas`."""
        self._set_mode("enter_draining", _DRAINING, segment_ids)

    def _evacuate(self, name: str, op: int, ids: list[str], timeout_seconds: float) -> dict:
        report, err = PTR(), PTR()
        rc = self._fleet().mc_store_evacuate(
            self._handle,
            op,
            _lib.key_array(ids),
            len(ids),
            _timeout_ms(timeout_seconds),
            ctypes.byref(report),
            ctypes.byref(err),
        )
        self._check(name, rc, err)
        return json.loads(_lib.take_string(report.value) or "{}")

    def drain_segment(
        self,
        segment_id: str | Sequence[str] | None = None,
        timeout_seconds: float = _DEFAULT_TIMEOUT,
    ) -> dict:
        """Drain a segment (all of this client's when None) before maintenance.

        The segment takes no new replicas; each replica on it is copied to
        another segment and then released; the call returns once it is
        empty and no reader can still hold one of its buffers. Reads keep
        succeeding throughout. Returns ``{"segments", "moves", "dropped",
        "passes"}``; raises StoreOperationError when the replicas cannot be
        placed elsewhere within `timeout_seconds`. The segment stays mounted
        (reads only) until `activate` or `retire_segment`.
        """
        return self._evacuate("drain_segment", _DRAIN, _ids(segment_id), timeout_seconds)

    def retire_segment(self, segment_id: str, timeout_seconds: float = _DEFAULT_TIMEOUT) -> dict:
        """Take a segment out of the pool for good: drained, then unmounted and freed."""
        return self._evacuate("retire_segment", _RETIRE, _ids(segment_id), timeout_seconds)

    def evacuate_owned_replicas(self, timeout_seconds: float = _DEFAULT_TIMEOUT) -> dict:
        """Move every replica off this client's segments, which must be in
        standby or draining; their mode stays. Returns as `drain_segment`."""
        return self._evacuate("evacuate_owned_replicas", _EVACUATE, [], timeout_seconds)

    def plan_handoff(self, segment_ids: str | Sequence[str] | None = None) -> dict:
        """Where the replicas on this client's segments would go if they were
        drained now; moves nothing.

        Returns ``{"items": [{"key", "size", "from_segment", "to_segment",
        "to_owner", "other_replicas"}], "objects", "bytes", "unplaceable"}``:
        items for this client's namespace, totals over every object.
        ``to_segment`` is "" where no other segment has room.
        """
        ids, plan, err = _ids(segment_ids), PTR(), PTR()
        rc = self._fleet().mc_store_plan_handoff(
            self._handle, _lib.key_array(ids), len(ids), ctypes.byref(plan), ctypes.byref(err)
        )
        self._check("plan_handoff", rc, err)
        return json.loads(_lib.take_string(plan.value) or "{}")

    def expand_local_memory(self, size: int) -> dict:
        """Contribute `size` more bytes (rounded up to 16 MiB) to the pool.

        Returns ``{"segment_ids", "allocated_size"}``; raises
        StoreOperationError on failure.
        """
        got = self.allocate_and_mount_segment(size)  # type: ignore[attr-defined]
        if got["ret"] != 0:
            raise StoreOperationError("expand_local_memory", -1, f"could not mount {size!r} bytes")
        return {"segment_ids": got["segment_ids"], "allocated_size": got["allocated_size"]}

    def query_route(self, key: str) -> dict | None:
        """Where `key`'s readable replicas live, or None when it has none.

        Returns ``{"key", "size", "replicas": [{"owner", "endpoint",
        "address", "size", "status"}]}``; ``owner`` is the storage owner's
        hostname (host:port), ``endpoint`` its Transfer Engine segment.
        Grants a read lease, as a get does.
        """
        raw = _lib.take_string(
            self._fleet().mc_store_replica_desc(self._handle, 1, _lib.key_array([key]))
        )
        if not raw:
            return None
        entry = json.loads(raw)[0]
        replicas = entry.get("replicas")
        if not replicas:
            return None
        return {
            "key": key,
            "size": int(replicas[0]["size"]),
            "replicas": [
                {
                    "owner": r["segment_name"],
                    "endpoint": r["transport_endpoint"],
                    "address": int(r["buffer_address"]),
                    "size": int(r["size"]),
                    "status": int(r["status"]),
                }
                for r in replicas
            ],
        }

    # -- observability ------------------------------------------------------

    def init_tracing(self) -> dict:
        """`init_tracing` (module function): open the sinks MC_STORE_RS_TRACE* name."""
        return init_tracing()

    def _json_call(self, name: str) -> dict:
        raw = _lib.take_string(getattr(self._fleet(), name)(self._handle))
        if raw is None:
            raise StoreOperationError(name, -600, "the store is not set up")
        return json.loads(raw)

    def breakdown(self) -> dict:
        """This client's span summary: ``{"runtime", "apis", "phases",
        "segments", "tracing"}``, as the metrics server's /breakdown."""
        return self._json_call("mc_store_breakdown")

    def metrics_text(self) -> str:
        """The breakdown as Prometheus text (the metrics server's /metrics);
        a dummy client (setup_dummy) returns its own counters instead."""
        if getattr(self, "_is_dummy", lambda: False)():
            return super().metrics_text()  # type: ignore[misc]
        raw = _lib.take_string(self._fleet().mc_store_metrics_text(self._handle))
        if raw is None:
            raise StoreOperationError("metrics_text", -600, "the store is not set up")
        return raw

    def start_metrics_server(self, port: int = 0, host: str = "127.0.0.1") -> str:
        """Serve /metrics, /breakdown and /tracing on host:port (0: a free
        port); returns the address ("host:port")."""
        bound, err = PTR(), PTR()
        rc = self._fleet().mc_store_start_metrics_server(
            self._handle, f"{host}:{int(port)}".encode(), ctypes.byref(bound), ctypes.byref(err)
        )
        self._check("start_metrics_server", rc, err)
        return _lib.take_string(bound.value) or ""

    def stop_metrics_server(self) -> bool:
        """Stop the metrics server; False if none ran."""
        return self._fleet().mc_store_stop_metrics_server(self._handle) == 0

    def metrics_server_address(self) -> str | None:
        """Where the metrics server listens, or None when it does not run."""
        raw = _lib.take_string(self._fleet().mc_store_metrics_server_address(self._handle))
        return raw or None
