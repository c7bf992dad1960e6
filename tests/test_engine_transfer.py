"""Transfers between two processes through `mooncake.engine.TransferEngine`.

Every test drives te_peer.py processes: a *target* that owns registered memory
and an *initiator* whose engine calls the Python API (engine variables such as
MC_FORCE_TCP are read when the native library loads, so each configuration
needs its own processes). Covered:

* every metadata backend -- etcd (``etcd://h:p`` and bare ``h:p``), the HTTP
  metadata server, P2PHANDSHAKE -- times every transport -- shared memory
  (target memory from ``allocate_managed_buffer``), TCP (``MC_FORCE_TCP`` in
  both processes), and plain ``register_memory``'d target memory (TCP) --
  times every API flavour (sync, sync with opcode / with notify, batch sync,
  batch async, submit + poll), WRITE and READ, with data checked byte for
  byte on both sides (whole buffers, so stray writes are caught too);
* liveness: the target SIGSTOPped or SIGKILLed mid-run -- pending and new
  transfers fail within MC_TRANSFER_TIMEOUT (+ slack), and a new target is
  reachable from the same initiator;
* requests outside the target's registered memory fail and touch nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import signal
import time
from dataclasses import dataclass

import pytest

from conftest import ProcessReaper
from te_peer import Peer, pattern

# Sizes cross the TCP slice size (4 MiB) and are odd, at odd offsets.
SIZES = [1, 4096, (1 << 20) + 7, 9 << 20]
BUF = 10 << 20 | 1 << 19  # 10.5 MiB: all SIZES at odd offsets fit
MARGIN = 64 << 10  # unregistered bytes around plain memory

BACKENDS = ["etcd", "etcd-bare", "http", "p2p"]
TRANSPORTS = ["shm", "tcp", "plain"]

# Liveness tests: the configured transfer timeout, and the slack allowed on
# top of it. These bound how long a failure may take (a liveness property);
# they are not speed claims.
FAIL_TIMEOUT = 2.0
SLACK = 5.0
# How long the shm transport trusts a poll that found the peer running
# (transfer/shm.AliveRecheck): a transfer that starts within it after the
# peer died may still land in the dead peer's memory, which nobody reads.
ALIVE_RECHECK = 0.001

WRITE, READ = 1, 0

_names = itertools.count(random.Random().randrange(20000, 40000))
_seeds = itertools.count(1000)


def metadata_for(request: pytest.FixtureRequest, backend: str) -> str:
    """The metadata server string of `backend` (starting its server)."""
    if backend == "etcd":
        return "etcd://" + request.getfixturevalue("etcd_server")
    if backend == "etcd-bare":
        return request.getfixturevalue("etcd_server")
    if backend == "http":
        return request.getfixturevalue("http_metadata_server")
    assert backend == "p2p"
    return "P2PHANDSHAKE"


def hostname_for(backend: str) -> str:
    """A local_hostname unique in this session (P2P names itself host:rpc_port)."""
    return "127.0.0.1" if backend == "p2p" else f"127.0.0.1:{next(_names)}"


def transport_env(transport: str, timeout: float) -> dict[str, str]:
    env = {"MC_TRANSFER_TIMEOUT": str(timeout)}
    if transport == "tcp":
        env["MC_FORCE_TCP"] = "true"
    return env


def sha(b: bytes | bytearray) -> str:
    return hashlib.sha256(b).hexdigest()


def layout(start: int, sizes: list[int], gap: int = 13) -> list[int]:
    """Offsets of consecutive pieces of `sizes`, `gap` bytes apart."""
    offs, off = [], start
    for n in sizes:
        offs.append(off)
        off += n + gap
    return offs


def assert_memory(peer: Peer, expected: bytes | bytearray, what: str, off: int = 0) -> None:
    """Check peer memory [off, off+len(expected)) byte for byte."""
    if peer.sha256(off, len(expected)) == sha(expected):
        return
    chunk = 1 << 20
    for c in range(0, len(expected), chunk):
        got = peer.dump(off + c, min(chunk, len(expected) - c))
        want = expected[c : c + len(got)]
        if got != want:
            i = next(i for i in range(len(got)) if got[i] != want[i])
            pytest.fail(
                f"{what}: first difference at offset {off + c + i} (of base, registered buffer at "
                f"{peer.reg_off()}): got {got[i : i + 8].hex()} want {bytes(want[i : i + 8]).hex()}"
            )
    pytest.fail(f"{what}: sha256 differs but no differing byte found")


def poll_check_status(peer: Peer, batch_id: int, timeout: float) -> tuple[int, float]:
    """Poll transfer_check_status until it is not 0; returns (status, seconds)."""
    t0 = time.monotonic()
    while True:
        st = peer.call("transfer_check_status", batch_id)
        if st != 0:
            return st, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"transfer_check_status({batch_id}) still 0 (pending) after {timeout} s")
        time.sleep(0.01)


# ==========================================================================
# data transfers: backend x transport x API x direction


@dataclass
class Pair:
    backend: str
    transport: str
    initiator: Peer
    target: Peer


PAIRS = [(b, t) for b in BACKENDS for t in TRANSPORTS]


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{b}-{t}" for b, t in PAIRS])
def pair(request):
    """A running target and initiator for one backend and transport."""
    backend, transport = request.param
    md = metadata_for(request, backend)
    env = transport_env(transport, 10)
    with ProcessReaper() as reaper:
        memory = "plain" if transport == "plain" else "managed"
        margin = MARGIN if memory == "plain" else 0
        target = Peer(
            md,
            hostname=hostname_for(backend),
            size=BUF,
            memory=memory,
            margin=margin,
            env=env,
            popen=reaper.popen,
        )
        initiator = Peer(md, hostname=hostname_for(backend), size=BUF, env=env, popen=reaper.popen)
        yield Pair(backend, transport, initiator, target)


MODES = ["sync", "sync_opcode", "sync_notify", "batch_sync", "batch_async", "submit"]
CASES = [(m, op) for m in MODES for op in ("write", "read") if not (m == "submit" and op == "read")]


@pytest.mark.parametrize("mode,op", CASES, ids=[f"{m}-{op}" for m, op in CASES])
def test_transfer(pair: Pair, mode: str, op: str) -> None:
    init, tgt = pair.initiator, pair.target
    seg = tgt.segment
    si, st = next(_seeds), next(_seeds)
    init.fill(si)
    tgt.fill(st)
    mem_i, mem_t = bytearray(pattern(si, init.base_size)), bytearray(pattern(st, tgt.base_size))
    offs_i = layout(init.reg_off() + 5, SIZES)
    offs_t = layout(tgt.reg_off() + 11, SIZES)
    assert offs_i[-1] + SIZES[-1] <= init.reg_off() + init.size
    assert offs_t[-1] + SIZES[-1] <= tgt.reg_off() + tgt.size
    locals_ = [init.base + o for o in offs_i]
    remotes = [tgt.base + o for o in offs_t]
    opcode = WRITE if op == "write" else READ
    reqs = list(zip(locals_, remotes, SIZES, strict=True))

    if mode == "sync":
        for loc, rem, n in reqs:
            assert init.call(f"transfer_sync_{op}", seg, loc, rem, n) == 0, n
    elif mode == "sync_opcode":
        for loc, rem, n in reqs:
            assert init.call("transfer_sync", seg, loc, rem, n, opcode) == 0, n
    elif mode == "sync_notify":
        assert tgt.call("get_notifies") == []
        sent = []
        for i, (loc, rem, n) in enumerate(reqs):
            note = {"name": f"from-{init.segment}", "msg": f"{op} #{i} of {n} bytes"}
            assert (
                init.call(
                    "transfer_sync",
                    seg,
                    loc,
                    rem,
                    n,
                    opcode,
                    {"notify": [note["name"], note["msg"]]},
                )
                == 0
            ), n
            sent.append(note)
        assert tgt.call("get_notifies") == sent
        assert tgt.call("get_notifies") == []  # drained
        assert init.call("get_notifies") == []  # only the target is notified
    elif mode == "batch_sync":
        assert init.call(f"batch_transfer_sync_{op}", seg, locals_, remotes, SIZES) == 0
    elif mode == "batch_async":
        # two batches, waited for together
        b1 = init.call(f"batch_transfer_async_{op}", seg, locals_[:2], remotes[:2], SIZES[:2])
        b2 = init.call(f"batch_transfer_async_{op}", seg, locals_[2:], remotes[2:], SIZES[2:])
        assert b1 != 0 and b2 != 0 and b1 != b2
        assert init.call("get_batch_transfer_status", [b1, b2]) == 0
    elif mode == "submit":
        ids = [init.call("transfer_submit_write", seg, loc, rem, n) for loc, rem, n in reqs]
        assert 0 not in ids and len(set(ids)) == len(ids)
        for bid in ids:
            assert poll_check_status(init, bid, 20)[0] == 1
    else:
        raise AssertionError(mode)

    for oi, ot, n in zip(offs_i, offs_t, SIZES, strict=True):
        if opcode == WRITE:
            mem_t[ot : ot + n] = mem_i[oi : oi + n]
        else:
            mem_i[oi : oi + n] = mem_t[ot : ot + n]
    assert_memory(tgt, mem_t, f"target after {mode} {op}")
    assert_memory(init, mem_i, f"initiator after {mode} {op}")


def test_first_buffer_address(pair: Pair) -> None:
    """The initiator learns the target's buffer from its published descriptor."""
    assert pair.initiator.call("get_first_buffer_address", pair.target.segment) == pair.target.addr
    assert pair.initiator.call("send_probe", pair.target.segment) == 0


# ==========================================================================
# liveness: a target that stops or dies


def start_pair(request, reaper: ProcessReaper, backend: str, transport: str, size: int = 2 << 20):
    md = metadata_for(request, backend)
    env = transport_env(transport, FAIL_TIMEOUT)
    name = hostname_for(backend)
    target = Peer(md, hostname=name, size=size, env=env, popen=reaper.popen)
    initiator = Peer(md, hostname=hostname_for(backend), size=size, env=env, popen=reaper.popen)
    return md, env, name, target, initiator


def kill(peer: Peer) -> float:
    """SIGKILL the peer, reap it; returns the monotonic time of the kill."""
    t = time.monotonic()
    peer.proc.send_signal(signal.SIGKILL)
    peer.proc.wait(timeout=10)
    return t


def roundtrip_ok(init: Peer, tgt: Peer, seed: int) -> None:
    """WRITE the initiator's whole buffer to the target and READ it back."""
    n = min(init.size, tgt.size)
    init.fill(seed, init.reg_off(), n)
    assert init.call("transfer_sync_write", tgt.segment, init.addr, tgt.addr, n) == 0
    assert_memory(tgt, pattern(seed, n), "target after write", tgt.reg_off())
    tgt.fill(seed + 1, tgt.reg_off(), n)
    assert init.call("transfer_sync_read", tgt.segment, init.addr, tgt.addr, n) == 0
    assert_memory(init, pattern(seed + 1, n), "initiator after read", init.reg_off())


def new_transfers_fail(init: Peer, seg: str, remote: int, timings: dict, prefix: str) -> None:
    """Every kind of new transfer to the dead `seg` fails within the bound."""
    bound = FAIL_TIMEOUT + SLACK
    n = 1 << 20
    for what, method, args in [
        ("sync_write", "transfer_sync_write", (seg, init.addr, remote, n)),
        ("sync_read", "transfer_sync_read", (seg, init.addr, remote, n)),
        ("batch_sync_write", "batch_transfer_sync_write", (seg, [init.addr], [remote], [n])),
    ]:
        r = init.call_ex(method, *args, timeout=bound + 20)
        assert r["result"] == -1, (what, r)
        assert r["elapsed"] < bound, (what, r["elapsed"])
        timings[f"{prefix}{what}"] = r["elapsed"]
    t0 = time.monotonic()
    bid = init.call(
        "batch_transfer_async_read", seg, [init.addr], [remote], [n], timeout=bound + 20
    )
    if bid != 0:
        assert init.call("get_batch_transfer_status", [bid], timeout=bound + 20) == -1
    timings[f"{prefix}batch_async_read"] = time.monotonic() - t0
    assert timings[f"{prefix}batch_async_read"] < bound
    t0 = time.monotonic()
    bid = init.call("transfer_submit_write", seg, init.addr, remote, n, timeout=bound + 20)
    if bid != 0:
        assert poll_check_status(init, bid, bound + 20)[0] in (-1, -2)
    timings[f"{prefix}submit_write"] = time.monotonic() - t0
    assert timings[f"{prefix}submit_write"] < bound


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_target_mid_run(request, process_reaper, backend: str, transport: str) -> None:
    """SIGKILL the target while the initiator streams transfers to it.

    The stream fails within the timeout (+ slack) and no call hangs; so do
    new transfers of every kind; a new target (same name where names are
    chosen) then works from the same initiator engine.
    """
    md, env, name, tgt, init = start_pair(request, process_reaper, backend, transport)
    roundtrip_ok(init, tgt, next(_seeds))
    half = tgt.size // 2
    spec = {
        "target": tgt.segment,
        "buffers": [init.addr, init.addr + half],
        "peer_addrs": [tgt.addr, tgt.addr + half],
        "lengths": [half, half],
        "opcode": WRITE,
        "failures": 3,
        "max_seconds": 30,
    }
    init.cmd("spin " + json.dumps(spec))
    time.sleep(0.5)
    t_kill = kill(tgt)
    t_dead = time.monotonic()
    res = init.cmd("spin_result 30", timeout=40)
    log = res["log"]
    assert res["finished_by_itself"], f"stream did not stop after failures: {log[-5:]}"
    before = [r for r in log if r[1] < t_kill]
    assert before and all(r[2] == 0 for r in before), f"transfers before the kill: {before[-5:]}"
    fails = [r for r in log if r[2] != 0]
    assert fails
    bound = FAIL_TIMEOUT + SLACK
    assert fails[0][1] - t_kill < bound, (
        f"first failure {fails[0][1] - t_kill:.2f} s after the kill"
    )
    assert all(r[1] - r[0] < bound for r in log), "a round hung"
    late = [r for r in log if r[0] > t_dead + ALIVE_RECHECK]
    assert all(r[2] != 0 for r in late), f"transfer to a dead target succeeded: {late}"
    timings = {"stream_first_failure": fails[0][1] - t_kill}

    new_transfers_fail(init, tgt.segment, tgt.addr, timings, "new_")

    # Recovery: a new target. With etcd it takes over the dead one's segment
    # name; P2P names are host:rpc_port, and the HTTP metadata server (as
    # upstream's) refuses to overwrite the dead target's rpc_meta key, so
    # there the new target has a new name.
    same_name = backend.startswith("etcd")
    name2 = name if same_name else hostname_for(backend)
    tgt2 = Peer(md, hostname=name2, size=tgt.size, env=env, popen=process_reaper.popen)
    if same_name:
        assert tgt2.segment == tgt.segment
    roundtrip_ok(init, tgt2, next(_seeds))
    print(
        f"\nTIMINGS kill {backend}/{transport}: "
        + ", ".join(f"{k}={v:.3f}s" for k, v in timings.items())
    )


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("backend", ["p2p", "etcd"])
def test_kill_target_with_pending_async(
    request, process_reaper, backend: str, transport: str
) -> None:
    """Async transfers pending when the target dies fail within the bound.

    The target is SIGSTOPped first so that TCP transfers stay pending (the
    target cannot answer). Shared-memory transfers need no work from the
    target, so they complete even then (on the initiator's copy workers,
    after the submission returned) -- which shows they do use shm.
    """
    md, env, name, tgt, init = start_pair(request, process_reaper, backend, transport)
    roundtrip_ok(init, tgt, next(_seeds))
    seg, n = tgt.segment, tgt.size // 2
    tgt.stop()
    bw = init.call("batch_transfer_async_write", seg, [init.addr], [tgt.addr], [n])
    br = init.call("batch_transfer_async_read", seg, [init.addr + n], [tgt.addr + n], [n])
    bs = init.call("transfer_submit_write", seg, init.addr, tgt.addr, 4096)
    assert 0 not in (bw, br, bs)
    bound = FAIL_TIMEOUT + SLACK
    timings = {}
    if transport == "shm":
        statuses = [poll_check_status(init, b, bound)[0] for b in (bw, br, bs)]
        assert statuses == [1, 1, 1], "shm transfers need no help from the (stopped) target"
        kill(tgt)
    else:
        statuses = [init.call("transfer_check_status", b) for b in (bw, br, bs)]
        assert statuses == [0, 0, 0], "TCP transfers to a stopped target must be pending"
        t_kill = kill(tgt)
        r = init.call_ex("get_batch_transfer_status", [bw, br], timeout=bound + 20)
        timings["pending_batches"] = time.monotonic() - t_kill
        assert r["result"] == -1, r
        st, _ = poll_check_status(init, bs, bound + 20)
        timings["pending_submit"] = time.monotonic() - t_kill
        assert st in (-1, -2)
        assert timings["pending_submit"] < bound, timings
    new_transfers_fail(init, seg, tgt.addr, timings, "new_")
    tgt2 = Peer(md, hostname=name, size=tgt.size, env=env, popen=process_reaper.popen)
    roundtrip_ok(init, tgt2, next(_seeds))
    print(
        f"\nTIMINGS pending {backend}/{transport}: "
        + ", ".join(f"{k}={v:.3f}s" for k, v in timings.items())
    )


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_stopped_target(request, process_reaper, transport: str) -> None:
    """A target that stops answering (SIGSTOP): TCP transfers time out within
    the bound instead of hanging, shm ones complete; after SIGCONT it works."""
    md, env, name, tgt, init = start_pair(request, process_reaper, "p2p", transport)
    roundtrip_ok(init, tgt, next(_seeds))  # the initiator has the target's descriptor
    seed = next(_seeds)
    init.fill(seed, init.reg_off(), 4096)
    tgt.stop()
    try:
        r = init.call_ex(
            "transfer_sync_write",
            tgt.segment,
            init.addr,
            tgt.addr,
            4096,
            timeout=FAIL_TIMEOUT + SLACK + 20,
        )
    finally:
        tgt.signal(signal.SIGCONT)
    if transport == "shm":
        assert r["result"] == 0, r
        assert_memory(
            tgt, pattern(seed, 4096), "target after shm write while stopped", tgt.reg_off()
        )
    else:
        assert r["result"] == -1, r
        assert r["elapsed"] < FAIL_TIMEOUT + SLACK, r
        print(f"\nTIMINGS stopped tcp: sync_write={r['elapsed']:.3f}s")
    roundtrip_ok(init, tgt, next(_seeds))


# ==========================================================================
# requests outside the target's registered memory

OOR_MEMORY = ["plain", "plain-tcp", "managed", "managed-tcp"]
OOR_SIZE = 6 << 20  # > one 4 MiB TCP slice


@pytest.fixture(scope="module", params=OOR_MEMORY)
def oor_pair(request):
    memory = request.param.split("-")[0]
    env = transport_env("tcp" if request.param.endswith("-tcp") else "shm", 10)
    with ProcessReaper() as reaper:
        margin = MARGIN if memory == "plain" else 0
        tgt = Peer(
            "P2PHANDSHAKE", size=OOR_SIZE, memory=memory, margin=margin, env=env, popen=reaper.popen
        )
        init = Peer("P2PHANDSHAKE", size=OOR_SIZE + (1 << 20), env=env, popen=reaper.popen)
        yield request.param, init, tgt


def oor_cases(a: int, n: int) -> list[tuple[str, int, int]]:
    """(name, remote address, length) of requests not inside [a, a+n)."""
    return [
        ("before", a - 4096, 4096),
        ("straddle-start", a - 8, 64),
        ("straddle-end", a + n - 8, 64),
        ("one-past-end", a, n + 1),
        ("straddle-end-large", a + n - (4 << 20) - 8, (4 << 20) + 16),  # first slice inside
        ("straddle-start-large", a - 16, (4 << 20) + 32),
        ("after", a + n, 4096),
        ("low-address", 4096, 64),
        ("wraps", (1 << 64) - 32, 64),
    ]


OOR_APIS = [
    (op, api)
    for op in ("write", "read")
    for api in ("sync", "batch_async", "submit")
    if (op, api) != ("read", "submit")
]


@pytest.mark.parametrize("op,api", OOR_APIS, ids=[f"{op}-{api}" for op, api in OOR_APIS])
def test_out_of_range(oor_pair, op: str, api: str) -> None:
    """Requests before, across either end of, and after the target's
    registered memory fail (-1) and touch no memory on either side."""
    kind, init, tgt = oor_pair
    si, st = next(_seeds), next(_seeds)
    init.fill(si)
    tgt.fill(st)
    seg = tgt.segment
    bound = 20
    want_t, want_i = sha(pattern(st, tgt.base_size)), sha(pattern(si, init.base_size))
    wrong = {}
    for name, remote, n in oor_cases(tgt.addr, tgt.size):
        if api == "sync":
            rc = init.call(f"transfer_sync_{op}", seg, init.addr, remote, n, timeout=bound)
        elif api == "batch_async":
            bid = init.call(
                f"batch_transfer_async_{op}", seg, [init.addr], [remote], [n], timeout=bound
            )
            rc = init.call("get_batch_transfer_status", [bid], timeout=bound) if bid else -1
        else:
            bid = init.call("transfer_submit_write", seg, init.addr, remote, n, timeout=bound)
            rc = poll_check_status(init, bid, bound)[0] if bid else -1
            rc = -1 if rc in (-1, -2) else rc
        problems = [] if rc == -1 else [f"returned {rc}"]
        # nothing moved: not the target's array (registered part and
        # neighbours), not the initiator's buffer
        if tgt.sha256() != want_t:
            problems.append("target memory changed")
        if init.sha256() != want_i:
            problems.append("initiator memory changed")
        if problems:
            wrong[name] = problems
            tgt.fill(st)
            init.fill(si)
    assert not wrong, f"{kind} {op} via {api}: {wrong}"
    assert_memory(tgt, pattern(st, tgt.base_size), f"{kind} target after rejected {op}s")
    # and the pair still works
    assert init.call(f"transfer_sync_{op}", seg, init.addr, tgt.addr, tgt.size) == 0


# ==========================================================================
# transport_hint


@pytest.mark.parametrize("memory", ["managed", "plain"])
def test_transport_hint(process_reaper, memory: str) -> None:
    """transport_hint picks the transport: "shm" reaches only engine-allocated
    (managed) target memory, "tcp" and "rdma" (which runs as tcp) reach both,
    and a name the engine does not run fails the call with a message, moving
    nothing."""
    margin = MARGIN if memory == "plain" else 0
    n = 1 << 16
    tgt = Peer("P2PHANDSHAKE", size=n, memory=memory, margin=margin, popen=process_reaper.popen)
    init = Peer("P2PHANDSHAKE", size=n, popen=process_reaper.popen)
    seg = tgt.segment
    for hint, ok in [("", True), ("shm", memory == "managed"), ("tcp", True), ("rdma", True)]:
        si, st = next(_seeds), next(_seeds)
        init.fill(si)
        tgt.fill(st)
        rc = init.call("transfer_sync_write", seg, init.addr, tgt.addr, n, hint)
        assert rc == (0 if ok else -1), (hint, rc)
        want = bytearray(pattern(st, tgt.base_size))
        if ok:
            off = tgt.reg_off()
            want[off : off + n] = pattern(si, init.base_size)[init.reg_off() : init.reg_off() + n]
        assert_memory(tgt, want, f"target after a write with hint {hint!r}")
    st = next(_seeds)
    tgt.fill(st)
    reply = init.call_ex("transfer_sync_write", seg, init.addr, tgt.addr, n, "nvlink")
    assert reply["result"] == -1 and "transport_hint" in reply["last_error"], reply
    reply = init.call_ex("batch_transfer_async_write", seg, [init.addr], [tgt.addr], [n], "bogus")
    assert reply["result"] == 0 and "transport_hint" in reply["last_error"], reply
    assert_memory(tgt, pattern(st, tgt.base_size), "target after refused hints")
