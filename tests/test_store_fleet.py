"""Operating a store fleet: segment lifecycle and drains under load.

A real master and three storage clients. `drain_segment` empties one node
while a separate process reads every key in a loop and this one keeps
writing: no read fails, no write fails, and nothing is left on the drained
node. `retire_segment` takes a segment out of the pool; standby keeps a
node serving reads while new replicas go elsewhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ProcessReaper, go_binary, wait_for
from fleet_load import expected_value
from mooncake.store import ErrorCode, ReplicateConfig, StoreOperationError
from store_fixtures import Master

HERE = Path(__file__).resolve().parent
SIZE = 64 << 10


def node_segments(master, store) -> list[dict]:
    mine = store.get_hostname()
    return [s for s in master.segments() if s["name"] == mine]


def owners(store, key: str) -> set[str]:
    route = store.query_route(key)
    return set() if route is None else {r["owner"] for r in route["replicas"]}


def config(replicas: int = 1, segment: str = "") -> ReplicateConfig:
    cfg = ReplicateConfig()
    cfg.replica_num = replicas
    cfg.preferred_segment = segment
    return cfg


@pytest.fixture(scope="module")
def store_master(go_bin_dir):
    """A master with 2 s read leases: a drain waits for the leases on the
    buffers it moved to end."""
    with ProcessReaper() as reaper:
        yield Master(
            go_binary("mooncake_master", go_bin_dir), reaper, ["--default_kv_lease_ttl=2000"]
        ).start()


@pytest.fixture
def fleet(store_master, stores):
    """Three storage clients and a writer that stores nothing itself."""
    nodes = [stores(store_master, segment="32MB") for _ in range(3)]
    writer = stores(store_master, segment=0)
    return nodes, writer


class ReaderProcess:
    """fleet_load.py in a subprocess, reading `keys` until stopped."""

    def __init__(self, reaper, master, keys: list[str], tmp: Path) -> None:
        keys_file, self.stop_file, self.out_file = tmp / "keys", tmp / "stop", tmp / "out.json"
        keys_file.write_text("\n".join(keys))
        self.proc = reaper.popen(
            [
                sys.executable,
                str(HERE / "fleet_load.py"),
                master.metadata_url,
                master.rpc,
                str(keys_file),
                str(self.stop_file),
                str(self.out_file),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "READY"

    def stop(self) -> dict:
        self.stop_file.write_text("")
        assert self.proc.wait(timeout=60) == 0
        return json.loads(self.out_file.read_text())


def test_drain_under_load_moves_everything_and_no_read_fails(
    store_master, fleet, process_reaper, tmp_path
):
    nodes, writer = fleet
    drained = nodes[1]
    keys = []
    for i in range(90):
        key = f"fleet-drain-{i}"
        # a third on the drained node only, a third on it and another node,
        # the rest elsewhere
        seg = drained.get_hostname() if i % 3 != 2 else nodes[2].get_hostname()
        assert writer.put(key, expected_value(key), config(1 + (i % 3 == 1), seg)) == 0
        keys.append(key)
    on_drained = [k for k in keys if drained.get_hostname() in owners(writer, k)]
    elsewhere_too = [k for k in on_drained if len(owners(writer, k)) > 1]
    assert len(on_drained) >= 60 and len(elsewhere_too) >= 30

    plan = drained.plan_handoff()
    assert plan["objects"] == len(on_drained) and plan["unplaceable"] == 0
    assert {it["key"] for it in plan["items"]} == set(on_drained)
    assert all(it["to_owner"] != drained.get_hostname() for it in plan["items"])

    reader = ReaderProcess(process_reaper, store_master, keys, tmp_path)
    written, write_failures, stop = [], [], threading.Event()

    def write_load() -> None:
        # a steady stream of new objects, each removed 40 writes later, so
        # that the pool never fills
        i = 0
        while not stop.is_set():
            key = f"fleet-drain-new-{i}"
            rc = writer.put(key, expected_value(key))
            (written if rc == 0 else write_failures).append((key, rc))
            if i >= 40 and writer.remove(f"fleet-drain-new-{i - 40}", force=True) != 0:
                write_failures.append((f"remove fleet-drain-new-{i - 40}", -1))
            i += 1

    t = threading.Thread(target=write_load)
    t.start()
    try:
        report = drained.drain_segment()
    finally:
        stop.set()
        t.join()
    result = reader.stop()

    assert result["rounds"] >= 2 and result["reads"] >= 2 * len(keys)
    failed = {k for k, _ in result["failures"]}
    assert not failed & set(elsewhere_too), result["failures"][:5]
    assert not failed, result["failures"][:5]
    assert write_failures == [] and len(written) > 0
    assert report["moves"] >= len(on_drained) - len(elsewhere_too)

    segs = node_segments(store_master, drained)
    assert segs and all(s["mode"] == "DRAINING" and s["allocated"] == 0 for s in segs)
    for key in keys + [k for k, _ in written[-40:]]:
        assert drained.get_hostname() not in owners(writer, key), key
        assert writer.get(key) == expected_value(key), key


def test_standby_serves_reads_and_takes_no_new_replicas(store_master, fleet):
    nodes, writer = fleet
    node = nodes[0]
    assert (
        writer.put(
            "fleet-standby-old",
            expected_value("fleet-standby-old"),
            config(segment=node.get_hostname()),
        )
        == 0
    )
    assert owners(writer, "fleet-standby-old") == {node.get_hostname()}

    node.enter_standby()
    assert {s["mode"] for s in node_segments(store_master, node)} == {"STANDBY"}
    assert (
        writer.put(
            "fleet-standby-new",
            expected_value("fleet-standby-new"),
            config(segment=node.get_hostname()),
        )
        == 0
    )
    assert node.get_hostname() not in owners(writer, "fleet-standby-new")
    assert writer.get("fleet-standby-old") == expected_value("fleet-standby-old")
    # a standby node keeps its replicas until evacuated
    assert owners(writer, "fleet-standby-old") == {node.get_hostname()}

    node.activate()
    assert (
        writer.put(
            "fleet-standby-back",
            expected_value("fleet-standby-back"),
            config(segment=node.get_hostname()),
        )
        == 0
    )
    assert owners(writer, "fleet-standby-back") == {node.get_hostname()}

    # evacuating needs a closed segment; then the replicas move, the mode stays
    with pytest.raises(StoreOperationError) as e:
        node.evacuate_owned_replicas()
    assert e.value.code == ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS
    node.enter_standby()
    node.evacuate_owned_replicas()
    assert {s["mode"] for s in node_segments(store_master, node)} == {"STANDBY"}
    for key in ("fleet-standby-old", "fleet-standby-back"):
        assert owners(writer, key) and node.get_hostname() not in owners(writer, key)
        assert writer.get(key) == expected_value(key)


def test_retire_takes_the_segment_out_of_the_pool(store_master, fleet):
    nodes, writer = fleet
    node = nodes[2]
    extra = node.expand_local_memory(16 << 20)
    assert extra["allocated_size"] == 16 << 20 and len(extra["segment_ids"]) == 1
    assert node.segment_ids()[1:] == extra["segment_ids"]
    keys = [f"fleet-retire-{i}" for i in range(20)]
    for key in keys:
        assert writer.put(key, expected_value(key), config(segment=extra["segment_ids"][0])) == 0
    assert all(owners(writer, k) == {node.get_hostname()} for k in keys)

    report = node.retire_segment(extra["segment_ids"][0])
    assert report["segments"] == extra["segment_ids"] and report["moves"] >= len(keys)
    assert extra["segment_ids"][0] not in {s["id"] for s in store_master.segments()}
    assert len(node.segment_ids()) == 1
    for key in keys:
        assert writer.get(key) == expected_value(key)
    # the retired segment takes nothing: a put naming it goes elsewhere
    assert (
        writer.put("fleet-retire-after", b"x" * SIZE, config(segment=extra["segment_ids"][0])) == 0
    )
    route = writer.query_route("fleet-retire-after")
    assert route is not None and len(route["replicas"]) == 1

    # retiring the setup segment as well leaves the node without memory
    node.retire_segment(node.segment_ids()[0])
    assert node.segment_ids() == []
    assert node_segments(store_master, node) == []
    with pytest.raises(StoreOperationError) as e:
        node.retire_segment("no-such-segment")
    assert e.value.code == ErrorCode.SEGMENT_NOT_FOUND
    for key in keys:
        assert writer.get(key) == expected_value(key)


def test_a_drain_that_cannot_place_an_only_replica_times_out(store_master, stores):
    node = stores(store_master, segment="16MB")
    other = stores(store_master, segment="16MB")
    other.enter_standby()  # no room anywhere else
    assert (
        node.put("fleet-stuck", expected_value("fleet-stuck"), config(segment=node.get_hostname()))
        == 0
    )
    with pytest.raises(StoreOperationError) as e:
        node.drain_segment(timeout_seconds=0.5)
    assert "unplaceable" in str(e.value)
    assert node.get("fleet-stuck") == expected_value("fleet-stuck")
    assert node.plan_handoff()["unplaceable"] >= 1
    other.activate()
    node.drain_segment()
    assert owners(node, "fleet-stuck") == {other.get_hostname()}
    assert wait_for(lambda: node.get("fleet-stuck") == expected_value("fleet-stuck"), 5)


def test_modes_survive_a_master_restart(master_factory, stores):
    master = master_factory()
    node = stores(master, segment="16MB")
    other = stores(master, segment="16MB")
    writer = stores(master, segment=0)
    node.enter_standby()
    master.restart()  # the new master learns every segment as ACTIVE from the remount
    assert wait_for(
        lambda: (
            [s["mode"] for s in node_segments(master, node)] == ["STANDBY"]
            and node_segments(master, other) != []
        ),
        20,
    )
    assert writer.put("fleet-restart", b"r" * SIZE, config(segment=node.get_hostname())) == 0
    assert owners(writer, "fleet-restart") == {other.get_hostname()}
