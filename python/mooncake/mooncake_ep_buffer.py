"""mooncake.mooncake_ep_buffer: MoE token dispatch and combine (upstream's legacy ``Buffer``).

A CPU implementation of upstream Mooncake's expert-parallel ``Buffer`` (a
DeepEP low-latency clone with fault tolerance). Pack, transport, waits and
reductions run in Go (package ``ep`` of libmooncake.so): each rank writes its
messages and then its counts straight into the other ranks' EP buffers through
the Transfer Engine (shared memory on one host, TCP across hosts). See
docs/ep.md for the layout, the protocol and what differs from upstream.

Example (one process per rank, any torch.distributed group)::

    buf = Buffer(group, Buffer.get_ep_buffer_size_hint(N, H, R, E))
    active = torch.ones(R, dtype=torch.int32)
    recv_x, recv_count, handle, event, hook = buf.dispatch(
        x, topk_idx, active, N, E, timeout_us=-1, use_fp8=False)
    y = experts(recv_x, recv_count)               # [L, R*N, H] bf16
    out, event, hook = buf.combine(y, topk_idx, topk_weights, active, -1, handle)

Tensors are CPU or CUDA tensors. CUDA tensors are staged through host memory
(``mooncake._cuda_stage``) and results come back as CUDA tensors on the same
GPU. ``active_ranks[r]`` is set to 0 in place when rank r misses
``timeout_us`` (-1: wait forever); it is then skipped.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from mooncake import _lib
from mooncake._cuda_stage import CudaStage

__all__ = ["Buffer", "EventHandle", "EventOverlap"]

_MODE_SYNC, _MODE_HOOK, _MODE_ASYNC = 0, 1, 2
_MAX_TOPK = 11
_CODE_INVALID_ARGUMENT = -1

_u64 = ctypes.c_uint64
_i64 = ctypes.c_int64
_int = ctypes.c_int
_ptr = ctypes.c_void_p
_errp = ctypes.POINTER(ctypes.c_void_p)


class EpCall(ctypes.Structure):
    """mooncake.h's ``mc_ep_call``: the mode, shape and liveness of a call."""

    _fields_ = [
        ("mode", ctypes.c_int32),
        ("num_tokens", _i64),
        ("top_k", _i64),
        ("max_tokens", _i64),
        ("hidden", _i64),
        ("num_experts", _i64),
        ("timeout_us", _i64),
        ("active", _ptr),
    ]


class DispatchArgs(ctypes.Structure):
    """mooncake.h's ``mc_ep_dispatch_args`` (tests/test_package.py checks the layout)."""

    _fields_ = [
        ("call", EpCall),
        ("fp8", ctypes.c_int32),
        ("x", _ptr),
        ("topk_idx", _ptr),
        ("recv_x", _ptr),
        ("recv_scales", _ptr),
        ("recv_count", _ptr),
        ("src_info", _ptr),
        ("layout_range", _ptr),
    ]


class CombineArgs(ctypes.Structure):
    """mooncake.h's ``mc_ep_combine_args`` (tests/test_package.py checks the layout)."""

    _fields_ = [
        ("call", EpCall),
        ("x", _ptr),
        ("topk_idx", _ptr),
        ("topk_weights", _ptr),
        ("src_info", _ptr),
        ("layout_range", _ptr),
        ("out", _ptr),
    ]


_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "mc_ep_size_hint": ([_i64, _i64, _i64, _i64], _i64),
    "mc_ep_buffer_create": ([_int, _int, _i64, ctypes.c_char_p, _int, _errp], _u64),
    "mc_ep_buffer_self": ([_u64], _ptr),
    "mc_ep_buffer_connect": ([_u64, ctypes.c_char_p, _errp], _int),
    "mc_ep_buffer_destroy": ([_u64], None),
    "mc_ep_dispatch": ([_u64, ctypes.POINTER(DispatchArgs), ctypes.POINTER(_u64), _errp], _int),
    "mc_ep_combine": ([_u64, ctypes.POINTER(CombineArgs), ctypes.POINTER(_u64), _errp], _int),
    "mc_ep_op_wait": ([_u64, _errp], _int),
    "mc_ep_op_done": ([_u64], _int),
}


def _lib_ep() -> ctypes.CDLL:
    return _lib.bind(_SIGNATURES)


def _check(rc: int, err: ctypes.c_void_p) -> None:
    if rc == 0:
        return
    msg = _lib.take_string(err.value) or _lib.last_error() or f"error {rc}"
    if rc == _CODE_INVALID_ARGUMENT:
        raise ValueError(msg)
    raise RuntimeError(f"{msg} (error {rc})")


def _need(cond: bool, exc: type[Exception], msg: str) -> None:
    if not cond:
        raise exc(f"mooncake ep: {msg}")


# Output tensors are recycled (see Buffer._empty): fresh CPU allocations of
# this size are page-faulted in on every call, which costs more than the
# transfer itself. Recycling needs to know that nobody holds the tensor or a
# view of it; torch exposes the storage's use count only privately, so
# without it every call allocates.
_storage_use_count = getattr(torch._C, "_storage_Use_Count", None)
_POOL_PER_SHAPE = 4


def _only_pool_holds(t: torch.Tensor) -> bool:
    """True when `t` is referenced by the pool list alone (no views, no names)."""
    if _storage_use_count is None:
        return False
    # refs: pool list, caller's loop variable, this parameter, getrefcount's argument
    if sys.getrefcount(t) > 4:
        return False
    # the TensorImpl alone (no view, no storage object)
    return _storage_use_count(t.untyped_storage()._cdata) == 1


def _contig(t: torch.Tensor, name: str, dtype: torch.dtype, dim: int) -> None:
    _need(isinstance(t, torch.Tensor), TypeError, f"{name} must be a tensor")
    _need(t.dtype == dtype, TypeError, f"{name} must be {dtype}, got {t.dtype}")
    _need(t.dim() == dim, ValueError, f"{name} must have {dim} dims, got shape {tuple(t.shape)}")
    _need(
        t.device.type in ("cpu", "cuda"),
        ValueError,
        f"{name} must be a CPU or CUDA tensor, got {t.device}",
    )
    _need(t.is_contiguous(), ValueError, f"{name} must be contiguous")


class _PendingOp:
    """A receive the Go side still runs or awaits, and what it must keep alive.

    It holds its ``Buffer`` (so the buffer, and the memory the receive reads,
    outlive it) and the call's tensors (which the receive writes). Dropped
    while still pending, it hands both to the buffer, which keeps them until
    the receive has finished or ``destroy`` has canceled it: dropping the last
    reference to anything never frees memory that Go still touches.
    """

    def __init__(
        self, op: int, buffer: Buffer, keep: tuple, post: Callable[[], None] | None = None
    ) -> None:
        self._op = op
        self._buffer: Buffer | None = buffer
        self._keep: tuple | None = keep
        self._post = post  # after a successful receive: copies back to the GPU

    def _wait(self) -> None:
        """Complete the receive (run it, or wait for it) and release what it held."""
        if not self._op:
            return
        op, self._op = self._op, 0
        err = ctypes.c_void_p()
        rc = _lib_ep().mc_ep_op_wait(op, ctypes.byref(err))
        if rc != 0 and _lib_ep().mc_ep_op_done(op) == 0:
            self._op = op  # refused (hooks out of order): still pending
            _check(rc, err)
        post, self._post = self._post, None
        try:
            _check(rc, err)
            if post is not None:
                post()
        finally:
            self._buffer, self._keep = None, None

    def __del__(self) -> None:
        op, buffer = getattr(self, "_op", 0), getattr(self, "_buffer", None)
        if op and buffer is not None:
            try:
                buffer._adopt(op, self._keep or ())
            except Exception:  # interpreter shutdown
                pass


class EventHandle(_PendingOp):
    """Completion of an ``async_finish`` call (upstream's native EventHandle)."""

    def synchronize(self) -> None:
        """Block until the call's receive has finished.

        Raises RuntimeError when it failed, e.g. because the buffer was
        destroyed meanwhile (the receive was canceled).
        """
        self._wait()

    def current_stream_wait(self, stream_ptr: int | None = None) -> None:
        """Waits like `synchronize`: results staged back to a GPU are copied on the
        current stream before it returns, so later work on that stream sees them."""
        del stream_ptr
        self.synchronize()

    def query(self) -> bool:
        """True when the call has finished."""
        return not self._op or bool(_lib_ep().mc_ep_op_done(self._op))


class _RecvHook(_PendingOp):
    """The ``hook`` of a ``return_recv_hook`` call: calling it runs the receive."""

    def __call__(self) -> None:
        self._wait()  # out-of-order hooks raise and stay pending


class EventOverlap:
    """Upstream's EventOverlap: wraps an EventHandle (async_finish) or None."""

    def __init__(
        self, event: EventHandle | None = None, extra_tensors: tuple | None = None
    ) -> None:
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        assert self.event is not None
        self.event.current_stream_wait()

    def synchronize(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def __enter__(self) -> EventOverlap:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.event is not None:
            self.event.current_stream_wait()


class Buffer:
    """Expert-parallel dispatch/combine buffer (upstream's legacy ``Buffer``).

    Create one per process. ``group`` may be any torch.distributed group whose
    backend can ``all_gather_object`` (``mooncake``, ``gloo``): rendezvous only
    exchanges each rank's Transfer Engine segment name and EP buffer address.
    """

    _warned_active = False

    def __init__(
        self, group: dist.ProcessGroup, num_ep_buffer_bytes: int = 0, disable_p2p: bool = False
    ) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.group_size = dist.get_world_size(group)
        self.num_ep_buffer_bytes = int(num_ep_buffer_bytes)
        self.disable_p2p = bool(disable_p2p)
        # "" lets the runtime choose the address of the route to MASTER_ADDR.
        host = os.environ.get("MOONCAKE_EP_LOCAL_HOSTNAME", "").strip()
        err = ctypes.c_void_p()
        self._h = _lib_ep().mc_ep_buffer_create(
            self.rank,
            self.group_size,
            self.num_ep_buffer_bytes,
            host.encode(),
            int(self.disable_p2p),
            ctypes.byref(err),
        )
        if not self._h:
            _check(-1 if err.value else -302, err)
        self._pool: dict[tuple, list[torch.Tensor]] = {}
        # Receives whose handle or hook was dropped while pending, with the
        # tensors they write (see _PendingOp).
        self._orphans: list[tuple[int, tuple]] = []
        self.connect()

    # ------------------------------------------------------------------ setup

    @staticmethod
    def get_ep_buffer_size_hint(
        num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int, num_experts: int
    ) -> int:
        """Bytes per rank: ``16*E + 8*E*N*(16+H)`` (upstream's formula)."""
        return int(
            _lib_ep().mc_ep_size_hint(
                num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts
            )
        )

    def connect(self, is_update: bool = False) -> None:
        """Exchange segment names and buffer addresses over the group and connect."""
        del is_update
        me = json.loads(_lib.take_string(_lib_ep().mc_ep_buffer_self(self._live())) or "null")
        peers: list[Any] = [None] * self.group_size
        dist.all_gather_object(peers, me, group=self.group)
        err = ctypes.c_void_p()
        _check(
            _lib_ep().mc_ep_buffer_connect(self._h, json.dumps(peers).encode(), ctypes.byref(err)),
            err,
        )
        # No rank may send into a buffer whose signals are still being cleared.
        done: list[Any] = [None] * self.group_size
        dist.all_gather_object(done, True, group=self.group)

    def update_ep_member(self) -> None:
        """Reconnect after the process group recovered ranks (collective)."""
        self.connect(True)

    def destroy(self) -> None:
        """Free the EP buffer (the object is unusable afterwards).

        Pending receives are canceled first (their ``synchronize()`` or hook
        then raises RuntimeError); the memory is freed only once nothing
        uses it.
        """
        if getattr(self, "_h", 0):
            _lib_ep().mc_ep_buffer_destroy(self._h)
            self._h = 0
        for op, _ in getattr(self, "_orphans", ()):
            _lib_ep().mc_ep_op_wait(op, None)  # canceled: frees the handle at once
        self._orphans = []

    def _live(self) -> int:
        """The native handle; RuntimeError once the buffer was destroyed."""
        if not getattr(self, "_h", 0):
            raise RuntimeError("mooncake ep: the buffer is closed (destroy() was called)")
        return self._h

    def _adopt(self, op: int, keep: tuple) -> None:
        """Keep a dropped pending receive's tensors until it has finished."""
        self._orphans.append((op, keep))

    def _reap(self) -> None:
        """Release the orphans whose receive has finished."""
        alive = []
        for op, keep in self._orphans:
            if _lib_ep().mc_ep_op_done(op):
                _lib_ep().mc_ep_op_wait(op, None)
            else:
                alive.append((op, keep))
        self._orphans = alive

    def __del__(self) -> None:
        try:
            self.destroy()
        except Exception:
            pass

    # --------------------------------------------------------------- helpers

    def _active_ranks_tensor(
        self, active_ranks: torch.Tensor | None, stage: CudaStage
    ) -> torch.Tensor:
        if active_ranks is not None and active_ranks.numel() == self.group_size:
            _contig(active_ranks.view(-1), "active_ranks", torch.int32, 1)
            host = stage.host(active_ranks)
            stage.into(active_ranks, host)  # failures clear entries: show them on the GPU
            return host
        if active_ranks is not None:
            warnings.warn(
                f"mooncake ep: active_ranks has {active_ranks.numel()} entries "
                f"for {self.group_size} ranks; "
                "using a fresh all-ones mask (updates will not be visible to the caller)",
                stacklevel=3,
            )
        elif not Buffer._warned_active:
            Buffer._warned_active = True
            warnings.warn(
                "mooncake ep: active_ranks=None: assuming every rank is active", stacklevel=3
            )
        return torch.ones(self.group_size, dtype=torch.int32)

    def _finish(
        self, mode: int, op: ctypes.c_uint64, keep: tuple, stage: CudaStage
    ) -> tuple[EventOverlap, Callable[[], None] | None]:
        """The call's event and hook; staged CUDA results are copied back when it completes."""
        self._reap()
        post = stage.finish if stage.active else None
        if mode == _MODE_HOOK:
            return EventOverlap(None), _RecvHook(op.value, self, keep, post)
        if mode == _MODE_ASYNC:
            return EventOverlap(EventHandle(op.value, self, keep, post), extra_tensors=keep), None
        if post is not None:
            post()
        return EventOverlap(None), None

    def _empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """torch.empty(shape, dtype), reusing an earlier output nobody holds anymore.

        Only tensors the caller has dropped (no reference, no view) are reused,
        so returned tensors behave like fresh ones; their unused rows hold stale
        values, as upstream's torch.empty outputs hold garbage.
        """
        pool = self._pool.setdefault((shape, dtype), [])
        for t in pool:
            if _only_pool_holds(t):
                return t
        t = torch.empty(shape, dtype=dtype)
        if _storage_use_count is not None and len(pool) < _POOL_PER_SHAPE:
            pool.append(t)
        return t

    @staticmethod
    def _mode(async_finish: bool, return_recv_hook: bool) -> int:
        _need(
            not (async_finish and return_recv_hook),
            ValueError,
            "async_finish and return_recv_hook are mutually exclusive",
        )
        return _MODE_ASYNC if async_finish else _MODE_HOOK if return_recv_hook else _MODE_SYNC

    # ------------------------------------------------------------- dispatch

    def dispatch(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        active_ranks: torch.Tensor | None,
        num_max_dispatch_tokens_per_rank: int,
        num_experts: int,
        timeout_us: int = -1,
        use_fp8: bool | None = None,
        async_finish: bool = False,
        return_recv_hook: bool = False,
    ) -> tuple[Any, torch.Tensor, tuple, EventOverlap, Callable[[], None] | None]:
        """Send each token to the ranks owning its top-k experts.

        Returns ``(recv_x, recv_count, handle, event, hook)``: ``recv_x`` is bf16
        ``[L, R*N, H]``, or with ``use_fp8`` (default True, as upstream) the pair
        ``(e4m3 [L, R*N, H], float32 scales [L, R*N, H/128])`` (column-major
        scales); ``recv_count`` int32 ``[L]``; ``handle = (src_info [L, R*N]
        int32, layout_range [L, R] int64, N, H, E)``. Only the first
        ``recv_count[l]`` rows of expert ``l`` are valid.
        """
        mode = self._mode(async_finish, return_recv_hook)
        fp8 = True if use_fp8 is None else bool(use_fp8)
        _contig(x, "x", torch.bfloat16, 2)
        _contig(topk_idx, "topk_idx", torch.int64, 2)
        stage = CudaStage(x, topk_idx, active_ranks)
        x, topk_idx = stage.host(x), stage.host(topk_idx)
        T, H = x.shape
        K = topk_idx.shape[1]
        R, N, E = self.group_size, int(num_max_dispatch_tokens_per_rank), int(num_experts)
        _need(
            topk_idx.shape[0] == T, ValueError, f"topk_idx has {topk_idx.shape[0]} rows, x has {T}"
        )
        _need(T <= N, ValueError, f"{T} tokens exceed num_max_dispatch_tokens_per_rank={N}")
        _need(H % 128 == 0, ValueError, f"hidden={H} is not a multiple of 128")
        _need(E > 0 and E % R == 0, ValueError, f"num_experts={E} is not divisible by {R} ranks")
        _need(0 < K <= _MAX_TOPK, ValueError, f"top-k={K} out of range [1, {_MAX_TOPK}]")
        active = self._active_ranks_tensor(active_ranks, stage)
        L = E // R
        recv_x = self._empty((L, R * N, H), torch.float8_e4m3fn if fp8 else torch.bfloat16)
        scales = self._empty((L, H // 128, R * N), torch.float32) if fp8 else None
        recv_count = torch.empty(L, dtype=torch.int32)
        src_info = self._empty((L, R * N), torch.int32)
        layout_range = torch.empty((L, R), dtype=torch.int64)
        op, err = _u64(0), ctypes.c_void_p()
        args = DispatchArgs(
            call=EpCall(mode, T, K, N, H, E, int(timeout_us), active.data_ptr()),
            fp8=int(fp8),
            x=x.data_ptr(),
            topk_idx=topk_idx.data_ptr(),
            recv_x=recv_x.data_ptr(),
            recv_scales=scales.data_ptr() if scales is not None else None,
            recv_count=recv_count.data_ptr(),
            src_info=src_info.data_ptr(),
            layout_range=layout_range.data_ptr(),
        )
        rc = _lib_ep().mc_ep_dispatch(
            self._live(), ctypes.byref(args), ctypes.byref(op), ctypes.byref(err)
        )
        _check(rc, err)
        keep = (x, topk_idx, active, recv_x, scales, recv_count, src_info, layout_range)
        recv_x, recv_count = stage.output(recv_x), stage.output(recv_count)
        src_info, layout_range = stage.output(src_info), stage.output(layout_range)
        scales = stage.output(scales) if scales is not None else None
        event, hook = self._finish(mode, op, keep, stage)
        out_x: Any = (recv_x, scales.transpose(1, 2)) if scales is not None else recv_x
        return out_x, recv_count, (src_info, layout_range, N, H, E), event, hook

    # -------------------------------------------------------------- combine

    def combine(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor,
        topk_weights: torch.Tensor,
        active_ranks: torch.Tensor | None,
        timeout_us: int,
        handle: tuple,
        zero_copy: bool = False,
        async_finish: bool = False,
        return_recv_hook: bool = False,
        out: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, EventOverlap, Callable[[], None] | None]:
        """Return each token's weighted sum of its experts' outputs.

        ``combined[t] = sum_k w[t,k] * y_{e_k}[t]`` accumulated in float32 over
        entries ``e_k >= 0`` whose owner is alive (no renormalisation), as bf16
        ``[T, H]`` (written into ``out`` when given).
        """
        if zero_copy:
            raise NotImplementedError(
                "mooncake ep: zero_copy combine is not supported (as upstream)"
            )
        mode = self._mode(async_finish, return_recv_hook)
        src_info, layout_range, N, H, E = handle
        R = self.group_size
        L = E // R
        _contig(x, "x", torch.bfloat16, 3)
        _contig(topk_idx, "topk_idx", torch.int64, 2)
        _contig(topk_weights, "topk_weights", torch.float32, 2)
        _contig(src_info, "handle src_info", torch.int32, 2)
        _contig(layout_range, "handle layout_range", torch.int64, 2)
        stage = CudaStage(x, topk_idx, topk_weights, src_info, layout_range, active_ranks, out)
        x, topk_idx, topk_weights = stage.host(x), stage.host(topk_idx), stage.host(topk_weights)
        src_info, layout_range = stage.host(src_info), stage.host(layout_range)
        _need(
            tuple(x.shape) == (L, R * N, H),
            ValueError,
            f"x must be [{L}, {R * N}, {H}], got {tuple(x.shape)}",
        )
        _need(
            tuple(src_info.shape) == (L, R * N) and tuple(layout_range.shape) == (L, R),
            ValueError,
            "handle does not match this buffer",
        )
        T, K = topk_idx.shape
        _need(
            tuple(topk_weights.shape) == (T, K),
            ValueError,
            "topk_weights must have topk_idx's shape",
        )
        _need(T <= N, ValueError, f"{T} tokens exceed num_max_dispatch_tokens_per_rank={N}")
        _need(0 < K <= _MAX_TOPK, ValueError, f"top-k={K} out of range [1, {_MAX_TOPK}]")
        if out is None:
            out = self._empty((T, H), torch.bfloat16)
            result = stage.output(out)
        else:
            _contig(out, "out", torch.bfloat16, 2)
            _need(tuple(out.shape) == (T, H), ValueError, f"out must be [{T}, {H}]")
            result = out
            if out.is_cuda:
                out = self._empty((T, H), torch.bfloat16)
                stage.into(result, out)
        active = self._active_ranks_tensor(active_ranks, stage)
        op, err = _u64(0), ctypes.c_void_p()
        args = CombineArgs(
            call=EpCall(mode, T, K, N, H, E, int(timeout_us), active.data_ptr()),
            x=x.data_ptr(),
            topk_idx=topk_idx.data_ptr(),
            topk_weights=topk_weights.data_ptr(),
            src_info=src_info.data_ptr(),
            layout_range=layout_range.data_ptr(),
            out=out.data_ptr(),
        )
        rc = _lib_ep().mc_ep_combine(
            self._live(), ctypes.byref(args), ctypes.byref(op), ctypes.byref(err)
        )
        _check(rc, err)
        keep = (x, topk_idx, topk_weights, active, src_info, layout_range, out)
        event, hook = self._finish(mode, op, keep, stage)
        return result, event, hook

    def get_next_combine_buffer(self, handle: tuple) -> torch.Tensor:
        """Not supported (as upstream since commit 90c5ce09)."""
        raise NotImplementedError(
            "mooncake ep: get_next_combine_buffer is not supported (as upstream)"
        )
