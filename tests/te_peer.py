#!/usr/bin/env python3
"""A Transfer Engine peer process for tests, and the client that drives it.

Run as a script, it is one side of a transfer (target, initiator or both):

    python te_peer.py --metadata SERVER [--hostname H] [--size N]
                      [--memory managed|plain] [--margin M] [--seed S]

It initializes a `mooncake.engine.TransferEngine`, gets memory for transfers
-- ``managed``: ``allocate_managed_buffer(N)`` (same-host peers reach it
through shared memory); ``plain``: a numpy (else ctypes) array of M+N+M
bytes of which only the middle N are ``register_memory``'d (so tests can
check the unregistered neighbours) -- fills the whole array with
``pattern(S, ...)``, and prints one JSON line::

    {"ok": true, "segment": NAME, "addr": A, "size": N, "base": B,
     "base_size": M+N+M, "rpc_port": P, "pid": PID}

(``addr`` is the registered buffer, ``base`` the start of the array, which
equals ``addr`` for managed memory). Then it serves one command per stdin
line and answers each with one JSON line ``{"ok": true, ...}`` or
``{"ok": false, "error": MSG}``. Offsets are relative to ``base``:

    dump OFF LEN           -> {"data": base64 of the bytes}
    sha256 OFF LEN         -> {"sha256": hex digest of the bytes}
    fill SEED [OFF LEN]    write pattern(SEED, LEN) at OFF (default: all)
    call METHOD JSON_ARGS  -> {"result": R, "elapsed": s, "last_error": str}
                           engine.METHOD(*args); in args, {"notify": [name,
                           msg]} becomes a TransferNotify; results that are
                           TransferNotify lists/bytes become JSON.
    spin JSON_SPEC         start a background loop of transfers (see `_spin`)
    spin_result TIMEOUT    wait <= TIMEOUT s for the loop -> {"log": [...]}
    exit                   close the engine and exit 0

EOF on stdin also exits, so a peer never outlives its driver.

Imported (by tests), it provides `pattern` and `Peer`, which starts this
script as a subprocess and talks to it with timeouts, so a hung peer fails a
test instead of hanging it.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))


def pattern(seed: int, n: int) -> bytes:
    """`n` pseudo-random bytes determined by `seed` (same in every process)."""
    return random.Random(seed).randbytes(n)


# ==========================================================================
# client side (imported by tests)


class PeerError(AssertionError):
    """A peer did not answer, answered badly, or died."""


class Peer:
    """A running te_peer.py process.

    `info` holds the JSON line the peer printed when ready. `cmd` sends a
    command and returns the parsed reply (raising PeerError when the reply
    says ok=false, unless check=False). Every wait has a timeout.
    """

    def __init__(
        self,
        metadata: str,
        *,
        hostname: str = "127.0.0.1",
        size: int = 1 << 20,
        memory: str = "managed",
        margin: int = 0,
        seed: int = 0,
        env: dict[str, str] | None = None,
        popen=subprocess.Popen,
        start_timeout: float = 30.0,
    ) -> None:
        child_env = {
            k: v for k, v in os.environ.items() if not k.startswith("MC_") or k.startswith("MC_LOG")
        }
        child_env.update(env or {})
        argv = [
            sys.executable, os.path.join(HERE, "te_peer.py"),
            "--metadata", metadata,
            "--hostname", hostname,
            "--size", str(size),
            "--memory", memory,
            "--margin", str(margin),
            "--seed", str(seed),
        ]  # fmt: skip
        self.env = env or {}
        self.proc: subprocess.Popen = popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env, text=True, bufsize=1
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.info: dict = self._reply(start_timeout, "start")
        except BaseException:
            self.kill()
            raise
        if not self.info.get("ok"):
            self.kill()
            raise PeerError(f"peer failed to start: {self.info.get('error')}")
        self.segment: str = self.info["segment"]
        self.addr: int = self.info["addr"]
        self.size: int = self.info["size"]
        self.base: int = self.info["base"]
        self.base_size: int = self.info["base_size"]
        self.pid: int = self.info["pid"]

    # -- plumbing -----------------------------------------------------------

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                self._lines.put(line)
        except Exception:
            pass
        self._lines.put(None)

    def _reply(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerError(f"peer {self.proc.pid}: no answer to {what!r} within {timeout} s")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise PeerError(
                    f"peer {self.proc.pid} exited (rc={self.proc.poll()}) before answering {what!r}"
                )
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
            # anything else on stdout is noise (e.g. a library's print)

    def cmd(self, line: str, timeout: float = 30.0, check: bool = True) -> dict:
        """Send one command line; return the reply."""
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise PeerError(
                f"peer {self.proc.pid} is gone ({e}); could not send {line[:80]!r}"
            ) from e
        reply = self._reply(timeout, line[:80])
        if check and not reply.get("ok"):
            raise PeerError(f"peer {self.proc.pid}: {line[:80]!r} failed: {reply.get('error')}")
        return reply

    def call(self, method: str, *args, timeout: float = 30.0) -> object:
        """engine.METHOD(*args) in the peer; returns its result."""
        return self.call_ex(method, *args, timeout=timeout)["result"]

    def call_ex(self, method: str, *args, timeout: float = 30.0) -> dict:
        """Like `call`, but returns the whole reply (result, elapsed, last_error)."""
        return self.cmd(f"call {method} {json.dumps(list(args))}", timeout=timeout)

    # -- memory -------------------------------------------------------------

    def fill(self, seed: int, off: int = 0, length: int | None = None) -> None:
        length = self.base_size - off if length is None else length
        self.cmd(f"fill {seed} {off} {length}")

    def dump(self, off: int, length: int) -> bytes:
        return base64.b64decode(self.cmd(f"dump {off} {length}")["data"])

    def sha256(self, off: int = 0, length: int | None = None) -> str:
        length = self.base_size - off if length is None else length
        return self.cmd(f"sha256 {off} {length}")["sha256"]

    def reg_off(self) -> int:
        """Offset of the registered buffer from `base`."""
        return self.addr - self.base

    # -- lifecycle ----------------------------------------------------------

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGSTOP the peer and return once every one of its threads is stopped.

        kill(2) returns before a multi-threaded process has stopped: the
        thread the kernel picks must run to begin the group stop, and until
        it does (it may wait for a CPU) the other threads go on serving.
        """
        self.proc.send_signal(signal.SIGSTOP)
        tasks = f"/proc/{self.proc.pid}/task"
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for tid in os.listdir(tasks):
                with contextlib.suppress(FileNotFoundError):
                    with open(f"{tasks}/{tid}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
            if states and all(st in ("T", "t") for st in states):
                return
            if time.monotonic() > deadline:
                raise PeerError(
                    f"peer {self.proc.pid}: threads not stopped after {timeout} s: {states}"
                )
            time.sleep(0.001)

    def kill(self) -> None:
        """SIGKILL and reap (idempotent)."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGCONT)
                    self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        finally:
            for f in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(Exception):
                    f.close()

    def close(self, timeout: float = 10.0) -> None:
        """Ask the peer to exit; kill it if it does not."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(Exception):
                    self.proc.stdin.write("exit\n")
                    self.proc.stdin.flush()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=timeout)
        finally:
            self.kill()


# ==========================================================================
# server side (run as a script)


def _jsonable(v):
    from mooncake.engine import TransferNotify

    if isinstance(v, TransferNotify):
        return {"name": v.name, "msg": v.msg}
    if isinstance(v, bytes):
        return {"base64": base64.b64encode(v).decode()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _decode_arg(v):
    from mooncake.engine import TransferNotify

    if isinstance(v, dict) and set(v) == {"notify"}:
        return TransferNotify(*v["notify"])
    if isinstance(v, dict) and set(v) == {"base64"}:
        return base64.b64decode(v["base64"])
    if isinstance(v, list):
        return [_decode_arg(x) for x in v]
    return v


class _Server:
    def __init__(self, engine, base: int, base_size: int) -> None:
        self.engine = engine
        self.base = base
        self.base_size = base_size
        self.spin_thread: threading.Thread | None = None
        self.spin_stop = threading.Event()
        self.spin_log: list = []

    def _range(self, off: int, length: int) -> int:
        if off < 0 or length < 0 or off + length > self.base_size:
            raise ValueError(f"[{off}, +{length}) is outside the array of {self.base_size} bytes")
        return self.base + off

    def dump(self, off, length):
        return {
            "data": base64.b64encode(
                ctypes.string_at(self._range(int(off), int(length)), int(length))
            ).decode()
        }

    def sha256(self, off, length):
        return {
            "sha256": hashlib.sha256(
                ctypes.string_at(self._range(int(off), int(length)), int(length))
            ).hexdigest()
        }

    def fill(self, seed, off="0", length=None):
        off = int(off)
        length = self.base_size - off if length is None else int(length)
        ctypes.memmove(self._range(off, length), pattern(int(seed), length), length)
        return {}

    def call(self, method, args="[]"):
        fn = getattr(self.engine, method)
        t0 = time.monotonic()
        result = fn(*[_decode_arg(a) for a in json.loads(args)])
        elapsed = time.monotonic() - t0
        last = self.engine.last_error() if hasattr(self.engine, "last_error") else ""
        return {"result": _jsonable(result), "elapsed": elapsed, "last_error": last}

    def spin(self, spec):
        """Loop transfers in a thread until stopped or `failures` failures.

        spec: {"target", "buffers", "peer_addrs", "lengths", "opcode",
        "failures" (default 3), "max_seconds" (default 30)}. Each round is
        batch_transfer_async + get_batch_transfer_status; the log holds
        [start, end, rc] per round (time.monotonic(), comparable between
        processes on Linux), rc = -100 when submission returned batch id 0.
        """
        s = json.loads(spec)
        if self.spin_thread is not None and self.spin_thread.is_alive():
            raise RuntimeError("spin already running")
        self.spin_stop.clear()
        self.spin_log = []

        def loop():
            failures = 0
            end = time.monotonic() + s.get("max_seconds", 30)
            while not self.spin_stop.is_set() and time.monotonic() < end:
                t0 = time.monotonic()
                bid = self.engine.batch_transfer_async(
                    s["target"], s["buffers"], s["peer_addrs"], s["lengths"], s.get("opcode", 1)
                )
                rc = self.engine.get_batch_transfer_status([bid]) if bid else -100
                self.spin_log.append([t0, time.monotonic(), rc])
                if rc != 0:
                    failures += 1
                    if failures >= s.get("failures", 3):
                        return

        self.spin_thread = threading.Thread(target=loop, daemon=True)
        self.spin_thread.start()
        return {}

    def spin_result(self, timeout="30"):
        t = self.spin_thread
        if t is None:
            raise RuntimeError("no spin started")
        t.join(float(timeout))
        if t.is_alive():
            self.spin_stop.set()
            t.join(float(timeout))
        return {
            "log": self.spin_log,
            "finished_by_itself": not self.spin_stop.is_set(),
            "alive": t.is_alive(),
        }


def _send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metadata", required=True, help="metadata server string for initialize()")
    ap.add_argument("--hostname", default="127.0.0.1", help="local_hostname for initialize()")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes of registered memory")
    ap.add_argument("--memory", choices=["managed", "plain"], default="managed")
    ap.add_argument("--margin", type=int, default=0, help="plain: unregistered bytes on each side")
    ap.add_argument("--seed", type=int, default=0, help="pattern seed of the initial fill")
    a = ap.parse_args(argv)

    try:
        from mooncake.engine import TransferEngine

        engine = TransferEngine()
        if engine.initialize(a.hostname, a.metadata, a.protocol, "") != 0:
            raise RuntimeError(f"initialize failed: {engine.last_error()}")
        keep = None
        if a.memory == "managed":
            addr = engine.allocate_managed_buffer(a.size)
            if not addr:
                raise RuntimeError(f"allocate_managed_buffer failed: {engine.last_error()}")
            base, base_size = addr, a.size
        else:
            base_size = a.size + 2 * a.margin
            try:  # a numpy array, as applications register; else ctypes
                import numpy

                keep = numpy.zeros(base_size, dtype=numpy.uint8)
                base = keep.ctypes.data
            except ImportError:
                keep = ctypes.create_string_buffer(base_size)
                base = ctypes.addressof(keep)
            addr = base + a.margin
            if engine.register_memory(addr, a.size) != 0:
                raise RuntimeError(f"register_memory failed: {engine.last_error()}")
        server = _Server(engine, base, base_size)
        server.fill(a.seed)
    except Exception as e:  # report, don't die silently
        _send({"ok": False, "error": f"{type(e).__name__}: {e}"})
        return 1

    _send(
        {
            "ok": True,
            "segment": engine.get_local_segment_name(),
            "addr": addr,
            "size": a.size,
            "base": base,
            "base_size": base_size,
            "rpc_port": engine.get_rpc_port(),
            "pid": os.getpid(),
        }
    )
    for line in sys.stdin:
        words = line.split(None, 2) if line.startswith("call ") else line.split()
        if not words:
            continue
        if words[0] == "exit":
            break
        if words[0] == "spin":
            words = line.split(None, 1)
        handler = getattr(server, words[0], None) if not words[0].startswith("_") else None
        if handler is None:
            _send({"ok": False, "error": f"unknown command {words[0]!r}"})
            continue
        try:
            _send({"ok": True, **handler(*words[1:])})
        except Exception as e:
            _send({"ok": False, "error": f"{type(e).__name__}: {e}"})
    server.spin_stop.set()
    engine.close()
    del keep
    return 0


if __name__ == "__main__":
    sys.exit(main())
