"""KV cache events (--enable_kv_events) with a real master, real store
clients and real ZMQ subscribers.

Every message a subscriber receives is decoded twice: with plain msgpack
(the RFC #1527 field names) and with vLLM's own event classes
(vllm.distributed.kv_events.KVEventBatch) through msgspec, exactly as
vLLM's subscriber decodes them. The vLLM classes come from the vllm wheel's
sources, unpacked by scripts/setup.sh into .venv/vllm-src (vLLM is not
installed: its dependencies are huge), so the module is loaded by path
with stand-ins for the publisher-side helpers it imports.
"""

from __future__ import annotations

import ast
import importlib.util
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import msgpack
import msgspec
import pytest
import zmq

from conftest import LOOPBACK, free_ports, go_binary, wait_for
from test_store_offload import disk_peer

REPO = Path(__file__).resolve().parents[1]
VLLM_SRC = REPO / ".venv" / "vllm-src"
END_SEQ = 0xFFFFFFFFFFFFFFFF


def load_vllm_kv_events() -> types.ModuleType:
    """vllm/distributed/kv_events.py from the wheel's sources.

    Its event classes are used as they are. Its imports of vLLM's config,
    logger and network helpers (used only by its publisher) get stand-ins;
    ExternalBlockHash is evaluated from the alias in the wheel's
    vllm/v1/core/kv_cache_utils.py.
    """
    src = VLLM_SRC / "vllm" / "distributed" / "kv_events.py"
    if not src.is_file():
        pytest.fail(f"{src} is missing: run scripts/setup.sh (it unpacks the vllm wheel's sources)")
    utils = (VLLM_SRC / "vllm" / "v1" / "core" / "kv_cache_utils.py").read_text()
    alias = next(
        n
        for n in ast.parse(utils).body
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "ExternalBlockHash"
    )
    external_block_hash = eval(compile(ast.Expression(alias.value), "kv_cache_utils", "eval"))
    stand_ins = {
        "vllm.config.kv_events": {"KVEventsConfig": object},
        "vllm.logger": {"init_logger": lambda name: __import__("logging").getLogger(name)},
        "vllm.utils.network_utils": dict.fromkeys(
            ["get_ip", "get_tcp_uri", "is_valid_ipv6_address", "split_zmq_path"], None
        ),
        "vllm.v1.core.kv_cache_utils": {"ExternalBlockHash": external_block_hash},
    }
    saved = {}
    for name, attrs in stand_ins.items():
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            saved.setdefault(sub, sys.modules.get(sub))
            sys.modules.setdefault(sub, types.ModuleType(sub))
        sys.modules[name].__dict__.update(attrs)
    try:
        spec = importlib.util.spec_from_file_location("vllm_kv_events_under_test", src)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for sub, old in saved.items():
            if old is None:
                sys.modules.pop(sub, None)
            else:
                sys.modules[sub] = old
    return mod


VLLM = load_vllm_kv_events()
VLLM_DECODER = msgspec.msgpack.Decoder(type=VLLM.KVEventBatch)


def decode(seq_frame: bytes, payload: bytes) -> tuple[int, list]:
    """(sequence number, event maps) of one message, after checking that
    vLLM's classes decode it to the same events."""
    seq = int.from_bytes(seq_frame, "big")
    ts, events, dp_rank = msgpack.unpackb(payload, raw=False)
    assert isinstance(ts, int) and isinstance(dp_rank, int)
    batch = VLLM_DECODER.decode(payload)
    assert len(batch.events) == len(events)
    for ev, vev in zip(events, batch.events, strict=True):
        want = {
            "stored": VLLM.BlockStored,
            "removed": VLLM.BlockRemoved,
            "cleared": VLLM.AllBlocksCleared,
        }
        assert type(vev) is want[ev["event_type"]], (ev, vev)
        if ev["event_type"] != "cleared":
            assert vev.block_hashes == ev["seq_hashes"] and vev.medium == ev["medium"]
    return seq, events


class Subscriber:
    """A pyzmq SUB socket on the master's PUB endpoint, subscribed to everything."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.seqs: list[int] = []
        self.events: list[dict] = []
        self.batches: list[tuple[int, list[dict]]] = []

    def poll(self, timeout: float) -> bool:
        """Receive one message within timeout seconds; False when none came."""
        if not self.sock.poll(int(timeout * 1000)):
            return False
        topic, seq_frame, payload = self.sock.recv_multipart()
        assert topic == b""
        seq, events = decode(seq_frame, payload)
        self.seqs.append(seq)
        self.events.extend(events)
        self.batches.append((seq, events))
        return True

    def until(self, pred, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; received {[short(e) for e in self.events][-20:]}"
            self.poll(min(left, 0.5))

    def close(self) -> None:
        self.sock.close()


def short(ev: dict) -> str:
    return f"{ev['event_type']} {ev.get('medium')} {ev.get('object_key', '')}".strip()


def replay(ctx: zmq.Context, endpoint: str, start: int, end: int | None = None):
    """Ask the replay endpoint for batches from start (to end): ([(seq,
    events)], status map or None)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    try:
        req = start.to_bytes(8, "big") + (b"" if end is None else end.to_bytes(8, "big"))
        s.send_multipart([b"", req])  # the delimiter vLLM's subscriber's REQ socket adds
        got = []
        while True:
            assert s.poll(20000), "no answer from the replay endpoint"
            frames = s.recv_multipart()
            assert frames[0] == b"" and len(frames) == 4, frames
            _, topic, seq_frame, payload = frames
            if int.from_bytes(seq_frame, "big") == END_SEQ:
                return got, (msgpack.unpackb(payload, raw=False) if payload else None)
            got.append(decode(seq_frame, payload))
    finally:
        s.close()


@pytest.fixture
def zctx():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def events_master(master_factory, *flags: str, replay_steps: int | None = None):
    pub, rep = free_ports(2)
    argv = [
        "--enable_kv_events",
        f"--kv_events_bind_endpoint=tcp://{LOOPBACK}:{pub}",
        f"--kv_events_replay_endpoint=tcp://{LOOPBACK}:{rep}",
        "--kv_events_backend_id=pool-a",
        *flags,
    ]
    if replay_steps is not None:
        argv.append(f"--kv_events_replay_buffer_steps={replay_steps}")
    m = master_factory(*argv)
    m.pub_endpoint, m.replay_endpoint = f"tcp://{LOOPBACK}:{pub}", f"tcp://{LOOPBACK}:{rep}"
    return m


def join(sub: Subscriber, store, tag: str) -> int:
    """Put probe objects until sub receives one (ZMQ subscribers miss what
    is published while they connect); returns the probe's sequence number."""
    n = 0

    def probe() -> bool:
        nonlocal n
        n += 1
        assert store.put(f"probe-{tag}-{n}", b"p") == 0
        return sub.poll(0.3) and any(
            e.get("object_key", "").startswith(f"probe-{tag}") for e in sub.events
        )

    assert wait_for(probe, 20, interval=0)
    while sub.poll(0.3):
        pass
    return sub.seqs[-1]


def test_put_remove_and_remove_all_events_in_order(master_factory, stores, zctx):
    master = events_master(master_factory)
    store = stores(master)
    sub = Subscriber(zctx, master.pub_endpoint)
    first = join(sub, store, "a")
    mark = len(sub.events)

    assert store.put("12345", b"x" * 100) == 0
    assert store.put("0xabcdef", b"y" * 100) == 0
    assert store.put("plain-key", b"z" * 100) == 0
    assert store.remove("12345") == 0
    assert store.remove_all() >= 0
    sub.until(lambda: any(e["event_type"] == "cleared" for e in sub.events))
    got = sub.events[mark:]

    # Sequence numbers and event ids are consecutive from the join on.
    assert sub.seqs == list(range(sub.seqs[0], sub.seqs[0] + len(sub.seqs))), sub.seqs
    assert sub.seqs[0] <= first
    ids = [e["event_id"] for e in sub.events]
    assert ids == list(range(ids[0], ids[0] + len(ids)))

    objects = [
        (e["event_type"], e["medium"], e["object_key"]) for e in got if e["event_type"] != "cleared"
    ]
    assert objects[:4] == [
        ("stored", "cpu", "12345"),
        ("stored", "cpu", "0xabcdef"),
        ("stored", "cpu", "plain-key"),
        ("removed", "cpu", "12345"),
    ]
    removed_by_all = {k for t, _, k in objects[4:] if t == "removed"}
    assert {"0xabcdef", "plain-key"} <= removed_by_all
    assert got[-1]["event_type"] == "cleared" and got[-1]["tenant_id"] == "default"

    by_key = {e["object_key"]: e for e in got if e["event_type"] == "stored"}
    assert by_key["12345"]["seq_hashes"] == [12345] and by_key["12345"]["block_hashes"] == [12345]
    assert by_key["0xabcdef"]["seq_hashes"] == [0xABCDEF]
    assert by_key["plain-key"]["seq_hashes"] == []
    e = by_key["12345"]
    assert (
        e["backend_id"] == "pool-a" and e["tenant_id"] == "default" and e["type"] == "BlockStored"
    )
    assert e["parent_hash"] is None and e["base_block_idx"] is None and e["dp_rank"] == 0
    sub.close()
    m = master.metrics()
    assert m["master_kv_events_published_events_total"] >= len(sub.events)
    assert m["master_kv_events_dropped_events_total"] == 0
    assert m["master_kv_events_subscriber_dropped_batches_total"] == 0


def test_eviction_publishes_removals(master_factory, stores, zctx):
    master = events_master(
        master_factory,
        "--eviction_high_watermark_ratio=0.7",
        "--eviction_ratio=0.3",
        "--default_kv_lease_ttl=100",
    )
    store = stores(master, segment="8MB")
    sub = Subscriber(zctx, master.pub_endpoint)
    join(sub, store, "e")
    mark = len(sub.events)
    keys = [str(1000 + i) for i in range(24)]  # 24 MiB through 8 MiB of memory
    for k in keys:
        assert wait_for(lambda k=k: store.put(k, b"v" * (1 << 20)) == 0, 20, interval=0.1)
    assert master.metrics()["master_evicted_key_count"] > 0

    # Every key either still is in the pool or was announced as removed.
    def settled() -> bool:
        sub.poll(0.2)
        removed = {e["object_key"] for e in sub.events[mark:] if e["event_type"] == "removed"}
        return all(k in removed or master.query_key(k) is not None for k in keys)

    assert wait_for(settled, 20, interval=0)
    stored = [e["object_key"] for e in sub.events[mark:] if e["event_type"] == "stored"]
    removed = [
        e for e in sub.events[mark:] if e["event_type"] == "removed" and e["object_key"] in keys
    ]
    assert removed, "eviction published no removal"
    for e in removed:  # no removal without a store before it
        assert (
            e["object_key"] in stored
            and e["medium"] == "cpu"
            and e["seq_hashes"] == [int(e["object_key"])]
        )
    assert sub.seqs == list(range(sub.seqs[0], sub.seqs[0] + len(sub.seqs)))
    sub.close()


def test_offload_publishes_the_disk_medium(master_factory, peers, stores, zctx, tmp_path):
    master = events_master(master_factory, "--enable_offload", "--default_kv_lease_ttl=2000")
    disk_peer(peers, master, tmp_path / "a")
    writer = stores(master, segment=0)
    sub = Subscriber(zctx, master.pub_endpoint)
    join(sub, writer, "o")
    assert writer.put("0x77", b"d" * 4096) == 0
    sub.until(
        lambda: (
            ("stored", "disk", "0x77")
            in {(e["event_type"], e["medium"], e.get("object_key")) for e in sub.events}
        )
    )
    assert writer.remove("0x77") == 0
    sub.until(
        lambda: (
            sum(e["event_type"] == "removed" and e.get("object_key") == "0x77" for e in sub.events)
            == 2
        )
    )
    mine = [(e["event_type"], e["medium"]) for e in sub.events if e.get("object_key") == "0x77"]
    assert mine[0] == ("stored", "cpu") and ("stored", "disk") in mine
    assert sorted(mine[-2:]) == [("removed", "cpu"), ("removed", "disk")]
    sub.close()


def test_a_subscriber_that_missed_batches_recovers_them_by_replay(master_factory, stores, zctx):
    master = events_master(master_factory)
    store = stores(master)
    fast = Subscriber(zctx, master.pub_endpoint)
    join(fast, store, "f")
    flaky = Subscriber(zctx, master.pub_endpoint)
    last = join(flaky, store, "s")
    flaky.close()  # it misses everything published while it is away
    for i in range(30):
        assert store.put(f"{5000 + i}", b"m") == 0
    back = Subscriber(zctx, master.pub_endpoint)
    seen = join(back, store, "b")
    fast.until(lambda: fast.seqs[-1] >= seen)
    assert back.seqs[0] > last + 1, "the reconnected subscriber saw no gap"
    got, status = replay(zctx, master.replay_endpoint, last + 1, back.seqs[0] - 1)
    assert status is None
    assert [s for s, _ in got] == list(range(last + 1, back.seqs[0]))
    recovered = [e for _, evs in got for e in evs] + back.events
    want = [e for s, evs in fast.batches if last < s <= back.seqs[-1] for e in evs]
    assert [e["event_id"] for e in recovered] == [e["event_id"] for e in want]
    assert [e.get("object_key") for e in recovered] == [e.get("object_key") for e in want]
    m = master.metrics()
    assert m["master_kv_events_replay_requests_total"] >= 1
    assert m["master_kv_events_replayed_batches_total"] >= len(got)
    for s in (fast, back):
        s.close()


def test_replay_of_batches_the_ring_no_longer_holds_is_too_old(master_factory, stores, zctx):
    master = events_master(master_factory, replay_steps=4)
    store = stores(master)
    sub = Subscriber(zctx, master.pub_endpoint)
    first = join(sub, store, "t")
    for i in range(10):  # one batch each: the next put waits for the event
        assert store.put(f"{7000 + i}", b"t") == 0
        sub.until(lambda i=i: sub.events[-1].get("object_key") == f"{7000 + i}")
    assert sub.seqs[-1] >= first + 10
    got, status = replay(zctx, master.replay_endpoint, first)
    assert got == [] and status["error"] == "too_old"
    assert status["newest_seq"] == sub.seqs[-1] and status["oldest_seq"] == sub.seqs[-1] - 3
    got, status = replay(zctx, master.replay_endpoint, sub.seqs[-1] - 3)
    assert status is None and [s for s, _ in got] == sub.seqs[-4:]
    assert master.metrics()['master_kv_events_replay_refused_total{reason="too_old"}'] == 1
    sub.close()


def test_a_late_subscriber_sees_only_new_events(master_factory, stores, zctx):
    master = events_master(master_factory)
    store = stores(master)
    early = Subscriber(zctx, master.pub_endpoint)
    join(early, store, "x")
    for i in range(5):
        assert store.put(f"old-{i}", b"o") == 0
    early.until(lambda: sum(e.get("object_key", "").startswith("old-") for e in early.events) == 5)
    before = early.seqs[-1]
    late = Subscriber(zctx, master.pub_endpoint)
    join(late, store, "l")
    assert late.seqs[0] > before
    assert not any(e.get("object_key", "").startswith("old-") for e in late.events)
    early.close()
    late.close()


def run_master(*flags: str, timeout: float = 20) -> subprocess.CompletedProcess:
    binary = go_binary("mooncake_master", REPO / "build" / "test-bin")
    rpc, meta, admin = free_ports(3)
    argv = [
        binary,
        f"--rpc_address={LOOPBACK}",
        f"--rpc_port={rpc}",
        f"--metrics_host={LOOPBACK}",
        f"--metrics_port={admin}",
        "--enable_metric_reporting=false",
        *flags,
    ]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    "flags, rc, message",
    [
        (["--enable_kv_events", "--kv_events_backend_id=a"], 2, "needs --kv_events_bind_endpoint"),
        (
            ["--enable_kv_events", "--kv_events_bind_endpoint=tcp://127.0.0.1:0"],
            2,
            "needs --kv_events_backend_id",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://127.0.0.1:0",
                "--kv_events_queue_capacity=-1",
            ],
            2,
            "--kv_events_queue_capacity=-1",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://127.0.0.1:0",
                "--kv_events_block_size=-3",
            ],
            2,
            "kv_events_block_size",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=udp://127.0.0.1:5557",
            ],
            1,
            'transport "udp" is not supported',
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://192.0.2.1:5557",
            ],
            1,
            "bind tcp://192.0.2.1:5557",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://127.0.0.1:0",
                "--kv_events_replay_buffer_steps=0",
            ],
            2,
            "--kv_events_replay_buffer_steps=0: want a positive number",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://127.0.0.1:5557",
                "--kv_events_replay_endpoint=tcp://127.0.0.1:5557",
            ],
            2,
            "--kv_events_replay_endpoint must differ from --kv_events_bind_endpoint",
        ),
        (
            [
                "--enable_kv_events",
                "--kv_events_backend_id=a",
                "--kv_events_bind_endpoint=tcp://127.0.0.1:0",
                "--kv_events_replay_endpoint=tcp://192.0.2.1:5558",
            ],
            1,
            "kv events replay: zmtp: bind tcp://192.0.2.1:5558",
        ),
    ],
)
def test_bad_configuration_fails_startup(flags, rc, message):
    res = run_master(*flags)
    assert res.returncode == rc, res.stderr[-2000:]
    assert message in res.stderr, res.stderr[-2000:]


def test_an_endpoint_in_use_fails_startup():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_master(
            "--enable_kv_events",
            "--kv_events_backend_id=a",
            f"--kv_events_bind_endpoint=tcp://{LOOPBACK}:{port}",
        )
    assert res.returncode == 1 and "address already in use" in res.stderr, res.stderr[-2000:]


def test_after_a_failover_the_new_leader_publishes_a_new_epoch(
    etcd_server, http_metadata_server, master_factory, stores, zctx
):
    ha = ("--enable_ha", f"--etcd_endpoints={etcd_server}", "--client_ttl=5")
    m1 = events_master(master_factory, *ha)
    assert wait_for(lambda: m1.role() == "leader", 20), m1.log_tail()
    m2 = events_master(master_factory, *ha)
    time.sleep(0.5)
    assert m2.role() == "standby"
    etcd_addr = f"etcd://{etcd_server}"
    store = stores(m1, "16MB", "4MB", master_addr=etcd_addr, metadata=http_metadata_server)
    sub = Subscriber(zctx, m1.pub_endpoint)
    sub.sock.connect(m2.pub_endpoint)  # one subscriber of both masters
    join(sub, store, "h1")
    old = sub.seqs[-1]
    assert m2.metrics()["master_kv_events_published_batches_total"] == 0  # a standby is silent

    m1.kill()
    assert wait_for(lambda: m2.role() == "leader", 25), m2.log_tail()
    assert wait_for(lambda: store.put("0x1", b"after") == 0, 20, interval=0.2)
    sub.until(lambda: any(e.get("object_key") == "0x1" for e in sub.events))
    new = sub.seqs[-1]
    assert new > old + 1, (old, new)  # a forward jump: the subscriber sees a gap
    got, status = replay(zctx, m2.replay_endpoint, old + 1)
    assert got == [] and status["error"] == "too_old", status
    assert m2.metrics()["master_kv_events_epoch_start_seq"] > old
    sub.close()
