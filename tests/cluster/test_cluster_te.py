"""The Transfer Engine across the rig's hosts: a target on one host, an
initiator on another, with P2P metadata (each names itself by its host's
address) and with an HTTP metadata server or an etcd on a third host;
writes and reads land byte for byte, and the peers cannot have used shared
memory (their hosts differ)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
import rig
from test_cluster_ha import WAIT_ETCD

from conftest import _etcd_path, go_binary
from te_peer import Peer, pattern

# Odd sizes at odd offsets, across the TCP slice size (4 MiB).
SIZES = [1, 4099, (1 << 20) + 7, (5 << 20) + 3]
BUF = 8 << 20
WRITE, READ = 1, 0


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(3) as c:
        yield c


def sha(b: bytes | bytearray) -> str:
    return hashlib.sha256(b).hexdigest()


# The metadata services' ports on the third host (it has a network of its own).
HTTP_META_PORT, ETCD_PORT, ETCD_PEER_PORT = 8080, 2379, 2380


def metadata_on_third_host(cluster, backend: str, go_bin_dir, tmp_path) -> str:
    """Start `backend`'s metadata service on the cluster's third host and
    return the metadata string the peers are given."""
    c = cluster[2]
    if backend == "http":
        binary = go_binary("mooncake_http_metadata_server", go_bin_dir)
        c.popen([binary, "--host", c.addr, "--port", str(HTTP_META_PORT)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        assert c.wait_ports(c.addr, [HTTP_META_PORT]).returncode == 0, "metadata server"
        return f"http://{c.addr}:{HTTP_META_PORT}/metadata"
    assert backend == "etcd"
    curl, purl = f"http://{c.addr}:{ETCD_PORT}", f"http://{c.addr}:{ETCD_PEER_PORT}"
    c.popen([_etcd_path(), "--name", "te", "--data-dir", str(tmp_path / "etcd"),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"te={purl}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    assert c.run([sys.executable, "-c", WAIT_ETCD, "20", curl]).returncode == 0, "etcd"
    return f"etcd://{c.addr}:{ETCD_PORT}"


def test_write_and_read_between_hosts(cluster):
    a, b = cluster[0], cluster[1]
    target = Peer("P2PHANDSHAKE", hostname=a.addr, size=BUF, seed=11, popen=a.popen)
    init = Peer("P2PHANDSHAKE", hostname=b.addr, size=BUF, seed=22, popen=b.popen)
    assert target.segment.startswith(a.addr + ":") and init.segment.startswith(b.addr + ":")
    check_write_and_read(target, init)


@pytest.mark.parametrize("backend", ["http", "etcd"])
def test_write_and_read_with_metadata_on_a_third_host(cluster, backend, go_bin_dir, tmp_path):
    """The peers publish and find their segments through a metadata service
    on a host of its own, named `host:port` by their hosts' addresses."""
    a, b = cluster[0], cluster[1]
    metadata = metadata_on_third_host(cluster, backend, go_bin_dir, tmp_path)
    target = Peer(metadata, hostname=f"{a.addr}:17811", size=BUF, seed=11, popen=a.popen)
    init = Peer(metadata, hostname=f"{b.addr}:17812", size=BUF, seed=22, popen=b.popen)
    assert (target.segment, init.segment) == (f"{a.addr}:17811", f"{b.addr}:17812")
    check_write_and_read(target, init)


def check_write_and_read(target: Peer, init: Peer) -> None:
    """Writes of odd sizes at odd offsets from init into target, then a read
    back; both memories are checked whole. Closes both peers."""
    try:
        mem_t, mem_i = bytearray(pattern(11, BUF)), bytearray(pattern(22, BUF))
        off_i, off_t = 5, 11
        for n in SIZES:
            # write init[off_i:+n] -> target[off_t:+n]
            assert (
                init.call(
                    "transfer_sync_write", target.segment, init.base + off_i, target.base + off_t, n
                )
                == 0
            ), n
            mem_t[off_t : off_t + n] = mem_i[off_i : off_i + n]
            off_i, off_t = off_i + n + 13, off_t + n + 17
        # a read back from elsewhere in the target
        n = SIZES[-1]
        src, dst = 3, BUF - n - 9
        assert (
            init.call("transfer_sync_read", target.segment, init.base + dst, target.base + src, n)
            == 0
        )
        mem_i[dst : dst + n] = mem_t[src : src + n]
        assert target.sha256(0, BUF) == sha(mem_t), "target memory after the writes"
        assert init.sha256(0, BUF) == sha(mem_i), "initiator memory after the read"
    finally:
        init.close()
        target.close()


def test_cluster_secret_between_hosts(cluster):
    """A target with a cluster secret on one host serves an initiator with
    the secret on another, and refuses one without it: its WRITE leaves the
    target's memory as it was and its READ brings nothing back."""
    a, b = cluster[0], cluster[1]
    secret = {"MC_TE_SECRET": "rig-cluster-secret-0123456789abcdef"}
    n = (5 << 20) + 3
    target = Peer("P2PHANDSHAKE", hostname=a.addr, size=BUF, seed=31, env=secret, popen=a.popen)
    good = Peer("P2PHANDSHAKE", hostname=b.addr, size=BUF, seed=32, env=secret, popen=b.popen)
    bad = Peer("P2PHANDSHAKE", hostname=b.addr, size=BUF, seed=33, popen=b.popen)
    try:
        assert good.call("transfer_sync_write", target.segment, good.base, target.base, n) == 0
        mem_t = bytearray(pattern(31, BUF))
        mem_t[:n] = pattern(32, BUF)[:n]
        assert target.sha256(0, BUF) == sha(mem_t), "target memory after the write"
        for method in ("transfer_sync_write", "transfer_sync_read"):
            assert bad.call(method, target.segment, bad.base, target.base, n) == -1, method
        assert target.sha256(0, BUF) == sha(mem_t), "target memory after the refused peer"
        assert bad.sha256(0, BUF) == sha(pattern(33, BUF)), "refused peer's memory after its read"
    finally:
        bad.close()
        good.close()
        target.close()
