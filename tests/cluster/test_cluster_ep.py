"""Expert-parallel dispatch/combine across the rig's hosts (issue 45): each
rank given only what torchrun gives it, its `Buffer` built on a
backend="mooncake" group, publishing the address of its route to
MASTER_ADDR (the default of MOONCAKE_EP_LOCAL_HOSTNAME). pg_node.py's
``ep`` case checks dispatch and combine exactly, on both buffer halves, and
that no rank was marked inactive."""

from __future__ import annotations

import pytest
import rig
from test_cluster_pg import launch


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(2) as c:
        yield c


def check_ep(placement: list[rig.Host]) -> None:
    outs, failed, _ = launch(placement, "ep")
    detail = "\n".join(f"----- rank {r} on {h.name} -----\n{o[-4000:]}"
                       for r, (h, o) in enumerate(zip(placement, outs, strict=True)))
    assert not failed, f"{failed}\n{detail}"
    for r, o in enumerate(outs):
        assert f"rank {r}: round 1:" in o and f"rank {r} ok" in o, detail


def test_ep_two_ranks_on_two_hosts(cluster):
    check_ep([cluster[0], cluster[1]])


def test_ep_four_ranks_on_two_hosts(cluster):
    """Two ranks per host: shared memory within a host, TCP between them."""
    check_ep([cluster[0], cluster[1], cluster[0], cluster[1]])
