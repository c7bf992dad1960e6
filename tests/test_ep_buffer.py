"""mooncake.mooncake_ep_buffer: API, preconditions and the reference check.

Multi-process: each case of ep_cases.py runs on real processes over loopback
(ep_harness.launch). The process group is gloo unless
MOONCAKE_EP_TEST_BACKEND=mooncake.
"""

from __future__ import annotations

import pytest

from ep_harness import launch
from mooncake.mooncake_ep_buffer import Buffer


def test_size_hint_is_upstreams() -> None:
    assert Buffer.get_ep_buffer_size_hint(128, 7168, 8, 288) == 2_118_652_416
    assert Buffer.get_ep_buffer_size_hint(256, 2048, 8, 288) == 1_217_401_344
    assert Buffer.get_ep_buffer_size_hint(1024, 7168, 8, 256) == 15_065_944_064
    n, h, e = 7, 384, 12
    assert Buffer.get_ep_buffer_size_hint(n, h, 3, e) == 16 * e + 8 * e * n * (16 + h)


@pytest.mark.parametrize("world", [2, 4])
def test_reference_check(world: int) -> None:
    """spec/ep.md §3.2: bf16 and fp8, sync/async/hook, both buffer halves."""
    outs = launch(world, "reference", timeout=150)
    assert all("reference OK" in o for o in outs)


def test_reference_check_on_mooncake_group() -> None:
    """The same check with the Buffer built on a backend="mooncake" group."""
    try:
        import mooncake.pg  # noqa: F401
    except ImportError as e:
        pytest.skip(f"mooncake.pg not available: {e}")
    outs = launch(2, "reference", timeout=150, pg_backend="mooncake")
    assert all("reference OK" in o for o in outs)


def test_reference_check_over_tcp() -> None:
    """disable_p2p=True: same-host peers are reached over TCP, not shm."""
    outs = launch(2, "reference", timeout=150, n=16, h=256, e=8, disable_p2p=True)
    assert all("reference OK" in o for o in outs)


def test_preconditions() -> None:
    outs = launch(2, "preconditions", timeout=90)
    assert all("preconditions OK" in o for o in outs)


def test_update_ep_member() -> None:
    outs = launch(2, "update_member", timeout=90)
    assert all("update_member OK" in o for o in outs)
