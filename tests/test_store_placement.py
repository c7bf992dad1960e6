"""Store-RS placement: ReplicateConfig.prefer_local, preferred storage
owners and segments, routed writes, query_route, and the eviction
watermark settings of setup."""

from __future__ import annotations

import pytest

from conftest import wait_for
from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig
from store_fixtures import setup_code

SIZE = 1 << 16


def blob(key: str, n: int = 1 << 20) -> bytes:
    return (key.encode() * (n // len(key) + 1))[:n]


def owners(store, key: str) -> list[str]:
    route = store.query_route(key)
    assert route is not None, key
    return [r["owner"] for r in route["replicas"]]


def test_query_route_names_owners_and_endpoints(store_master, stores):
    a = stores(store_master, segment="16MB")
    cfg = ReplicateConfig()
    cfg.preferred_segment = a.get_hostname()
    assert a.put("route-k", b"r" * SIZE, cfg) == 0
    route = a.query_route("route-k")
    assert route["key"] == "route-k" and route["size"] == SIZE
    (rep,) = route["replicas"]
    assert rep["owner"] == a.get_hostname() and rep["size"] == SIZE and rep["status"] == 3
    desc = a.get_replica_desc("route-k")[0].get_memory_descriptor().buffer_descriptor
    assert rep["endpoint"] == desc.transport_endpoint and rep["address"] == desc.buffer_address
    assert a.query_route("route-missing") is None


def test_prefer_local_and_preferred_owners(store_master, stores):
    nodes = [stores(store_master, segment="16MB") for _ in range(3)]
    for i in range(6):
        local = ReplicateConfig()
        local.prefer_local = True
        writer = nodes[i % 3]
        assert writer.put(f"place-local-{i}", b"l" * SIZE, local) == 0
        assert owners(writer, f"place-local-{i}") == [writer.get_hostname()]

        owned = ReplicateConfig()
        owned.replica_num = 2
        owned.preferred_storage_owners = [
            nodes[(i + 1) % 3].get_hostname(),
            nodes[(i + 2) % 3].get_hostname(),
        ]
        assert writer.put(f"place-owners-{i}", b"o" * SIZE, owned) == 0
        assert owners(writer, f"place-owners-{i}") == owned.preferred_storage_owners

        one = ReplicateConfig()
        one.preferred_storage_owner = nodes[(i + 2) % 3].get_hostname()
        one.prefer_local = True  # the named owner comes first
        assert writer.put(f"place-owner-{i}", b"o" * SIZE, one) == 0
        assert owners(writer, f"place-owner-{i}") == [one.preferred_storage_owner]


def test_routed_writes_go_to_the_emptiest_segments(store_master, stores):
    nodes = [stores(store_master, segment="16MB") for _ in range(3)]
    # fill the first node a little, so that the other two have the most room
    cfg = ReplicateConfig()
    cfg.preferred_segment = nodes[0].get_hostname()
    assert nodes[0].put("routed-filler", b"f" * (4 << 20), cfg) == 0
    router = stores(store_master, segment=0, routed_writes=True, replica_count=2, route_topk=2)
    for i in range(4):
        assert router.put(f"routed-{i}", b"x" * SIZE) == 0
        got = owners(router, f"routed-{i}")
        assert len(got) == 2 and nodes[0].get_hostname() not in got
        assert router.get(f"routed-{i}") == b"x" * SIZE


@pytest.mark.parametrize(
    "kwargs",
    [
        {"routed_writes": True, "replica_count": 3, "route_topk": 2},
        {"routed_writes": True, "replica_count": 0},
        {"replica_count": 2},
        {"eviction_high_watermark_percent": 0},
        {"eviction_high_watermark_percent": 101},
        {"eviction_high_watermark_percent": 80, "eviction_low_watermark_percent": 80},
        {"eviction_low_watermark_percent": 95},  # above the default high (90)
        {"eviction_high_watermark_percent": "many"},
    ],
)
def test_bad_fleet_settings_fail_setup(store_master, kwargs):
    s = MooncakeDistributedStore()
    try:
        assert setup_code(s, store_master, **kwargs) == int(ErrorCode.INVALID_PARAMS)
    finally:
        s.close()


def test_watermark_settings_come_from_the_environment(store_master, monkeypatch):
    monkeypatch.setenv("MC_STORE_RS_EVICTION_HIGH_WATERMARK_PERCENT", "50")
    monkeypatch.setenv("MC_STORE_RS_EVICTION_LOW_WATERMARK_PERCENT", "60")
    s = MooncakeDistributedStore()
    try:
        # low above high, from the variables
        assert setup_code(s, store_master) == int(ErrorCode.INVALID_PARAMS)
        assert setup_code(s, store_master, eviction_low_watermark_percent=40) == 0
    finally:
        s.close()


def test_a_segment_past_its_high_watermark_is_evicted_to_its_low_one(store_master, stores):
    node = stores(
        store_master,
        segment="16MB",
        eviction_high_watermark_percent=50,
        eviction_low_watermark_percent=20,
    )
    writer = stores(store_master, segment=0)
    cfg = ReplicateConfig()
    cfg.preferred_segment = node.get_hostname()
    keys = [f"wm-{i}" for i in range(9)]  # 9 MiB: 56% of the segment
    for key in keys:
        assert writer.put(key, blob(key), cfg) == 0

    def fill() -> float:
        (seg,) = [s for s in store_master.segments() if s["name"] == node.get_hostname()]
        return seg["allocated"] / seg["size"]

    assert wait_for(lambda: fill() <= 0.20, 10), fill()
    alive = [k for k in keys if writer.is_exist(k) == 1]
    # oldest first: what is left is the newest objects
    assert alive and alive == keys[len(keys) - len(alive) :]
    assert writer.get(keys[-1]) == blob(keys[-1])
