"""Authenticated TCP peers (docs/security.md, "Authenticated TE peers").

Real processes: a target te_peer.py started with a cluster secret
(MC_TE_SECRET_FILE) serves an initiator that holds the same secret, and
refuses one without a secret and one with another: their WRITEs leave its
memory as it was and their READs bring nothing back, and the target's
``metrics_text()`` counts each refusal. An initiator with the
secret does not send its bytes to a target without it.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from te_peer import Peer, PeerError, pattern

SIZE = (5 << 20) + 77  # two TCP slices and a tail
SECRET = "cluster-secret-for-the-te-test-0123456789"


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def secret_file(tmp_path) -> str:
    path = tmp_path / "te_secret"
    path.write_text(SECRET + "\n")
    os.chmod(path, 0o600)
    return str(path)


def peer(reaper, env: dict[str, str]) -> Peer:
    env = {"MC_FORCE_TCP": "true", "MC_TRANSFER_TIMEOUT": "5", **env}
    return Peer("P2PHANDSHAKE", hostname="127.0.0.1", size=SIZE, env=env, popen=reaper.popen)


def transfers(init: Peer, tgt: Peer, seed: int) -> list[int]:
    """A one-slice and a two-slice WRITE then READ; their results."""
    out = []
    for n in (4096, SIZE):
        init.fill(seed, init.reg_off(), n)
        out.append(init.call("transfer_sync_write", tgt.segment, init.addr, tgt.addr, n))
        out.append(init.call("transfer_sync_read", tgt.segment, init.addr, tgt.addr, n))
    return out


def refused(p: Peer) -> int:
    """The peer's mooncake_te_tcp_refused_peers_total, from metrics_text()."""
    for line in str(p.call("metrics_text")).splitlines():
        if line.startswith("mooncake_te_tcp_refused_peers_total "):
            return int(line.split()[1])
    raise AssertionError("no mooncake_te_tcp_refused_peers_total in metrics_text()")


def test_target_with_a_secret_serves_only_peers_holding_it(process_reaper, secret_file) -> None:
    target = peer(process_reaper, {"MC_TE_SECRET_FILE": secret_file})
    good = peer(process_reaper, {"MC_TE_SECRET": SECRET})
    good.fill(7, good.reg_off(), SIZE)
    assert good.call("transfer_sync_write", target.segment, good.addr, target.addr, SIZE) == 0
    assert target.sha256(target.reg_off(), SIZE) == sha(pattern(7, SIZE))
    target.fill(8, target.reg_off(), SIZE)
    assert good.call("transfer_sync_read", target.segment, good.addr, target.addr, SIZE) == 0
    assert good.sha256(good.reg_off(), SIZE) == sha(pattern(8, SIZE))

    assert refused(target) == 0
    for name, env in [("no secret", {}), ("another secret", {"MC_TE_SECRET": "x" * 40})]:
        before = refused(target)
        bad = peer(process_reaper, env)
        bad.fill(9, bad.reg_off(), SIZE)
        assert transfers(bad, target, 9) == [-1, -1, -1, -1], name
        assert refused(target) > before, name
        # The target's memory is as the good peer left it, and no READ
        # brought the target's bytes into the peer.
        assert target.sha256(target.reg_off(), SIZE) == sha(pattern(8, SIZE)), name
        assert bad.sha256(bad.reg_off(), SIZE) == sha(pattern(9, SIZE)), name


def test_initiator_with_a_secret_sends_nothing_to_a_target_without_it(process_reaper) -> None:
    target = peer(process_reaper, {})
    target.fill(3, target.reg_off(), SIZE)
    init = peer(process_reaper, {"MC_TE_SECRET": SECRET})
    init.fill(4, init.reg_off(), SIZE)
    assert transfers(init, target, 4) == [-1, -1, -1, -1]
    assert target.sha256(target.reg_off(), SIZE) == sha(pattern(3, SIZE))


def test_a_short_secret_is_refused_at_start(process_reaper) -> None:
    with pytest.raises(PeerError, match="secret"):
        peer(process_reaper, {"MC_TE_SECRET": "short"})
