"""Dummy mode: a real master, a real `mooncake_client` daemon, and dummy
clients in their own processes (tests/dummy_peer.py) that forward every
store call to it, with bulk data in shared memory the daemon maps.

Covers: put/get through the daemon, zero-copy batch I/O through registered
regions, tensors, a dummy dying, the daemon dying and restarting, graceful
shutdown, the hot cache (counters, invalidation, bypass, sharing within a
worker scope, isolation across scopes), what a process that speaks the
socket protocol itself cannot do to the daemon (shrink a region under it,
write the hot cache) and the errors setup_dummy reports.
"""

from __future__ import annotations

import array
import fcntl
import json
import mmap
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import LOOPBACK, free_ports, go_binary, kill_process, port_open, wait_for
from dummy_peer import parse_metrics

HERE = Path(__file__).resolve().parent
CALL_TIMEOUT = 60.0  # far above any call's own deadline: a reply that never comes is a hang

HOT_CACHE_ENV = {
    "MC_STORE_LOCAL_HOT_CACHE_SIZE": str(8 << 20),
    "MC_STORE_LOCAL_HOT_BLOCK_SIZE": str(64 << 10),
    "MC_STORE_LOCAL_HOT_CACHE_USE_SHM": "1",
    "MC_STORE_LOCAL_HOT_MAX_AGE_MS": "600000",
}


class Daemon:
    """One `mooncake_client` with its HTTP server (/metrics, /health)."""

    def __init__(self, binary, reaper, master, env=None, flags=(), port=None):
        self.binary, self.reaper, self.master = binary, reaper, master
        self.env = dict(os.environ, **(env or {}))
        self.flags = list(flags)
        self.port, self.http_port = port or free_ports(1)[0], free_ports(1)[0]
        self.proc: subprocess.Popen | None = None
        tmp = Path(os.environ.get("TMPDIR", "/tmp"))
        self.log = tmp / f"mc-client-{self.port}-{os.getpid()}.log"

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Daemon:
        self.launch()
        ok = wait_for(lambda: self.proc.poll() is not None or self._health() == 200, 30)
        assert ok and self.proc.poll() is None, (
            f"mooncake_client did not start:\n{self.log.read_text()}"
        )
        return self

    def launch(self) -> Daemon:
        """Start the process without waiting for it to become ready."""
        self.http_port = free_ports(1)[0]
        with open(self.log, "ab") as log:
            self.proc = self.reaper.popen(
                [
                    self.binary,
                    f"--host={LOOPBACK}",
                    f"--metadata_server={self.master.metadata_url}",
                    f"--master_server_address={self.master.rpc}",
                    f"--port={self.port}",
                    "--global_segment_size=64MB",
                    "--enable_http_server=true",
                    f"--http_port={self.http_port}",
                    *self.flags,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self

    def retrying(self) -> bool:
        """Whether the log says setup failed and will be retried."""
        return "setup failed; retrying" in self.log.read_text(errors="replace")

    def _health(self) -> int:
        try:
            url = f"http://{LOOPBACK}:{self.http_port}/health"
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except Exception:
            return 0

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.http_port}/metrics", timeout=5) as r:
            return parse_metrics(r.read().decode())

    def kill(self) -> None:
        kill_process(self.proc)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


class DummyPeer:
    """A dummy client in a subprocess (tests/dummy_peer.py)."""

    def __init__(self, reaper, server: str, local_buffer: int = 16 << 20, **setup_kwargs):
        self.proc = reaper.popen(
            [sys.executable, str(HERE / "dummy_peer.py"), server, str(local_buffer),
             json.dumps(setup_kwargs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self._line(CALL_TIMEOUT)
        if line.strip() != "READY":
            kill_process(self.proc)
            raise RuntimeError(f"dummy peer failed to start: {line!r}")

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no reply from the dummy client within {timeout} s (a hang)")
        return self.proc.stdout.readline()

    def call(self, method: str, *args):
        from store_fixtures import _dec, _enc

        self.proc.stdin.write(json.dumps([method, _enc(list(args))]) + "\n")
        self.proc.stdin.flush()
        line = self._line(CALL_TIMEOUT)
        if not line:
            raise RuntimeError("dummy peer died")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return _dec(reply["result"])

    def kill(self) -> None:
        kill_process(self.proc)


@pytest.fixture
def master(master_factory):
    """A master of this test alone: daemons killed by a test leave segments
    behind that the master only drops after its client TTL."""
    return master_factory()


@pytest.fixture
def daemons(master, go_bin_dir, process_reaper):
    """``daemons(env=None, flags=())``: start a mooncake_client against the test's master."""
    binary = go_binary("mooncake_client", go_bin_dir)

    def make(env=None, flags=(), port=None) -> Daemon:
        return Daemon(binary, process_reaper, master, env, flags, port).start()

    return make


@pytest.fixture
def dummies(process_reaper):
    """``dummies(daemon, local_buffer=16 MiB, **setup_dummy_kwargs)``."""

    def make(daemon: Daemon, local_buffer: int = 16 << 20, **kwargs) -> DummyPeer:
        return DummyPeer(process_reaper, daemon.address, local_buffer, **kwargs)

    return make


def _prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}_"


# -- the data path ------------------------------------------------------------


def test_put_and_get_through_the_daemon(daemons, dummies):
    d = daemons()
    a, b = dummies(d), dummies(d)
    p = _prefix()
    value = os.urandom(100_000)
    assert a.call("put", p + "k", value) == 0
    assert b.call("get", p + "k") == value
    assert b.call("get_size", p + "k") == len(value)
    assert b.call("batch_is_exist", [p + "k", p + "none"]) == [1, 0]
    assert a.call("put_batch", [p + "x", p + "y"], [b"xx", b"yyy"]) == 0
    assert b.call("get_batch", [p + "x", p + "y", p + "none"]) == [b"xx", b"yyy", b""]
    assert a.call("upsert", p + "k", b"new") == 0
    assert b.call("get", p + "k") == b"new"
    assert b.call("x_get_into", p + "k", 16) == [3, b"new"]
    assert b.call("remove", p + "k", True) == 0
    assert a.call("get", p + "k") == b""
    assert a.call("get_hostname") == ""
    assert a.call("health_check") == 0
    assert d.metrics()["mooncake_client_dummy_sessions"] == 2


def test_zero_copy_batch_through_registered_regions(daemons, dummies):
    d = daemons()
    # No local buffer: a call on memory that is not registered has nowhere
    # to be staged, so the batch calls below can only work in place.
    a = dummies(d, local_buffer=0)
    b = dummies(d, local_buffer=0)
    p = _prefix()
    assert a.call("put", p + "copy", b"v") == -600
    rc, src = a.call("x_region", 1 << 20)
    assert rc == 0 and src
    blobs = [os.urandom(4096), os.urandom(300_000)]
    a.call("x_write", src, blobs[0])
    a.call("x_write", src + 4096, blobs[1])
    # register_buffer returned after the daemon installed the region: use it at once.
    keys = [p + "a", p + "b"]
    assert a.call("batch_put_from", keys, [src, src + 4096], [4096, len(blobs[1])]) == [0, 0]
    rc, dst = b.call("x_hostmem", 1 << 20)  # MooncakeHostMemAllocator memory works too
    assert rc == 0
    got = b.call("batch_get_into", keys + [p + "none"], [dst, dst + 8192, dst + 400_000],
                 [8192, 350_000, 100])
    assert got[:2] == [4096, len(blobs[1])] and got[2] == -704
    assert b.call("x_read", dst, 4096) == blobs[0]
    assert b.call("x_read", dst + 8192, len(blobs[1])) == blobs[1]
    # multi-buffer: one object scattered over two buffers
    assert b.call("batch_get_into_multi_buffers", [keys[0]], [[dst, dst + 500_000]],
                  [[1000, 3096]]) == [4096]
    assert b.call("x_read", dst, 1000) + b.call("x_read", dst + 500_000, 3096) == blobs[0]
    # a destination too small, and memory outside every region
    assert b.call("batch_get_into", [keys[1]], [dst], [100]) == [-600]
    assert a.call("unregister_buffer", src) == 0
    assert a.call("unregister_buffer", src) == -1


def test_tensors_through_the_daemon(daemons, dummies):
    pytest.importorskip("torch")
    d = daemons()
    a = dummies(d)
    assert a.call("x_tensor", _prefix() + "t", 10_000) == [0, True]


def test_ranges_and_removals(daemons, dummies):
    d = daemons()
    a = dummies(d)
    p = _prefix()
    assert a.call("put", p + "r", bytes(range(256)) * 16) == 0
    rc, buf = a.call("x_region", 1 << 16)
    assert rc == 0
    res = a.call("get_into_ranges", [buf], [[p + "r"]], [[[0, 100]]], [[[10, 300]]], [[[5, 7]]])
    assert res == [[[5, 7]]]
    assert a.call("x_read", buf, 5) == bytes(range(10, 15))
    assert a.call("x_read", buf + 100, 7) == bytes(range(44, 51))
    assert a.call("put_batch", [p + "m1", p + "m2"], [b"1", b"2"]) == 0
    assert a.call("remove_by_regex", "^" + p + "m", True) == 2
    assert a.call("batch_is_exist", [p + "m1", p + "m2"]) == [0, 0]


# -- failures -------------------------------------------------------------------


def test_a_dummy_dying_releases_its_regions_and_others_continue(daemons, dummies):
    d = daemons()
    a, b = dummies(d), dummies(d)
    p = _prefix()
    assert a.call("x_region", 1 << 20)[0] == 0
    assert a.call("put", p + "a", b"from a") == 0
    a.kill()
    assert wait_for(lambda: d.metrics()["mooncake_client_dummy_sessions"] == 1, 20)
    assert "its regions are released" in d.log.read_text()
    assert b.call("get", p + "a") == b"from a"
    assert b.call("put", p + "b", b"from b") == 0
    assert b.call("get", p + "b") == b"from b"
    assert d.proc.poll() is None


def test_daemon_death_fails_calls_and_a_restart_is_rejoined(
    master_factory, go_bin_dir, process_reaper, dummies
):
    # Short client TTLs: the dead daemon's segment stays mounted until the
    # master forgets it, and puts placed there fail meanwhile.
    master = master_factory("--client_ttl=2", "--client_dead_ttl=2")
    d = Daemon(go_binary("mooncake_client", go_bin_dir), process_reaper, master).start()
    a = dummies(d)
    p = _prefix()
    rc, buf = a.call("x_region", 1 << 16)
    assert rc == 0
    d.kill()
    # Every call answers, with an error code, instead of hanging.
    assert a.call("put", p + "k", b"v") == -900
    assert a.call("get", p + "k") == b""
    assert a.call("batch_get_into", [p + "k"], [buf], [100]) == [-900]
    assert a.call("batch_is_exist", [p + "k"]) == [-900]
    assert a.call("health_check") == 2
    # A daemon on the same port: the dummy reconnects on its next call and
    # installs its regions again, so registered memory keeps working.
    d.start()
    assert a.call("health_check") == 0
    a.call("x_write", buf, b"region data")
    assert wait_for(lambda: a.call("batch_put_from", [p + "k"], [buf], [11]) == [0], 30)
    assert a.call("batch_get_into", [p + "k"], [buf + 1000], [100]) == [11]
    assert a.call("x_read", buf + 1000, 11) == b"region data"
    assert a.call("x_metrics")["mooncake_dummy_reconnects_total"] >= 1


def test_graceful_shutdown_unmounts_and_dummies_see_it(daemons, dummies, stores, master):
    d = daemons()
    a = dummies(d)
    p = _prefix()
    observer = stores(master, segment=0, buffer="4MB")  # holds no replica itself
    assert a.call("put", p + "k", b"in the daemon's segment") == 0
    assert observer.get(p + "k") == b"in the daemon's segment"
    assert d.terminate() == 0
    assert "mooncake_client stopped" in d.log.read_text()
    # The segment was unmounted at shutdown: its objects are gone at once
    # (not after the master's client TTL).
    assert observer.is_exist(p + "k") == 0
    assert a.call("put", p + "k2", b"v") == -900


# -- the hot cache ----------------------------------------------------------------


def _hits(peer: DummyPeer) -> float:
    return peer.call("x_metrics")["mooncake_dummy_hot_cache_shm_hits_total"]


def test_hot_cache_shared_within_a_scope_isolated_across(daemons, dummies):
    d = daemons(env=HOT_CACHE_ENV)
    a = dummies(d, worker_scope="scope-1")
    b = dummies(d, worker_scope="scope-1")
    c = dummies(d, worker_scope="scope-2")
    p = _prefix()
    assert a.call("put", p + "k", b"cached bytes") == 0
    assert a.call("get", p + "k") == b"cached bytes"  # miss: the daemon fills the cache
    m = a.call("x_metrics")
    assert m["mooncake_hot_cache_fills_total"] == 1 and m["mooncake_dummy_hot_cache_mapped"] == 1
    assert a.call("get", p + "k") == b"cached bytes"
    assert _hits(a) == 1
    # Another process of the same scope reads the same shared cache.
    assert b.call("x_get_into", p + "k", 64) == [12, b"cached bytes"]
    assert _hits(b) == 1
    # Another scope does not: its first read misses and fills its own cache.
    assert c.call("get", p + "k") == b"cached bytes"
    assert _hits(c) == 0
    scoped = d.metrics()
    assert scoped['mooncake_hot_cache_fills_total{scope="scope-1"}'] == 1
    assert scoped['mooncake_hot_cache_fills_total{scope="scope-2"}'] == 1


def test_hot_cache_invalidated_by_writes_and_removes(daemons, dummies):
    d = daemons(env=HOT_CACHE_ENV)
    a = dummies(d, worker_scope="s")
    b = dummies(d, worker_scope="s")
    p = _prefix()
    assert a.call("put", p + "k", b"old") == 0
    assert a.call("get", p + "k") == b"old"
    assert b.call("get", p + "k") == b"old"
    assert _hits(b) == 1
    assert a.call("upsert", p + "k", b"new value") == 0
    assert a.call("get", p + "k") == b"new value"
    assert b.call("get", p + "k") == b"new value"
    assert a.call("remove", p + "k", True) == 0
    assert b.call("get", p + "k") == b""
    assert a.call("get", p + "k") == b""
    m = a.call("x_metrics")
    assert m["mooncake_hot_cache_invalidations_total"] >= 2


def test_hot_cache_bypassed_by_values_larger_than_a_block(daemons, dummies):
    d = daemons(env=HOT_CACHE_ENV)
    a = dummies(d, worker_scope="s")
    p = _prefix()
    big = os.urandom((64 << 10) + 1)
    assert a.call("put", p + "big", big) == 0
    assert a.call("get", p + "big") == big
    assert a.call("get", p + "big") == big
    m = a.call("x_metrics")
    assert m["mooncake_dummy_hot_cache_shm_hits_total"] == 0
    assert m["mooncake_hot_cache_bypasses_total"] == 2
    assert m["mooncake_hot_cache_fills_total"] == 0


def test_hot_cache_in_daemon_memory_serves_hits_by_call(daemons, dummies):
    env = dict(HOT_CACHE_ENV, MC_STORE_LOCAL_HOT_CACHE_USE_SHM="0")
    d = daemons(env=env)
    a = dummies(d, worker_scope="s")
    p = _prefix()
    assert a.call("put", p + "k", b"v" * 100) == 0
    assert a.call("get", p + "k") == b"v" * 100
    assert a.call("get", p + "k") == b"v" * 100
    m = a.call("x_metrics")
    assert m["mooncake_dummy_hot_cache_mapped"] == 0
    assert m["mooncake_hot_cache_hits_total"] == 1 and m["mooncake_hot_cache_misses_total"] == 1


# -- a dummy that does not play by the rules ----------------------------------------


class RawDummy:
    """A process that speaks the dummy protocol itself, as an attacker would:
    a 12-byte frame header (body length, call id, kind 1, descriptor count),
    a JSON body, descriptors as SCM_RIGHTS with the header."""

    def __init__(self, daemon: Daemon):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(CALL_TIMEOUT)
        self.sock.connect(f"\0@mooncake_client_{daemon.port}.sock")
        self.next_id = 1

    def call(self, req: dict, fds: tuple[int, ...] = ()) -> tuple[dict, list[int]]:
        body = json.dumps(req).encode()
        header = struct.pack("<IIBBxx", len(body), self.next_id, 1, len(fds))
        self.next_id += 1
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([header + body], anc)
        data, got = b"", []
        while len(data) < 12 or len(data) < 12 + struct.unpack_from("<I", data)[0]:
            chunk, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 8))
            if not chunk:
                raise ConnectionError("mooncake_client closed the connection")
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
            data += chunk
        return json.loads(data[12 : 12 + struct.unpack_from("<I", data)[0]]), got

    def close(self) -> None:
        self.sock.close()


def _memfd(size: int, sealed: bool) -> int:
    fd = os.memfd_create("test-region", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealed else 0))
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def test_a_dummy_cannot_shrink_a_region_under_the_daemon(daemons, dummies):
    d = daemons()
    victim = dummies(d)
    p = _prefix()
    assert victim.call("put", p + "v", b"victim bytes") == 0
    raw = RawDummy(d)
    assert raw.call({"op": "hello", "scope": "attacker"})[0]["code"] == 0
    # An unsealed memfd is refused: once mapped, a truncation would kill the
    # daemon with SIGBUS at its next copy.
    loose = _memfd(1 << 16, sealed=False)
    reply, _ = raw.call({"op": "register", "base": 1 << 40, "size": 1 << 16}, (loose,))
    assert reply["code"] == -600 and "F_SEAL_SHRINK" in reply["message"], reply
    os.ftruncate(loose, 0)
    put = {"op": "put", "keys": [p + "a"], "parts": [[{"a": 1 << 40, "s": 4096}]]}
    assert raw.call(put)[0]["codes"] == [-600]  # not a region of this dummy
    os.close(loose)
    # A sealed one is accepted, cannot shrink, and serves puts and gets.
    fd = _memfd(1 << 16, sealed=True)
    with mmap.mmap(fd, 1 << 16) as mem:
        mem[:12] = b"sealed bytes"
        base = 2 << 40
        assert raw.call({"op": "register", "base": base, "size": 1 << 16}, (fd,))[0]["code"] == 0
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        put = {"op": "put", "keys": [p + "s"], "parts": [[{"a": base, "s": 12}]]}
        assert raw.call(put)[0]["codes"] == [0]
        get = {"op": "get", "keys": [p + "s"], "parts": [[{"a": base + 4096, "s": 4096}]]}
        assert raw.call(get)[0]["codes"] == [12]
        assert mem[4096 : 4096 + 12] == b"sealed bytes"
    os.close(fd)
    raw.close()
    assert d.proc.poll() is None
    assert victim.call("get", p + "v") == b"victim bytes"
    assert victim.call("get", p + "s") == b"sealed bytes"


def test_the_hot_cache_memfd_cannot_be_written_by_a_dummy(daemons, dummies):
    d = daemons(env=HOT_CACHE_ENV)
    victim = dummies(d, worker_scope="victim-scope")
    p = _prefix()
    assert victim.call("put", p + "v", b"victim bytes") == 0
    assert victim.call("get", p + "v") == b"victim bytes"  # fills the scope's cache
    raw = RawDummy(d)
    assert raw.call({"op": "hello", "scope": "victim-scope"})[0]["code"] == 0
    reply, fds = raw.call({"op": "hot_cache"})
    assert reply["code"] == 0 and len(fds) == 1, reply
    fd, size = fds[0], reply["count"]
    with pytest.raises(PermissionError):
        mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"forged", 4096)
    # A memfd is mode 0777: it reopens read-write, and writes still fail.
    again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    with pytest.raises(PermissionError):
        os.pwrite(again, b"forged", 4096)
    with pytest.raises(PermissionError):
        mmap.mmap(again, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as view:
        assert view.find(b"victim bytes") >= 0  # reading is what the descriptor is for
    os.close(again)
    os.close(fd)
    raw.close()
    assert victim.call("get", p + "v") == b"victim bytes"
    assert _hits(victim) == 1
    assert d.proc.poll() is None


# -- setup ------------------------------------------------------------------------


def test_setup_dummy_errors(daemons):
    from mooncake.store import MooncakeDistributedStore

    d = daemons(flags=["--tenant_id=team-a"])
    s = MooncakeDistributedStore()
    with pytest.raises(ValueError):
        s.setup_dummy(0, 0, "no port")
    with pytest.raises(ValueError):
        s.setup_dummy(0, "lots", d.address)
    assert s.setup_dummy(0, 0, f"{LOOPBACK}:{free_ports(1)[0]}") == -900  # no daemon there
    assert s.setup_dummy(0, 0, d.address, keyspace="team-b") == -600
    assert s.health_check() == 1
    assert s.setup_dummy(0, 0, d.address, keyspace="team-a") == 0
    assert s.health_check() == 0
    assert s.setup_dummy(0, 0, d.address) == -600  # already set up
    assert s.mount_segment("/nonexistent", 4096)["ret"] == -1  # real client only
    assert s.alloc_from_mem_pool(0) == 0
    s.close()
    assert s.health_check() == 1
    with pytest.raises(RuntimeError):
        s.metrics_text()


def test_mem_pool_size_bounds_alloc_from_mem_pool(daemons):
    from mooncake.store import MooncakeDistributedStore

    d = daemons()
    s = MooncakeDistributedStore()
    assert s.setup_dummy(1 << 20, 0, d.address) == 0
    try:
        assert s.alloc_from_mem_pool(768 << 10) != 0
        assert s.alloc_from_mem_pool(512 << 10) == 0
        assert s.alloc_from_mem_pool(256 << 10) != 0
    finally:
        s.close()


# -- setup before the services are up (issue 35) ------------------------------------


@pytest.fixture
def unstarted_master(go_bin_dir, process_reaper):
    """A master (with its metadata server) on free ports, not started yet."""
    from store_fixtures import Master

    return Master(go_binary("mooncake_master", go_bin_dir), process_reaper)


def test_daemon_waits_for_the_master_and_metadata_server(
    unstarted_master, go_bin_dir, process_reaper, dummies
):
    d = Daemon(go_binary("mooncake_client", go_bin_dir), process_reaper, unstarted_master)
    d.launch()
    assert wait_for(lambda: d.proc.poll() is not None or d.retrying(), 30), d.log.read_text()
    assert d.proc.poll() is None, (
        f"the daemon exited while the master was down:\n{d.log.read_text()}"
    )
    assert not port_open(LOOPBACK, d.port)  # not ready: its TCP port stays closed
    unstarted_master.start()
    assert wait_for(lambda: d.proc.poll() is not None or d._health() == 200, 60), d.log.read_text()
    assert d.proc.poll() is None, d.log.read_text()
    a = dummies(d)
    p = _prefix()
    assert a.call("put", p + "k", b"after a late master") == 0
    assert a.call("get", p + "k") == b"after a late master"
    assert d.terminate() == 0


def test_daemon_tcp_port_signals_readiness_and_serves_nothing(daemons):
    d = daemons()
    assert port_open(LOOPBACK, d.port)
    with socket.create_connection((LOOPBACK, d.port), timeout=30) as c:
        c.sendall(b"\x00" * 64)  # never read: the port speaks no protocol
        c.settimeout(30)
        try:
            assert c.recv(64) == b""
        except ConnectionResetError:
            pass  # closed with our bytes unread
    assert d.terminate() == 0
    assert not port_open(LOOPBACK, d.port)


def test_daemon_retrying_setup_exits_0_on_sigterm(unstarted_master, go_bin_dir, process_reaper):
    d = Daemon(go_binary("mooncake_client", go_bin_dir), process_reaper, unstarted_master)
    d.launch()
    assert wait_for(lambda: d.proc.poll() is not None or d.retrying(), 30), d.log.read_text()
    assert d.proc.poll() is None, d.log.read_text()
    assert d.terminate() == 0, d.log.read_text()


def test_daemon_setup_timeout_gives_up(unstarted_master, go_bin_dir, process_reaper):
    d = Daemon(
        go_binary("mooncake_client", go_bin_dir),
        process_reaper,
        unstarted_master,
        flags=["--setup_timeout=1"],
    )
    d.launch()
    assert d.proc.wait(timeout=60) == 1
    assert "--setup_timeout" in d.log.read_text()


def test_daemon_help_and_bad_flags(go_bin_dir):
    binary = go_binary("mooncake_client", go_bin_dir)
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "global_segment_size" in r.stderr
    r = subprocess.run(
        [binary, "--enable_offload=true"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 2 and "not supported" in r.stderr
    r = subprocess.run([binary, "--global_segment_size=much"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "invalid size" in r.stderr


def test_a_dead_replica_turns_only_its_own_keys_into_misses(daemons, dummies, peers, master):
    from mooncake.store import ReplicateConfig

    d = daemons()
    a = dummies(d)
    p = _prefix()
    healthy = [p + f"ok{i}" for i in range(3)]
    for k in healthy:  # only the daemon's segment exists yet
        assert a.call("put", k, k.encode()) == 0
    peer = peers(master)
    cfg = ReplicateConfig()
    cfg.preferred_segment = peer.hostname
    doomed = [p + f"gone{i}" for i in range(2)]
    for k in doomed:
        assert a.call("put", k, k.encode(), cfg) == 0
    peer.kill()
    rc, buf = a.call("x_region", 1 << 16)
    assert rc == 0
    keys = [healthy[0], doomed[0], healthy[1], doomed[1], healthy[2]]
    got = a.call("batch_get_into", keys, [buf + 4096 * i for i in range(5)], [4096] * 5)
    assert [got[0], got[2], got[4]] == [len(k) for k in healthy]
    assert got[1] < 0 and got[3] < 0  # soft misses, not an exception
    for i, k in ((0, healthy[0]), (2, healthy[1]), (4, healthy[2])):
        assert a.call("x_read", buf + 4096 * i, len(k)) == k.encode()
    assert a.call("get_batch", keys) == [
        healthy[0].encode(), b"", healthy[1].encode(), b"", healthy[2].encode()]


def test_hot_cache_of_a_real_client_in_process(peers, stores, master):
    # The cache's variables are read when the library loads: a process of its own.
    cached = peers(master, env=HOT_CACHE_ENV)
    other = stores(master, segment=0, buffer="4MB")
    p = _prefix()
    assert other.put(p + "k", b"first") == 0
    assert cached.call("get", p + "k") == b"first"  # fills the cache
    # A remove by another client is not seen (bounded by the maximum age):
    # the cached copy answers, which shows the read did not reach the pool.
    assert other.remove(p + "k", True) == 0
    assert cached.call("get", p + "k") == b"first"
    # The cached client's own remove invalidates.
    cached.call("remove", p + "k", True)
    assert cached.call("get", p + "k") == b""
    # Its own writes too.
    assert cached.call("put", p + "w", b"old") == 0
    assert cached.call("get", p + "w") == b"old"
    assert cached.call("upsert", p + "w", b"new value") == 0
    assert cached.call("get", p + "w") == b"new value"
    got = cached.call("get_batch", [p + "w", p + "none", p + "w"])
    assert got == [b"new value", b"", b"new value"]
    # A batch of hits and misses: the misses are read and cached too.
    assert other.put(p + "m", b"missed once") == 0
    got = cached.call("get_batch", [p + "m", p + "w", p + "none"])
    assert got == [b"missed once", b"new value", b""]
    assert other.remove(p + "m", True) == 0
    assert cached.call("get_batch", [p + "m"]) == [b"missed once"]  # from the cache
    # Larger than a block: never cached, so another client's remove is seen.
    big = os.urandom((64 << 10) + 1)
    assert other.put(p + "big", big) == 0
    assert cached.call("get", p + "big") == big
    assert other.remove(p + "big", True) == 0
    assert cached.call("get", p + "big") == b""


def test_master_outage_is_a_soft_miss_for_dummies(daemons, dummies, master):
    d = daemons()
    a = dummies(d)
    p = _prefix()
    assert a.call("put", p + "k", b"v") == 0
    assert a.call("get_buffer", p + "k") == b"v"  # a BufferHandle travels as its bytes
    master.kill()
    # Metadata failures are per-key negative codes, never exceptions.
    rc, buf = a.call("x_region", 4096)
    assert rc == 0
    got = a.call("batch_get_into", [p + "k", p + "other"], [buf, buf + 2048], [2048, 2048])
    assert all(r < 0 for r in got)
    assert a.call("get", p + "k") == b""
    assert a.call("get_buffer", p + "k") is None
    assert all(r < 0 for r in a.call("batch_is_exist", [p + "k"]))
    assert a.call("put", p + "k2", b"v") < 0
    assert wait_for(lambda: a.call("health_check") == 2, 30)
    assert d._health() == 503
