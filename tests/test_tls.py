"""TLS on the control plane, from Python (docs/security.md, "TLS").

A real mooncake_master serves mutual TLS with certificates made here with
openssl; a store client given the files (setup keywords, or MC_TLS_* in
os.environ set after the library loaded) puts and gets through it and its
https:// metadata store, and one without them, or with a certificate of
another CA, fails setup. The engine's RPC interface does the same with
MC_TLS_*. No private key is committed: every file is made per test.
"""

from __future__ import annotations

import os
import queue
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import LOOPBACK, free_ports, go_binary, port_open
from mooncake.engine import TransferEngine, create_rpc_client, create_rpc_server
from mooncake.store import MooncakeDistributedStore

TLS_VARS = ("MC_TLS_CERT_FILE", "MC_TLS_KEY_FILE", "MC_TLS_CA_FILE")

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not on PATH")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str) -> None:
    _openssl(
        "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}-key.pem", cwd=d
    )
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        f"{name}-key.pem",
        "-subj",
        f"/CN={name}",
        "-days",
        "1",
        "-out",
        f"{name}.pem",
        cwd=d,
    )


def _leaf(d: Path, name: str, ca: str, server: bool) -> None:
    _openssl(
        "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}-key.pem", cwd=d
    )
    _openssl(
        "req",
        "-new",
        "-key",
        f"{name}-key.pem",
        "-subj",
        f"/CN={name}",
        "-out",
        f"{name}.csr",
        cwd=d,
    )
    ext = (
        "extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
        if server
        else "extendedKeyUsage=clientAuth\n"
    )
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}-key.pem",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.pem",
        cwd=d,
    )


@pytest.fixture
def pki(tmp_path):
    """CA, a server pair for loopback, a client pair, and a stranger's pair
    signed by another CA: paths by name."""
    _ca(tmp_path, "ca")
    _leaf(tmp_path, "server", "ca", server=True)
    _leaf(tmp_path, "client", "ca", server=False)
    _ca(tmp_path, "other")
    _leaf(tmp_path, "stranger", "other", server=False)
    return {p.stem: str(p) for p in tmp_path.glob("*.pem")}


@pytest.fixture
def tls_env(monkeypatch):
    """Set MC_TLS_* for the test (restored after it, and handed to the library again)."""
    for v in TLS_VARS:
        monkeypatch.delenv(v, raising=False)

    def set_files(cert="", key="", ca=""):
        for v, val in zip(TLS_VARS, (cert, key, ca), strict=True):
            monkeypatch.setenv(v, val)

    yield set_files
    from mooncake import _tls

    for v in TLS_VARS:  # setup's keywords put them there too
        os.environ.pop(v, None)
    _tls.apply()


def _https_ok(url: str, pki: dict) -> bool:
    ctx = ssl.create_default_context(cafile=pki["ca"])
    ctx.load_cert_chain(pki["client"], pki["client-key"])
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.status == 200
    except Exception:
        return False


@pytest.fixture
def tls_master(go_bin_dir, process_reaper, pki):
    """A mooncake_master serving mutual TLS on every port: (rpc, metadata URL)."""
    rpc, meta, admin = free_ports(3)
    proc = process_reaper.popen(
        [
            go_binary("mooncake_master", go_bin_dir),
            f"--rpc_address={LOOPBACK}",
            f"--rpc_port={rpc}",
            "--enable_http_metadata_server=true",
            f"--http_metadata_server_host={LOOPBACK}",
            f"--http_metadata_server_port={meta}",
            f"--metrics_host={LOOPBACK}",
            f"--metrics_port={admin}",
            "--enable_metric_reporting=false",
            f"--tls_cert_file={pki['server']}",
            f"--tls_key_file={pki['server-key']}",
            f"--tls_ca_file={pki['ca']}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not (_https_ok(f"https://{LOOPBACK}:{admin}/health", pki) and port_open(LOOPBACK, rpc)):
        assert proc.poll() is None, "mooncake_master exited"
        assert time.monotonic() < deadline, "mooncake_master never served TLS"
        time.sleep(0.05)
    # Plain HTTP is not served.
    with pytest.raises(OSError):  # urllib.error.HTTPError (400) or a reset
        urllib.request.urlopen(f"http://{LOOPBACK}:{admin}/health", timeout=2)
    return f"{LOOPBACK}:{rpc}", f"https://{LOOPBACK}:{meta}/metadata"


def _setup(rpc: str, meta: str, **kw) -> tuple[int, MooncakeDistributedStore]:
    s = MooncakeDistributedStore()
    return s.setup(LOOPBACK, meta, "16MB", "16MB", "tcp", "", rpc, **kw), s


def test_store_with_setup_keywords_uses_a_mutual_tls_master(tls_master, pki, tls_env):
    rpc, meta = tls_master
    files = dict(tls_cert_file=pki["client"], tls_key_file=pki["client-key"], tls_ca_file=pki["ca"])
    rc_a, a = _setup(rpc, meta, **files)
    rc_b, b = _setup(rpc, meta, **files)
    try:
        assert rc_a == 0 and rc_b == 0
        assert a.put("tls-key", b"over tls") == 0
        assert b.get("tls-key") == b"over tls"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("who", ["plain", "stranger", "half"])
def test_store_without_the_right_files_fails_setup(tls_master, pki, tls_env, who):
    rpc, meta = tls_master
    files = {
        "plain": {},
        "stranger": dict(
            tls_cert_file=pki["stranger"], tls_key_file=pki["stranger-key"], tls_ca_file=pki["ca"]
        ),
        "half": dict(tls_cert_file=pki["client"], tls_ca_file=pki["ca"]),
    }[who]
    rc, s = _setup(rpc, meta, **files)
    s.close()
    assert rc != 0


def test_store_takes_mc_tls_set_after_the_library_loaded(tls_master, pki, tls_env):
    rpc, meta = tls_master
    rc, s = _setup(rpc, meta)  # loads the library; no files yet
    s.close()
    assert rc != 0
    tls_env(pki["client"], pki["client-key"], pki["ca"])
    rc, s = _setup(rpc, meta)
    try:
        assert rc == 0
        assert s.put("env-key", b"v") == 0 and s.get("env-key") == b"v"
    finally:
        s.close()


def test_engine_publishes_to_an_https_metadata_server_with_mc_tls(tls_master, pki, tls_env):
    _, meta = tls_master
    tls_env(pki["client"], pki["client-key"], pki["ca"])
    e = TransferEngine()
    try:
        assert e.initialize(LOOPBACK, meta, "tcp", "") == 0, e.last_error()
    finally:
        e.close()
    tls_env(pki["stranger"], pki["stranger-key"], pki["ca"])
    e = TransferEngine()
    try:
        assert e.initialize(LOOPBACK, meta, "tcp", "") != 0
    finally:
        e.close()


def test_engine_rpc_interface_over_mutual_tls(pki, tls_env):
    tls_env(pki["server"], pki["server-key"], pki["ca"])
    srv = create_rpc_server(f"{LOOPBACK}:0", 1)
    got: queue.Queue = queue.Queue()
    srv.set_data_receive_callback(got.put)
    assert srv.start_server_async()
    try:
        addr = srv.get_server_address()
        tls_env(pki["client"], pki["client-key"], pki["ca"])
        client = create_rpc_client(pool_size=2, timeout_seconds=5)
        assert client.send_data(addr, np.arange(4, dtype=np.uint8)) == 0
        assert got.get(timeout=10).get_bytes() == bytes(range(4))
        tls_env(pki["stranger"], pki["stranger-key"], pki["ca"])
        assert create_rpc_client(pool_size=2, timeout_seconds=5).send_data(addr, b"x") != 0
        tls_env()
        assert create_rpc_client(pool_size=2, timeout_seconds=5).send_data(addr, b"x") != 0
        assert got.empty()
        tls_env(pki["client"])  # a certificate without its key
        with pytest.raises(ValueError, match="without its key file"):
            create_rpc_client(pool_size=2, timeout_seconds=5)
    finally:
        srv.stop_server()
