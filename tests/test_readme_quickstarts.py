"""README.md's quickstarts, run as they stand so that they cannot rot (issue 51).

A quickstart is the fenced block right after a ``<!-- quickstart: NAME -->``
line in README.md. Each Python snippet checks its own result with ``assert``,
so a snippet whose API broke exits non-zero and its test fails.

What the tests change, and nothing else:

* ``store-master`` (shell): ``mooncake_master`` is the installed binary, and
  `MASTER_TEST_FLAGS` moves its listeners to loopback on free ports instead of
  the defaults (0.0.0.0, 50051 and 9003) the README relies on;
* ``store``: the master address ``127.0.0.1:50051`` becomes that RPC port;
* ``collectives`` and ``ep``: ``ep`` continues ``collectives`` in the same
  file, ``allreduce.py``, which ``collectives-run`` starts on two ranks with
  torchrun. The test runs torchrun as ``python -m torch.distributed.run`` (the
  same program, found through the interpreter running the tests) with
  ``--master-addr`` and ``--master-port`` set to loopback and a free port
  instead of the default 29500.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from conftest import LOOPBACK, REPO, free_port, go_binary, port_open, start_server

README = REPO / "README.md"
PARTS = {"engine", "store-master", "store", "collectives", "collectives-run", "ep"}
MAX_LINES = 10
DEFAULT_MASTER = "127.0.0.1:50051"
BLOCK = re.compile(r"^<!-- quickstart: ([\w-]+) -->\n```(\w+)\n(.*?)^```$", re.M | re.S)


def quickstarts() -> dict[str, tuple[str, str]]:
    """NAME -> (language, code) of every marked block in README.md."""
    found: dict[str, tuple[str, str]] = {}
    for name, lang, code in BLOCK.findall(README.read_text()):
        assert name not in found, f"README.md: two quickstarts named {name!r}"
        found[name] = (lang, code)
    return found


def run_python(code: str, path: Path, timeout: float = 120) -> None:
    """Run `code` as the script `path` in a fresh interpreter; fail with its output."""
    path.write_text(code)
    res = subprocess.run(
        [sys.executable, str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, f"{path.name} exited {res.returncode}:\n{res.stdout}{res.stderr}"


def test_every_part_has_a_short_marked_quickstart():
    blocks = quickstarts()
    assert set(blocks) == PARTS
    for name, (lang, code) in blocks.items():
        lines = [ln for ln in code.splitlines() if ln.strip()]
        assert len(lines) <= MAX_LINES, f"quickstart {name!r} has {len(lines)} lines"
        if lang == "python":
            compile(code, f"README.md quickstart {name}", "exec")
        else:
            assert lang == "sh", f"quickstart {name!r} is a {lang!r} block"


def test_engine_quickstart(tmp_path):
    _, code = quickstarts()["engine"]
    run_python(code, tmp_path / "engine_quickstart.py")


def master_argv(go_bin_dir: Path, rpc_port: int, admin_port: int) -> list[str]:
    """The README's `mooncake_master` line, on loopback and the given ports."""
    _, shell = quickstarts()["store-master"]
    lines = [ln for ln in shell.splitlines() if ln.strip()]
    assert len(lines) == 1, "the master's quickstart is one command"
    argv = shlex.split(lines[0], comments=True)
    if argv[-1] == "&":
        argv.pop()
    assert argv[0] == "mooncake_master", argv
    test_flags = [
        f"--rpc_address={LOOPBACK}",
        f"--rpc_port={rpc_port}",
        f"--metrics_host={LOOPBACK}",
        f"--metrics_port={admin_port}",
    ]
    return [go_binary("mooncake_master", go_bin_dir), *argv[1:], *test_flags]


def test_store_quickstart(tmp_path, go_bin_dir):
    _, code = quickstarts()["store"]
    assert code.count(DEFAULT_MASTER) == 1, "the store quickstart names the master once"

    def make_args():
        rpc, admin = free_port(), free_port()
        make_args.rpc = rpc
        return master_argv(go_bin_dir, rpc, admin), lambda: port_open(LOOPBACK, rpc)

    with start_server(make_args, "mooncake_master"):
        code = code.replace(DEFAULT_MASTER, f"{LOOPBACK}:{make_args.rpc}")
        run_python(code, tmp_path / "store_quickstart.py")


def test_collectives_and_ep_quickstarts_on_two_ranks(tmp_path, process_reaper):
    blocks = quickstarts()
    (tmp_path / "allreduce.py").write_text(blocks["collectives"][1] + "\n" + blocks["ep"][1])
    argv = shlex.split(blocks["collectives-run"][1], comments=True)
    assert argv[0] == "torchrun", argv
    test_flags = [f"--master-addr={LOOPBACK}", f"--master-port={free_port()}"]
    launcher = [sys.executable, "-m", "torch.distributed.run"]
    proc = process_reaper.popen(
        [*launcher, *test_flags, *argv[1:]],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # torchrun's workers go with it at the end
    )
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{out[-8000:]}"
