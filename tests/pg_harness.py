"""Multi-process harness for the mooncake.pg tests (tests/test_pg_*.py).

`launch(world, module, func, ...)` starts `world` Python processes on
loopback, each running this file as a worker: it initialises the default
process group (backend "mooncake" unless told otherwise, rendezvous through
a TCPStore at a free port, or env://), calls ``module.func(rank, world,
**kwargs)``, destroys the group and exits 0. A case fails the test by
raising. Every launch has a deadline; stragglers are killed and their output
is part of the failure message.

Late processes (elastic membership: replacements, extensions). ``launch(...,
late=[Late(rank, world, func, gates=[...]), ...])`` also runs, per `Late`,
one more process with its own rank, world size and function (of the same
module; kwargs merged over the launch's), sharing the launch's rendezvous
(the TCPStore that rank 0's process hosts, same port, same init mode).
It is started together with the others, so that Python and torch are
already loaded, but waits for its *gates* before it imports mooncake or
touches the store: nothing of it exists for the group until then. The same
deadline, kill and output collection apply to it; its output follows the
ranks' in the returned list.

Gates are files in a directory private to the launch (env
``MC_PG_HARNESS_DIR``), usable by any case as cross-process signals:
`open_gate(name, value)` opens one (atomically), `wait_gate(name, timeout)`
waits for it and returns its value, `gate_is_open(name)`. The harness
itself opens ``exited-<r>`` once launched rank r's process has exited (e.g.
a replacement that must not start before the old incarnation is gone gates
on it). A late process still waiting at an unopened gate once every
launched rank has exited fails the launch at once instead of at the
deadline.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
GATE_DIR_ENV = "MC_PG_HARNESS_DIR"


def _free_port() -> int:
    from conftest import free_port

    return free_port()


@dataclass
class Late:
    """A process started late (see the module docstring).

    rank, world: what it passes to the rendezvous (e.g. the slot of a dead
    rank and the group's full size). func: the case function (same module
    as the launch); None means the launch's. gates: gate names it waits for
    (all of them) before starting; empty means at once. kwargs: merged over
    the launch's kwargs. env: merged over the launch's env.
    """

    rank: int
    world: int
    func: str | None = None
    gates: list[str] = field(default_factory=list)
    kwargs: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


# ---- gates (usable from the cases, in the worker processes) ----------------------------------


def _gate_dir() -> Path:
    d = os.environ.get(GATE_DIR_ENV)
    if not d:
        raise RuntimeError(f"{GATE_DIR_ENV} is not set (not running under pg_harness.launch)")
    return Path(d)


def _gate_path(name: str, base: Path | None = None) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad gate name {name!r}")
    return (base or _gate_dir()) / f"{name}.gate"


def open_gate(name: str, value: str = "", *, base: Path | None = None) -> None:
    """Open gate `name` (idempotent; the last value wins)."""
    path = _gate_path(name, base)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(value)
    os.replace(tmp, path)


def gate_is_open(name: str, *, base: Path | None = None) -> bool:
    return _gate_path(name, base).exists()


def wait_gate(name: str, timeout: float = 60.0) -> str:
    """Wait until gate `name` is open and return its value; TimeoutError after `timeout` s."""
    path = _gate_path(name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return path.read_text()
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {name!r} not opened within {timeout:.0f} s")
        time.sleep(0.01)


# ---- checks shared by the cases ------------------------------------------------------------------


def check_op_past_failure(work, failed: int, world: int, *, met: bool = False) -> None:
    """An op that ran while rank `failed` died or was cut off: it completed
    without raising, with the hint marking `failed` and local success
    False, on every survivor alike: one that met the failure itself, and
    one that took part in its reconciliation from its idle queue before it
    started the op (its op is the failed op's re-run). met: this rank met
    the failure itself (kept for the callers; the outcome is the same)."""
    from mooncake import pg

    del met
    work.wait()
    hint = pg.get_failed_ranks_hint(work).tolist()
    marked = [1 if r == failed else 0 for r in range(world)]
    assert hint == marked, (hint, marked)
    assert not pg.get_local_success(work), hint


def p2p_with_every_peer(rank: int, world: int) -> list[tuple[int, object]]:
    """One isend and one irecv with every other rank (batch_isend_irecv),
    waited for; returns (peer, work) per op."""
    import torch
    import torch.distributed as dist

    ops, peers = [], []
    for p in range(world):
        if p != rank:
            ops += [dist.P2POp(dist.isend, torch.tensor([rank]), p),
                    dist.P2POp(dist.irecv, torch.empty(1, dtype=torch.int64), p)]
            peers += [p, p]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    return list(zip(peers, works, strict=True))


# ---- launching ---------------------------------------------------------------------------------


def launch(
    world: int,
    module: str,
    func: str,
    *,
    timeout: float = 180.0,
    backend: str = "mooncake",
    init: str = "tcp",
    env: dict[str, str] | None = None,
    late: list[Late] | None = None,
    killed: tuple[int, ...] = (),
    **kwargs: object,
) -> list[str]:
    """Run module.func on `world` ranks (plus the `late` processes); return
    each process's output: ranks 0..world-1, then the late ones in order.
    The ranks in `killed` are killed by the case itself (SIGKILL), which
    is not a failure.

    A rendezvous port taken between choosing it and binding it (other tests
    run on this machine too) is retried with another port.
    """
    for attempt in range(3):
        try:
            return _launch_once(world, module, func, timeout, backend, init, env, kwargs,
                                list(late or []), frozenset(killed))
        except _PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _launch_once(
    world: int,
    module: str,
    func: str,
    timeout: float,
    backend: str,
    init: str,
    env: dict[str, str] | None,
    kwargs: dict[str, object],
    late: list[Late],
    killed: frozenset[int],
) -> list[str]:
    # _die_with_parent: children die with the test process.
    from conftest import _die_with_parent, kill_process, supervise

    port = _free_port()
    gate_dir = Path(tempfile.mkdtemp(prefix="mc-pg-gates-"))
    base_env = dict(os.environ)
    base_env.update(env or {})
    base_env.setdefault("OMP_NUM_THREADS", "1")
    base_env[GATE_DIR_ENV] = str(gate_dir)
    procs: list[subprocess.Popen] = []
    names: list[str] = []
    logs = []
    deadline = time.monotonic() + timeout

    def start(name: str, rank: int, size: int, fn: str, kw: dict[str, object],
              extra_env: dict[str, str], gates: list[str]) -> None:
        e = dict(base_env)
        e.update(extra_env)
        if init == "env":
            e.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                     WORLD_SIZE=str(size))
        cmd = [sys.executable, str(HERE / "pg_harness.py"), "--module", module, "--func", fn,
               "--rank", str(rank), "--world", str(size), "--port", str(port),
               "--backend", backend, "--init", init, "--kwargs", json.dumps(kw)]
        for g in gates:
            cmd += ["--gate", g]
        if gates:
            cmd += ["--gate-timeout", str(timeout)]
        log = tempfile.TemporaryFile(mode="w+")
        logs.append(log)
        names.append(name)
        procs.append(subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT,
                                      text=True, cwd=HERE, preexec_fn=_die_with_parent))

    try:
        for rank in range(world):
            start(f"rank {rank}", rank, world, func, kwargs, {}, [])
        for i, lt in enumerate(late):
            start(f"late {i} (rank {lt.rank}, world {lt.world})", lt.rank, lt.world,
                  lt.func or func, {**kwargs, **lt.kwargs}, lt.env, list(lt.gates))
    except BaseException:
        for p in procs:
            kill_process(p)
        shutil.rmtree(gate_dir, ignore_errors=True)
        raise
    exited: set[int] = set()
    stuck_since: float | None = None

    def stop(now: float) -> str | None:
        """Opens exited-<r> as founders exit; gives up when every founder is
        gone but a late process still waits at a gate nobody will open."""
        nonlocal stuck_since
        for r in range(world):
            if r not in exited and procs[r].poll() is not None:
                exited.add(r)
                open_gate(f"exited-{r}", repr(time.time()), base=gate_dir)
        stuck = [(names[world + i], g) for i, lt in enumerate(late)
                 if procs[world + i].poll() is None
                 for g in lt.gates if not gate_is_open(g, base=gate_dir)]
        if len(exited) == world and stuck:
            stuck_since = stuck_since or now
            if now - stuck_since > 2:
                return f"every rank exited; still waiting at unopened gates: {stuck}"
        return None

    try:
        outs, failed = supervise(procs, names, logs, deadline, stop, killed)
    finally:
        shutil.rmtree(gate_dir, ignore_errors=True)
    if failed and any("EADDRINUSE" in o for o in outs):
        raise _PortTaken()
    if failed:
        detail = "\n".join(f"----- {n} -----\n{o[-6000:]}" for n, o in zip(names, outs,
                                                                             strict=True))
        what = f"{world} ranks" + (f" + {len(late)} late" if late else "")
        raise AssertionError(f"{module}.{func} on {what} failed: {failed}\n{detail}")
    return outs


def _worker() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", required=True)
    ap.add_argument("--func", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backend", default="mooncake")
    ap.add_argument("--init", default="tcp", choices=["tcp", "env", "none"])
    ap.add_argument("--kwargs", default="{}")
    ap.add_argument("--gate", action="append", default=[])
    ap.add_argument("--gate-timeout", type=float, default=180.0)
    a = ap.parse_args()

    import torch.distributed as dist

    # A late process: wait for its gates before anything of mooncake exists here.
    for g in a.gate:
        wait_gate(g, a.gate_timeout)

    from mooncake import pg  # noqa: F401  (registers the backends)

    sys.path.insert(0, str(HERE))
    fn = getattr(importlib.import_module(a.module), a.func)
    kwargs = json.loads(a.kwargs)
    if a.init == "none":  # the case initialises (and destroys) itself
        fn(a.rank, a.world, port=a.port, **kwargs)
        return 0
    if a.init == "env":
        dist.init_process_group(backend=a.backend, init_method="env://")
    else:
        dist.init_process_group(backend=a.backend, init_method=f"tcp://127.0.0.1:{a.port}",
                                rank=a.rank, world_size=a.world)
    try:
        fn(dist.get_rank(), dist.get_world_size(), **kwargs)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_worker())
