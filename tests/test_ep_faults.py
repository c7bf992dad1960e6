"""EP fault tolerance: a rank that dies before dispatch is timed out, marked 0
in active_ranks, and its tokens and its experts' combine terms are dropped."""

from __future__ import annotations

from ep_harness import launch


def test_rank_dies_before_dispatch() -> None:
    outs = launch(4, "rank_death", timeout=120, dead=3, timeout_us=1_000_000)
    survivors = [o for r, o in enumerate(outs) if r != 3]
    assert all("rank_death OK" in o for o in survivors)
