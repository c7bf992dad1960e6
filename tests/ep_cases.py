"""Per-rank bodies of the multi-process EP tests (run by ep_harness.py)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from mooncake.mooncake_ep_buffer import Buffer


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepEP's similarity metric: 1 - 2*sum(x'y') / sum(x'^2 + y'^2), x' = x+1."""
    x, y = x.double() + 1, y.double() + 1
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom)


def structured_inputs(
    rank: int, t: int, n: int, h: int, e: int, k: int
) -> tuple[torch.Tensor, ...]:
    """DeepEP's test inputs: row = rank-128 except the last 128 columns = token index."""
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.full((t, h), float(rank - 128), dtype=torch.bfloat16)
    x[:, -128:] = torch.arange(t, dtype=torch.bfloat16).view(-1, 1)
    scores = torch.randn(t, e, generator=g).abs() + 1
    topk_idx = torch.topk(scores, k, dim=-1).indices.to(torch.int64)
    topk_weights = torch.randn(t, k, generator=g).abs()
    for _ in range(5):
        topk_idx[torch.randint(t, (1,), generator=g), torch.randint(k, (1,), generator=g)] = -1
    return x, topk_idx.contiguous(), topk_weights.float().contiguous()


def dequant(recv_x: object) -> torch.Tensor:
    if isinstance(recv_x, tuple):
        data, scales = recv_x
        return data.float() * scales.repeat_interleave(128, dim=-1)
    return recv_x.float()


def finish(event, hook) -> None:
    if hook is not None:
        hook()
    elif event.event is not None:
        event.current_stream_wait()


def check_dispatch(
    rank: int, world: int, recv_x, recv_count, handle, all_topk: list, alive: list[bool]
) -> None:
    src_info, layout_range, n, h, e = handle
    L = e // world
    deq = dequant(recv_x)
    fp8 = isinstance(recv_x, tuple)
    for le in range(L):
        ge = rank * L + le
        cnt = int(recv_count[le])
        want = [int((all_topk[j] == ge).sum()) if alive[j] else 0 for j in range(world)]
        # (a) counts
        assert cnt == int((layout_range[le] & 0xFFFFFFFF).sum()) == sum(want), (le, cnt, want)
        rows = deq[le, :cnt]
        if fp8:
            rows = rows.round()
        # (b) constant body, (c) token index columns = src_info
        body = rows[:, :-128]
        assert torch.equal(body.amin(1), body.amax(1)), "row body not constant"
        assert torch.equal(
            rows[:, -128:], src_info[le, :cnt].float().view(-1, 1).expand(-1, 128)
        ), "src_info mismatch"
        for j in range(world):
            # (d) per-source row counts, (e) block structure
            assert int((body[:, 0] == j - 128).sum()) == want[j], (le, j)
            lr = int(layout_range[le, j])
            begin, c = lr >> 32, lr & 0xFFFFFFFF
            assert c == want[j]
            if c:
                assert bool((body[begin : begin + c, 0] == j - 128).all()), (le, j, begin, c)


def identity_experts(recv_x, recv_count, world: int, n: int, h: int) -> torch.Tensor:
    y = dequant(recv_x).to(torch.bfloat16)
    return y.contiguous()


def reference(
    rank: int,
    world: int,
    n: int = 32,
    h: int = 512,
    e: int = 16,
    k: int = 4,
    disable_p2p: bool = False,
) -> None:
    """spec/ep.md §3.2 on every mode (sync, async, hook) for bf16 and fp8."""
    group = dist.group.WORLD
    buf = Buffer(group, Buffer.get_ep_buffer_size_hint(n, h, world, e), disable_p2p=disable_p2p)
    t = n - rank % 3
    x, topk_idx, topk_w = structured_inputs(rank, t, n, h, e, k)
    all_topk: list = [None] * world
    dist.all_gather_object(all_topk, topk_idx)
    alive = [True] * world
    active = torch.ones(world, dtype=torch.int32)
    for fp8 in (False, True):
        for mode in ("sync", "async", "hook"):
            for rep in range(2):  # both buffer halves for dispatch and combine
                kw = {"async_finish": mode == "async", "return_recv_hook": mode == "hook"}
                recv_x, recv_count, handle, event, hook = buf.dispatch(
                    x, topk_idx, active, n, e, timeout_us=20_000_000, use_fp8=fp8, **kw
                )
                finish(event, hook)
                check_dispatch(rank, world, recv_x, recv_count, handle, all_topk, alive)
                y = identity_experts(recv_x, recv_count, world, n, h)
                out = torch.empty_like(x) if rep else None
                combined, event, hook = buf.combine(
                    y, topk_idx, topk_w, active, 20_000_000, handle, out=out, **kw
                )
                finish(event, hook)
                if out is not None:
                    assert combined is out
                wsum = (topk_w * (topk_idx >= 0)).sum(1, keepdim=True)
                expected = x.float() * wsum
                diff = calc_diff(combined.float(), expected)
                assert not torch.isnan(combined.float()).any()
                assert diff < (9e-4 if fp8 else 1e-5), (fp8, mode, diff)
                assert active.tolist() == [1] * world
    # Two calls outstanding (double-buffered halves): two dispatches with
    # hooks, completed in order; then two async combines.
    x2, topk2, w2 = structured_inputs(rank + 7 * world, t, n, h, e, k)
    x2[:, :-128] = float(rank - 128)
    all_topk2: list = [None] * world
    dist.all_gather_object(all_topk2, topk2)
    ra = buf.dispatch(x, topk_idx, active, n, e, 20_000_000, use_fp8=False, return_recv_hook=True)
    rb = buf.dispatch(x2, topk2, active, n, e, 20_000_000, use_fp8=False, return_recv_hook=True)
    ra[4]()
    rb[4]()
    check_dispatch(rank, world, ra[0], ra[1], ra[2], all_topk, alive)
    check_dispatch(rank, world, rb[0], rb[1], rb[2], all_topk2, alive)
    ca = buf.combine(ra[0], topk_idx, topk_w, active, 20_000_000, ra[2], async_finish=True)
    cb = buf.combine(rb[0], topk2, w2, active, 20_000_000, rb[2], async_finish=True)
    ca[1].current_stream_wait()
    cb[1].current_stream_wait()
    for (xx, ii, ww), c in (((x, topk_idx, topk_w), ca), ((x2, topk2, w2), cb)):
        expected = xx.float() * (ww * (ii >= 0)).sum(1, keepdim=True)
        assert calc_diff(c[0].float(), expected) < 1e-5
    print(f"rank {rank}: reference OK")
    buf.destroy()


def rank_death(
    rank: int,
    world: int,
    dead: int,
    n: int = 16,
    h: int = 256,
    e: int = 8,
    k: int = 3,
    timeout_us: int = 1_000_000,
) -> None:
    """One rank dies after the rendezvous; survivors drop it and its experts."""
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(n, h, world, e))
    x, topk_idx, topk_w = structured_inputs(rank, n, n, h, e, k)
    all_topk: list = [None] * world
    dist.all_gather_object(all_topk, topk_idx)
    if rank == dead:
        os._exit(0)  # dies before dispatch, without any goodbye
    L = e // world
    alive = [r != dead for r in range(world)]
    active = torch.ones(world, dtype=torch.int32)
    for rnd in range(2):  # the second round skips the dead rank without waiting
        t0 = time.monotonic()
        recv_x, recv_count, handle, _, _ = buf.dispatch(
            x, topk_idx, active, n, e, timeout_us, use_fp8=False
        )
        print(f"rank {rank} round {rnd}: dispatch took {time.monotonic() - t0:.3f}s")
        assert active.tolist() == [0 if r == dead else 1 for r in range(world)], active
        check_dispatch(rank, world, recv_x, recv_count, handle, all_topk, alive)
        y = identity_experts(recv_x, recv_count, world, n, h)
        combined, _, _ = buf.combine(y, topk_idx, topk_w, active, timeout_us, handle)
        owner_alive = (topk_idx >= 0) & (topk_idx // L != dead)
        expected = x.float() * (topk_w * owner_alive).sum(1, keepdim=True)
        assert calc_diff(combined.float(), expected) < 1e-5
        torch.testing.assert_close(combined.float(), expected, rtol=1e-2, atol=1e-2)
    print(f"rank {rank}: rank_death OK")


class MoE(torch.nn.Module):
    """A small MoE layer: softmax router, top-k, experts as linear layers."""

    def __init__(self, h: int, e: int, k: int) -> None:
        super().__init__()
        self.k = k
        self.router = torch.nn.Linear(h, e, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(h, h) for _ in range(e))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(self.router(x.float()), dim=-1)
        w, idx = torch.topk(probs, self.k, dim=-1)
        return idx.to(torch.int64).contiguous(), w.float().contiguous()

    def expert(self, i: int, rows: torch.Tensor) -> torch.Tensor:
        return self.experts[i](rows.float()).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Single-process reference: the same math, no communication."""
        idx, w = self.route(x)
        acc = torch.zeros(x.shape, dtype=torch.float32)
        for e in range(len(self.experts)):
            sel = idx == e
            tok = sel.any(1).nonzero().flatten()
            if tok.numel() == 0:
                continue
            y = self.expert(e, x[tok]).float()
            acc[tok] += y * (w * sel).sum(1)[tok].view(-1, 1)
        return acc.to(torch.bfloat16)


def moe_layer(rank: int, world: int, n: int = 24, h: int = 256, e: int = 8, k: int = 2) -> None:
    """The MoE layer through dispatch/combine equals the one-process layer."""
    torch.manual_seed(0)  # same weights everywhere
    model = MoE(h, e, k)
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(n, h, world, e))
    g = torch.Generator().manual_seed(50 + rank)
    t = n - rank
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    L = e // world
    with torch.no_grad():
        idx, w = model.route(x)
        recv_x, recv_count, handle, _, _ = buf.dispatch(x, idx, None, n, e, -1, use_fp8=False)
        y = torch.zeros_like(recv_x)
        for le in range(L):
            c = int(recv_count[le])
            if c:
                y[le, :c] = model.expert(rank * L + le, recv_x[le, :c])
        out, _, _ = buf.combine(y, idx, w, None, -1, handle)
        ref = model(x)
    torch.testing.assert_close(out.float(), ref.float(), rtol=1.6e-2, atol=1e-2)
    # Everyone checks the whole batch too: gather and compare on rank 0.
    outs: list = [None] * world
    dist.all_gather_object(outs, (x, out))
    if rank == 0:
        for xr, outr in outs:
            torch.testing.assert_close(outr.float(), model(xr).float(), rtol=1.6e-2, atol=1e-2)
    print(
        f"rank {rank}: moe_layer OK, max |diff| "
        f"{float((out.float() - ref.float()).abs().max()):.3g}"
    )


def preconditions(rank: int, world: int) -> None:
    """Bad calls fail with clear errors and leave the buffer usable."""
    import pytest

    n, h, e, k = 8, 256, 4 * world, 2
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(n, h, world, e))
    x = torch.zeros(n, h, dtype=torch.bfloat16)
    idx = torch.zeros(n, k, dtype=torch.int64)
    idx[:, 1] = 1
    act = torch.ones(world, dtype=torch.int32)
    with pytest.raises(ValueError, match="exceed"):
        buf.dispatch(
            torch.zeros(n + 1, h, dtype=torch.bfloat16),
            torch.zeros(n + 1, k, dtype=torch.int64),
            act,
            n,
            e,
            -1,
        )
    with pytest.raises(ValueError, match="multiple of 128"):
        buf.dispatch(torch.zeros(n, 200, dtype=torch.bfloat16), idx, act, n, e, -1)
    with pytest.raises(ValueError, match="divisible"):
        buf.dispatch(x, idx, act, n, e + 1, -1)
    with pytest.raises(ValueError, match="top-k"):
        buf.dispatch(x, torch.zeros(n, 12, dtype=torch.int64), act, n, e, -1)
    with pytest.raises(ValueError, match="get_ep_buffer_size_hint"):
        buf.dispatch(torch.zeros(n, 2 * h, dtype=torch.bfloat16), idx, act, n, e, -1)
    with pytest.raises(TypeError, match="bfloat16"):
        buf.dispatch(x.float(), idx, act, n, e, -1)
    with pytest.raises(TypeError, match="int64"):
        buf.dispatch(x, idx.int(), act, n, e, -1)
    with pytest.raises(ValueError, match="outside"):
        buf.dispatch(x, idx + e, act, n, e, -1)
    with pytest.raises(ValueError, match="contiguous"):
        buf.dispatch(torch.zeros(h, n, dtype=torch.bfloat16).t(), idx, act, n, e, -1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        buf.dispatch(x, idx, act, n, e, -1, async_finish=True, return_recv_hook=True)
    # Still usable: a real round (every rank made the same failed calls).
    recv_x, recv_count, handle, _, _ = buf.dispatch(x, idx, act, n, e, 10_000_000, use_fp8=False)
    assert int(recv_count.sum()) == (2 * n * world if rank == 0 else 0)
    y = recv_x.clone()
    w = torch.ones(n, k)
    with pytest.raises(ValueError, match="must be"):
        buf.combine(y[:, :-1], idx, w, act, -1, handle)
    with pytest.raises(TypeError, match="float32"):
        buf.combine(y, idx, w.double(), act, -1, handle)
    with pytest.raises(NotImplementedError):
        buf.combine(y, idx, w, act, -1, handle, zero_copy=True)
    out, _, _ = buf.combine(y, idx, w, act, 10_000_000, handle)
    torch.testing.assert_close(out, x)
    print(f"rank {rank}: preconditions OK")


def update_member(rank: int, world: int, n: int = 8, h: int = 256, e: int = 4) -> None:
    """update_ep_member() re-runs the rendezvous; calls work before and after."""
    buf = Buffer(dist.group.WORLD, Buffer.get_ep_buffer_size_hint(n, h, world, e))
    x, idx, w = structured_inputs(rank, n, n, h, e, 2)
    all_topk: list = [None] * world
    dist.all_gather_object(all_topk, idx)
    act = torch.ones(world, dtype=torch.int32)
    for step in range(3):
        recv_x, recv_count, handle, _, _ = buf.dispatch(
            x, idx, act, n, e, 10_000_000, use_fp8=False
        )
        check_dispatch(rank, world, recv_x, recv_count, handle, all_topk, [True] * world)
        out, _, _ = buf.combine(recv_x, idx, w, act, 10_000_000, handle)
        expected = x.float() * (w * (idx >= 0)).sum(1, keepdim=True)
        assert calc_diff(out.float(), expected) < 1e-5
        if step == 1:
            buf.update_ep_member()
    print(f"rank {rank}: update_member OK")


def pending_receive_at_close(rank: int, world: int, n: int = 8, h: int = 256, e: int = 4) -> None:
    """Rank 0's receives wait forever for rank 1, which never sends, while the
    buffer goes away: dropping the last reference to it (then to the pending
    EventHandle), or destroying it, cancels the receives instead of crashing
    the process or hanging it."""
    import gc

    import pytest

    size = Buffer.get_ep_buffer_size_hint(n, h, world, e)
    x, idx, _ = structured_inputs(rank, n, n, h, e, 2)
    act = torch.ones(world, dtype=torch.int32)

    buf = Buffer(dist.group.WORLD, size)
    if rank == 0:
        _, _, _, event, _ = buf.dispatch(x, idx, act, n, e, -1, use_fp8=False, async_finish=True)
        del buf  # the pending EventHandle keeps the buffer alive...
        gc.collect()
        assert not event.event.query()
        del event  # ...until it goes too: then the receive is canceled
        gc.collect()
    dist.barrier()

    buf = Buffer(dist.group.WORLD, size)
    if rank == 0:
        _, _, _, event, _ = buf.dispatch(x, idx, act, n, e, -1, use_fp8=False, async_finish=True)
        _, _, _, _, hook = buf.dispatch(
            x, idx, act, n, e, -1, use_fp8=False, return_recv_hook=True
        )
        buf.destroy()
        with pytest.raises(RuntimeError, match="closed"):
            event.synchronize()
        with pytest.raises(RuntimeError, match="closed"):
            hook()
        with pytest.raises(RuntimeError, match="closed"):
            buf.dispatch(x, idx, act, n, e, -1, use_fp8=False)
    dist.barrier()
    print(f"rank {rank}: pending_receive_at_close OK")
