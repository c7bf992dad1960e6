"""c10d's fault-tolerance reconfigure API (torch >= 2.15: ``dist._supports_reconfigure``,
``dist._get_reconfigure_handle``, ``dist._reconfigure``) on the "mooncake" backend
(torch_plugin/reconfigure.cpp; docs/collectives-faults.md, "c10d reconfigure").

A handle names the caller's slot; reconfigure makes the active slots exactly the
handles' ones. Four ranks (multi-process, loopback; tests/pg_harness.py): ranks 0-2
reconfigure to themselves (rank 3 is deactivated and does not call), then all four
reconfigure back (rank 3 rejoins), each step checked with the active_ranks mirror, the
world size and an all_reduce over the members. Skipped on a torch without the API
(2.9.1, the pinned one: `make test-torch-next` runs it against the newest).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from pg_harness import launch, open_gate, wait_gate

pytestmark = pytest.mark.skipif(
    not hasattr(dist, "_reconfigure"), reason=f"torch {torch.__version__} has no c10d reconfigure"
)


def _store():
    return dist.distributed_c10d._get_default_store()


def _all_reduce_ones() -> float:
    t = torch.ones(8)
    dist.all_reduce(t)
    return float(t[0])


def _active() -> list[int]:
    from mooncake import pg

    return pg.get_active_ranks(dist.group.WORLD).tolist()


def _refused(match: str, **kwargs: object) -> None:
    with pytest.raises(RuntimeError, match=match):
        dist._reconfigure(**kwargs)


def _case_shrink_and_regrow(rank: int, world: int) -> None:
    assert dist._supports_reconfigure()
    mine = dist._get_reconfigure_handle()
    _store().set(f"handle-{rank}", mine)
    handles = [_store().get(f"handle-{r}").decode() for r in range(world)]
    assert handles[rank] == mine and len(set(handles)) == world

    # Refused before anything changes (no uuid is used up by them).
    _refused("takes no hints", uuid=1, handles=set(handles), hints={"k": "v"})
    _refused("keeps its slot", uuid=1, handles=[handles[1], handles[0], *handles[2:]])
    _refused("not one of this Mooncake group's", uuid=1, handles={"gloo:x:0", *handles})
    _refused("named twice", uuid=1, handles=[handles[0], handles[0]])
    _refused("not among the handles", uuid=1,
             handles={h for r, h in enumerate(handles) if r != rank})

    if rank < 3:
        dist._reconfigure(uuid=1, handles=set(handles[:3])).wait()
        assert _active() == [1, 1, 1, 0]
        assert dist.get_world_size() == 3
        assert _all_reduce_ones() == 3.0
        _refused("was used before", uuid=1, handles=set(handles[:3]))
        if rank == 0:
            open_gate("shrunk")
    else:
        wait_gate("shrunk", 60.0)
        assert _active()[3] == 0

    # All four again, as a list (positions are the slots): rank 3 joins, the others
    # activate it.
    dist._reconfigure(uuid=2, handles=handles).wait()
    assert _active() == [1, 1, 1, 1]
    assert dist.get_world_size() == 4
    assert _all_reduce_ones() == 4.0


def test_reconfigure_shrinks_and_regrows_through_active_ranks():
    launch(4, "test_pg_reconfigure", "_case_shrink_and_regrow", timeout=120.0)
