"""A small MoE layer (router + linear experts) run through dispatch/combine on
4 ranks equals the same layer computed in one process."""

from __future__ import annotations

from ep_harness import launch


def test_moe_layer_matches_single_process() -> None:
    outs = launch(4, "moe_layer", timeout=120)
    assert all("moe_layer OK" in o for o in outs)
