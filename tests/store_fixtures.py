"""Fixtures and helpers for the KV store tests (tests/test_store_*.py).

tests/conftest.py imports the fixtures from here, so test modules just
name them::

    def test_x(store_master, stores): ...

* `Master`: a real ``mooncake_master`` process with the embedded HTTP
  metadata server, RPC, metadata and admin ports all on free loopback ports.
  It can be killed and restarted on the same ports, and queried through its
  admin endpoint (``/query_key``, ``/metrics``).
* `master_factory` (per test): start masters with extra flags.
  `store_master` (per module): one master with default flags.
* `stores` (per test): a factory of in-process `MooncakeDistributedStore`
  clients, closed at teardown.
* `StoragePeer` / `peers` (per test): a store client in a subprocess, driven
  through JSON lines on its stdin/stdout. It can be SIGKILLed to play a
  storage node that dies. The subprocess runs this very file.

Everything binds to 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

if __name__ != "__main__":
    import pytest

    from conftest import (
        LOOPBACK,
        ProcessReaper,
        free_ports,
        go_binary,
        kill_process,
        port_open,
        wait_for,
    )
else:  # the peer subprocess needs none of pytest
    LOOPBACK = "127.0.0.1"

HERE = Path(__file__).resolve()

# --------------------------------------------------------------------------
# master


class Master:
    """One ``mooncake_master`` with the embedded HTTP metadata server.

    `flags` are extra command-line flags ("--name=value"). `restart()` starts
    a fresh process (empty metadata) on the same ports.
    """

    def __init__(
        self, binary: str, reaper: ProcessReaper, flags=(), ports=None, rpc_address: str = LOOPBACK
    ):
        self.binary, self.reaper, self.flags = binary, reaper, list(flags)
        self.rpc_port, self.meta_port, self.admin_port = ports or free_ports(3)
        self.rpc_address = rpc_address
        self.proc: subprocess.Popen | None = None
        self.log_path = (
            Path(os.environ.get("TMPDIR", "/tmp")) / f"mc-master-{self.rpc_port}-{os.getpid()}.log"
        )

    @property
    def rpc(self) -> str:
        return f"{LOOPBACK}:{self.rpc_port}"

    @property
    def metadata_url(self) -> str:
        return f"http://{LOOPBACK}:{self.meta_port}/metadata"

    @property
    def admin(self) -> str:
        return f"http://{LOOPBACK}:{self.admin_port}"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--enable_http_metadata_server=true",
            f"--rpc_address={self.rpc_address}",
            f"--rpc_port={self.rpc_port}",
            f"--http_metadata_server_host={LOOPBACK}",
            f"--http_metadata_server_port={self.meta_port}",
            f"--metrics_host={LOOPBACK}",
            f"--metrics_port={self.admin_port}",
            "--enable_metric_reporting=false",
            *self.flags,
        ]

    def ready(self) -> bool:
        return (
            _http_status(self.admin + "/health") == 200
            and port_open(LOOPBACK, self.rpc_port)
            and port_open(LOOPBACK, self.meta_port)
        )

    def start(self, timeout: float = 20.0) -> Master:
        log = open(self.log_path, "ab")
        try:
            self.proc = self.reaper.popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.ready():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"mooncake_master did not start: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the master (no cleanup on its side)."""
        if self.proc is not None:
            kill_process(self.proc)
            self.proc = None
        # the ports must be free again before a restart on the same ports
        wait_for(lambda: not port_open(LOOPBACK, self.rpc_port), 5)

    def restart(self) -> Master:
        self.kill()
        last: Exception | None = None
        for _ in range(20):  # the old sockets may linger a moment
            try:
                return self.start()
            except RuntimeError as e:
                last = e
                time.sleep(0.25)
        raise RuntimeError(f"master restart failed: {last}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # admin endpoint --------------------------------------------------------

    def query_key(self, key: str, tenant: str | None = None) -> dict | None:
        """The master's view of `key` (GET /query_key), None when absent. Grants no lease."""
        url = self.admin + "/query_key?key=" + urllib.parse.quote(key, safe="")
        if tenant is not None:
            url += "&tenant_id=" + urllib.parse.quote(tenant, safe="")
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def keys(self, tenant: str | None = None) -> list[str]:
        url = self.admin + "/get_all_keys"
        if tenant is not None:
            url += "?tenant_id=" + urllib.parse.quote(tenant, safe="")
        with urllib.request.urlopen(url, timeout=3) as r:
            return json.loads(r.read())

    def admin_call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """(HTTP status, JSON body) of an admin request such as
        ``admin_call("PUT", "/api/v1/tenant_quotas", {...})``."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.admin + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def segments(self) -> list[dict]:
        with urllib.request.urlopen(self.admin + "/api/v1/segments/status", timeout=3) as r:
            return json.loads(r.read())

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.admin + "/metrics", timeout=3) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def role(self) -> str:
        try:
            with urllib.request.urlopen(self.admin + "/role", timeout=2) as r:
                return r.read().decode().strip()
        except Exception:
            return ""


def setup_code(store, master: Master, segment="16MB", **kwargs) -> int:
    """`store.setup(...)` against `master` on loopback: its return code."""
    return store.setup(
        LOOPBACK, master.metadata_url, segment, "16MB", "tcp", "", master.rpc, **kwargs
    )


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return 0


if __name__ != "__main__":

    @pytest.fixture
    def master_factory(go_bin_dir, process_reaper):
        """Start masters with extra flags for this test: ``master_factory("--client_ttl=2")``."""
        binary = go_binary("mooncake_master", go_bin_dir)

        def make(*flags: str, ports=None, rpc_address: str = LOOPBACK) -> Master:
            return Master(binary, process_reaper, flags, ports, rpc_address).start()

        return make

    @pytest.fixture(scope="module")
    def store_master(go_bin_dir) -> Iterator[Master]:
        """One master with default flags for the whole module."""
        binary = go_binary("mooncake_master", go_bin_dir)
        with ProcessReaper() as reaper:
            yield Master(binary, reaper).start()

    @pytest.fixture
    def stores():
        """Factory of set-up in-process store clients, closed after the test.

        ``stores(master, segment="64MB", buffer="16MB", **setup_kwargs)``
        """
        made = []

        def make(
            master: Master,
            segment="64MB",
            buffer="16MB",
            master_addr: str | None = None,
            metadata=None,
            protocol="tcp",
            **setup_kwargs,
        ):
            from mooncake.store import MooncakeDistributedStore

            s = MooncakeDistributedStore()
            rc = s.setup(
                LOOPBACK,
                metadata or master.metadata_url,
                segment,
                buffer,
                protocol,
                "",
                master_addr or master.rpc,
                **setup_kwargs,
            )
            assert rc == 0, f"setup failed: {rc}"
            made.append(s)
            return s

        yield make
        for s in made:
            s.close()

    @pytest.fixture
    def huge_pages_2mb():
        """Reserve 2 MiB huge pages for this test: ``huge_pages_2mb(n)`` sets
        vm.nr_hugepages to at least n (as root), and the old count is
        restored afterwards. Skips the test where the kernel refuses."""
        path = Path("/proc/sys/vm/nr_hugepages")
        try:
            old = int(path.read_text())
        except (OSError, ValueError):
            pytest.skip("no /proc/sys/vm/nr_hugepages")

        def reserve(n: int) -> None:
            try:
                path.write_text(str(max(n, old)))
            except OSError as e:
                pytest.skip(f"cannot reserve huge pages here: {e}")
            free = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            if int(free.read_text()) < n:
                pytest.skip(f"the kernel reserved fewer than {n} huge pages")

        yield reserve
        with contextlib.suppress(OSError):
            path.write_text(str(old))

    @pytest.fixture
    def peers(process_reaper):
        """Factory of `StoragePeer` subprocesses, killed after the test."""
        made = []

        def make(
            master: Master,
            segment="64MB",
            buffer="16MB",
            env=None,
            master_addr=None,
            metadata=None,
            **setup_kwargs,
        ) -> StoragePeer:
            p = StoragePeer(
                process_reaper,
                metadata or master.metadata_url,
                master_addr or master.rpc,
                segment,
                buffer,
                env,
                setup_kwargs,
            )
            made.append(p)
            return p

        yield make
        for p in made:
            p.kill()


# --------------------------------------------------------------------------
# a store client in another process


def _enc(v):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if hasattr(v, "_json") and hasattr(v, "replica_num"):  # ReplicateConfig
        return {"$cfg": json.loads(v._json())}
    return v


def _dec(v):
    if isinstance(v, dict) and "$b" in v:
        return base64.b64decode(v["$b"])
    if isinstance(v, dict) and "$cfg" in v:
        from mooncake.store import ReplicateConfig, SoftPinAction

        cfg = ReplicateConfig()
        for k, x in v["$cfg"].items():
            setattr(cfg, k, SoftPinAction(x) if k == "soft_pin_action" else x)
        return cfg
    if isinstance(v, list):
        return [_dec(x) for x in v]
    return v


class StoragePeer:
    """A `MooncakeDistributedStore` in a subprocess (runs this file).

    ``peer.call("put", "k", b"v", cfg)`` calls the method there and returns
    its result (bytes and ReplicateConfig travel as JSON). `hostname` is
    the peer's segment name. `kill()` SIGKILLs it.
    """

    def __init__(
        self, reaper, metadata: str, master: str, segment, buffer, env=None, setup_kwargs=None
    ):
        full_env = dict(os.environ, **(env or {}))
        kwargs = json.dumps(setup_kwargs or {})
        self.proc = reaper.popen(
            [sys.executable, str(HERE), metadata, master, str(segment), str(buffer), kwargs],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=full_env,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            kill_process(self.proc)
            raise RuntimeError(f"storage peer failed to start: {line!r}")
        self.hostname = line.split()[1]

    def call(self, method: str, *args):
        self.proc.stdin.write(json.dumps([method, _enc(list(args))]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("storage peer died")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return _dec(reply["result"])

    def kill(self) -> None:
        kill_process(self.proc)

    def alive(self) -> bool:
        return self.proc.poll() is None


def _peer_main(argv: list[str]) -> None:
    metadata, master, segment, buffer, kwargs = argv
    from mooncake.store import MooncakeDistributedStore

    kw = json.loads(kwargs)
    protocol = kw.pop("protocol", "tcp")
    store = MooncakeDistributedStore()
    rc = store.setup(LOOPBACK, metadata, segment, buffer, protocol, "", master, **kw)
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        sys.exit(1)
    print(f"READY {store.get_hostname()}", flush=True)
    for line in sys.stdin:
        method, args = json.loads(line)
        try:
            if method == "x_get_into":  # (key, capacity) -> [code, bytes read]
                import numpy as np

                buf = np.zeros(max(args[1], 1), dtype=np.uint8)
                rc = store.get_into(args[0], buf.ctypes.data, args[1])
                result = [rc, buf[: max(rc, 0)].tobytes()]
            else:
                result = getattr(store, method)(*_dec(args))
            reply = {"result": _enc(result)}
        except Exception as e:  # reported to the test
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    store.close()


if __name__ == "__main__":
    _peer_main(sys.argv[1:])
