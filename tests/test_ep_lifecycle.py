"""EP Buffer lifetime: a buffer that goes away while receives are pending
cancels them; no process dies and nothing hangs (docs/ep.md, "Lifecycle")."""

from __future__ import annotations

from ep_harness import launch


def test_pending_receive_at_close() -> None:
    outs = launch(2, "pending_receive_at_close", timeout=90)
    assert all("pending_receive_at_close OK" in o for o in outs)
