"""Shared pytest fixtures and helpers for the Mooncake-Go Python tests.

Generic on purpose, so that every test module can use (and extend) them:

* `free_port()` / `free_ports(n)`: free TCP ports on loopback.
* `ProcessReaper` and the `process_reaper` fixture: start subprocesses that
  are always killed (and reaped) at teardown, even when the test fails. They
  also die with the test process (PR_SET_PDEATHSIG) should pytest itself be
  killed.
* `etcd_server`: an etcd started on free loopback ports for the session;
  the fixture's value is its ``"127.0.0.1:PORT"`` client address.
* `http_metadata_server`: the Go ``mooncake_http_metadata_server`` on a free
  loopback port for the session; the value is its
  ``"http://127.0.0.1:PORT/metadata"`` URL.
* `go_binary(name)`: path of a Go program of cmd/ (installed copy, or built
  from source once per session).

Nothing here imports `mooncake`, so a broken native library only fails the
tests that use it. Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"

# --------------------------------------------------------------------------
# ports


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port that is free on `host` right now.

    The port is not reserved: a server started with it should still be
    ready to retry on "address in use" (see `start_server`).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """Return `n` distinct free TCP ports on `host`."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate` until it is true or `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except Exception:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# processes

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def kill_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGKILL `proc` if it still runs, reap it and close its pipes."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    finally:
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.close()


def supervise(procs: list[subprocess.Popen], names: list[str], logs: list, deadline: float,
              stop: Callable[[float], str | None] | None = None,
              killed: frozenset[int] = frozenset()) -> tuple[list[str], list[str]]:
    """Wait for the processes of a multi-process test (procs[i] is called
    names[i]; its output goes to the temporary file logs[i]) until all have
    exited, one failed (the others get 5 s to report their own errors, then
    are stopped), the monotonic `deadline` passes, or `stop(now)` gives a
    reason to give up. Kills what is left and returns (each one's output,
    the failures). The processes whose index is in `killed` are meant to be
    killed by the test (SIGKILL): that end is theirs to have, and so is exit
    status 0; any other is a failure."""
    failed: list[str] = []
    first_failure = None

    def ok(i: int, code: int | None) -> bool:
        return code == 0 or i in killed and code == -signal.SIGKILL

    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            bad = [names[i] for i, p in enumerate(procs)
                   if p.poll() is not None and not ok(i, p.returncode)]
            if bad and first_failure is None:
                first_failure = now
            if first_failure is not None and now - first_failure > 5:
                failed.append(f"{bad[0]} failed; stopped the others")
                break
            reason = stop(now) if stop else None
            if reason:
                failed.append(reason)
                break
            if now > deadline:
                failed.append("killed at the launch's deadline")
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            kill_process(p)
    outs = []
    for i, (name, p, log) in enumerate(zip(names, procs, logs, strict=True)):
        log.seek(0)
        outs.append(log.read())
        log.close()
        if not ok(i, p.returncode):
            failed.append(f"{name}: exit status {p.returncode}")
    return outs, failed


class ProcessReaper:
    """Starts subprocesses and kills every one of them in `kill_all`.

    Processes get PR_SET_PDEATHSIG=SIGKILL, so they also die if the test
    process dies without running its teardown.
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []

    def popen(self, args: Sequence[str], **kwargs) -> subprocess.Popen:
        """`subprocess.Popen(args, **kwargs)`, tracked for killing."""
        kwargs.setdefault("preexec_fn", _die_with_parent)
        proc = subprocess.Popen(list(args), **kwargs)
        self._procs.append(proc)
        return proc

    def track(self, proc: subprocess.Popen) -> subprocess.Popen:
        """Kill `proc` (started elsewhere) with the others."""
        self._procs.append(proc)
        return proc

    def kill_all(self) -> None:
        procs, self._procs = self._procs, []
        for proc in reversed(procs):
            kill_process(proc)

    def __enter__(self) -> ProcessReaper:
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()


@pytest.fixture
def process_reaper() -> Iterator[ProcessReaper]:
    """A `ProcessReaper` whose processes are killed when the test ends."""
    reaper = ProcessReaper()
    try:
        yield reaper
    finally:
        reaper.kill_all()


@contextlib.contextmanager
def start_server(
    make_args: Callable[[], tuple[Sequence[str], Callable[[], bool]]],
    name: str,
    *,
    attempts: int = 3,
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen]:
    """Start a server process and yield it once ready; always kill it after.

    `make_args()` returns (argv, ready) with fresh free ports each call;
    `ready()` tells when the server serves. A server that exits before it is
    ready (e.g. its port was taken meanwhile) is retried `attempts` times.
    Its stderr goes to a temporary log quoted in the failure message.
    """
    last = ""
    for _ in range(attempts):
        argv, ready = make_args()
        log = tempfile.TemporaryFile(mode="w+b")
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
        try:
            deadline = time.monotonic() + ready_timeout
            while proc.poll() is None and time.monotonic() < deadline:
                if ready():
                    break
                time.sleep(0.05)
            if proc.poll() is None and ready():
                yield proc
                return
            log.seek(0)
            last = log.read()[-4000:].decode(errors="replace")
        finally:
            kill_process(proc)
            log.close()
    pytest.fail(f"{name} did not start after {attempts} attempts; last output:\n{last}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except Exception:
        return False


# --------------------------------------------------------------------------
# binaries


def _go() -> str | None:
    return shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.path.exists(p)), None
    )


_built: dict[str, str] = {}


def go_binary(name: str, build_dir: Path) -> str:
    """Path of the Go program cmd/`name`.

    Order: $MOONCAKE_<NAME> (upper case), the copy installed in the imported
    mooncake package (mooncake/bin), a console script next to the Python
    interpreter, then a `go build` of the source into `build_dir` (once per
    session). The installed copy is skipped when $MOONCAKE_LIB is set (the
    tests then run against the source tree, so the binary is built from it).
    """
    override = os.environ.get("MOONCAKE_" + name.upper())
    if override:
        return override
    if name in _built:
        return _built[name]
    if not os.environ.get("MOONCAKE_LIB"):
        try:
            import importlib.util

            spec = importlib.util.find_spec("mooncake")
            if spec and spec.origin:
                cand = Path(spec.origin).parent / "bin" / name
                if cand.is_file() and os.access(cand, os.X_OK):
                    return str(cand)
        except Exception:
            pass
        cand = Path(sys.executable).parent / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    go = _go()
    if go is None:
        pytest.fail(f"{name}: not installed and no Go toolchain to build cmd/{name}")
    out = build_dir / name
    env = dict(os.environ, CGO_CFLAGS=os.environ.get("CGO_CFLAGS", "-Wno-deprecated-declarations"))
    res = subprocess.run(
        [go, "build", "-o", str(out), f"./cmd/{name}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.fail(f"go build ./cmd/{name} failed:\n{res.stderr[-4000:]}")
    _built[name] = str(out)
    return str(out)


@pytest.fixture(scope="session")
def go_bin_dir(tmp_path_factory) -> Path:
    """A session directory for Go programs built by `go_binary`."""
    return tmp_path_factory.mktemp("gobin")


# --------------------------------------------------------------------------
# metadata servers


def _etcd_path() -> str:
    path = os.environ.get("MOONCAKE_ETCD") or shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(path):
        pytest.fail("etcd not found (install etcd-server, or set MOONCAKE_ETCD)")
    return path


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory) -> Iterator[str]:
    """An etcd for this session on free loopback ports: yields "127.0.0.1:PORT".

    Data lives in /dev/shm when available (etcd 3.4 cannot skip fsync).
    """
    etcd = _etcd_path()
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="mc-etcd-", dir=shm if shm.is_dir() else None))
    attempt = [0]

    def make_args():
        attempt[0] += 1
        client, peer = free_ports(2)
        data = base / f"data{attempt[0]}"
        curl, purl = f"http://{LOOPBACK}:{client}", f"http://{LOOPBACK}:{peer}"
        argv = [
            etcd,
            "--name", "mc-test",
            "--data-dir", str(data),
            "--listen-client-urls", curl,
            "--advertise-client-urls", curl,
            "--listen-peer-urls", purl,
            "--initial-advertise-peer-urls", purl,
            "--initial-cluster", f"mc-test={purl}",
            "--initial-cluster-state", "new",
            "--logger", "zap",
            "--log-outputs", "stderr",
            "--log-level", "error",
        ]  # fmt: skip
        make_args.addr = f"{LOOPBACK}:{client}"
        return argv, lambda: _etcd_healthy(curl)

    try:
        with start_server(make_args, "etcd") as _proc:
            yield make_args.addr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return b'"true"' in r.read()
    except Exception:
        return False


@pytest.fixture(scope="session")
def http_metadata_server(go_bin_dir) -> Iterator[str]:
    """The Go HTTP metadata server for this session on a free loopback port.

    Yields its URL, "http://127.0.0.1:PORT/metadata".
    """
    binary = go_binary("mooncake_http_metadata_server", go_bin_dir)

    def make_args():
        port = free_port()
        make_args.url = f"http://{LOOPBACK}:{port}/metadata"
        argv = [binary, "--host", LOOPBACK, "--port", str(port)]
        return argv, lambda: _http_ok(f"http://{LOOPBACK}:{port}/health")

    with start_server(make_args, "mooncake_http_metadata_server") as _proc:
        yield make_args.url


# --------------------------------------------------------------------------
# KV store fixtures, defined in tests/store_fixtures.py: master_factory,
# store_master, stores, peers (see that module's docstring).

from store_fixtures import (  # noqa: E402,F401
    huge_pages_2mb,
    master_factory,
    peers,
    store_master,
    stores,
)
