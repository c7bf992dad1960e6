"""Replica management: batch_replica_clear, copy and move tasks.

Spec store_ext.md §6.6. Tasks are executed by the client holding the source
replica, which learns of them in its heartbeat; a task whose executing
client or target segment dies ends FAILED with a message, never silently.
Participants are frozen with SIGSTOP (so that they cannot finish the task
first) and then killed.
"""

from __future__ import annotations

import itertools
import os
import signal
import uuid

import numpy as np
import pytest

from conftest import wait_for
from mooncake.store import (
    MooncakeDistributedStore,
    QueryTaskResponse,
    ReplicateConfig,
    TaskStatus,
    TaskType,
)

INVALID = -600
NOT_FOUND = -704
TASK_NOT_FOUND = -1400
_ids = itertools.count()


def key(tag: str = "t") -> str:
    return f"task/{tag}/{next(_ids)}/{uuid.uuid4().hex[:6]}"


def data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed * 7919 + n).integers(0, 256, n, dtype=np.uint8).tobytes()


def on(segment: str) -> ReplicateConfig:
    c = ReplicateConfig()
    c.preferred_segment = segment
    return c


def finished(store, task_id, timeout: float = 30.0) -> QueryTaskResponse:
    """Poll query_task until the task is SUCCESS or FAILED."""
    out: list[QueryTaskResponse] = []

    def done() -> bool:
        resp, rc = store.query_task(task_id)
        assert rc == 0, rc
        out[:] = [resp]
        return resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED)

    assert wait_for(done, timeout), out
    return out[0]


def segments_of(m, k: str) -> list[str]:
    return sorted(r["segment_name"] for r in m.query_key(k)["replicas"])


# -- batch_replica_clear ------------------------------------------------------------------


def test_batch_replica_clear(master_factory, stores):
    m = master_factory("--default_kv_lease_ttl=60000")
    a, b = stores(m, "16MB", "4MB"), stores(m, "16MB", "4MB")
    mine, two, other = key("mine"), key("two"), key("other")
    assert a.put(mine, b"m") == 0
    two_cfg = ReplicateConfig()
    two_cfg.replica_num = 2
    assert a.put(two, b"2" * 100, two_cfg) == 0
    assert b.put(other, b"o") == 0
    # PutEnd grants no lease: clearable at once; b's key and junk are skipped
    assert a.batch_replica_clear([other, "", key("missing"), mine]) == [mine]
    assert m.query_key(mine) is None and m.query_key(other) is not None
    # only the replica on one segment
    assert a.batch_replica_clear([two], b.get_hostname()) == [two]
    assert segments_of(m, two) == [a.get_hostname()]
    assert a.batch_replica_clear([two], b.get_hostname()) == []
    # a read lease protects the object
    assert a.get(two) == b"2" * 100
    assert a.batch_replica_clear([two]) == []
    assert a.get(two) == b"2" * 100
    assert a.batch_replica_clear([]) == []
    assert MooncakeDistributedStore().batch_replica_clear([two]) == []


# -- copy and move tasks ------------------------------------------------------------------


def test_copy_task_end_to_end(store_master, stores, peers):
    s = stores(store_master, "16MB", "4MB")
    b = peers(store_master, "16MB", "4MB")
    k, v = key("copy"), data(300_000)
    assert s.put(k, v, on(s.get_hostname())) == 0
    task_id, rc = s.create_copy_task(k, [b.hostname])
    assert rc == 0 and isinstance(task_id, tuple) and len(task_id) == 2 and task_id != (0, 0)
    resp = finished(s, task_id)
    assert resp.status == TaskStatus.SUCCESS, resp
    assert resp.type == TaskType.REPLICA_COPY and resp.id == task_id
    assert resp.assigned_client == s.get_hostname()
    assert resp.created_at_ms_epoch <= resp.last_updated_at_ms_epoch
    assert segments_of(store_master, k) == sorted([s.get_hostname(), b.hostname])
    # drop the original: the copy alone must hold the bytes
    assert s.batch_replica_clear([k], s.get_hostname()) == [k]
    assert segments_of(store_master, k) == [b.hostname]
    assert s.get(k) == v
    assert b.call("get", k) == v
    # a copy to a segment holding a replica already adds none
    task_id, rc = s.create_copy_task(k, [b.hostname])
    assert rc == 0
    assert finished(s, task_id).status == TaskStatus.SUCCESS
    assert segments_of(store_master, k) == [b.hostname]


def test_move_task_end_to_end(store_master, stores, peers):
    s = stores(store_master, "16MB", "4MB")
    b = peers(store_master, "16MB", "4MB")
    k, v = key("move"), data(70_000, 3)
    assert b.call("put", k, v, on(b.hostname)) == 0
    task_id, rc = s.create_move_task(k, b.hostname, s.get_hostname())
    assert rc == 0
    resp = finished(s, task_id)
    assert resp.status == TaskStatus.SUCCESS and resp.type == TaskType.REPLICA_MOVE, resp
    assert resp.assigned_client == b.hostname  # the source's client executes it
    assert segments_of(store_master, k) == [s.get_hostname()]
    b.kill()
    assert s.get(k) == v


def test_task_errors(store_master, stores):
    s, t = stores(store_master, "16MB", "4MB"), stores(store_master, "16MB", "4MB")
    k = key("err")
    assert s.put(k, b"e", on(s.get_hostname())) == 0
    here, there = s.get_hostname(), t.get_hostname()
    assert s.create_copy_task(key("missing"), [there]) == ((0, 0), NOT_FOUND)
    assert s.create_copy_task(k, ["127.0.0.1:1"]) == ((0, 0), INVALID)
    assert s.create_copy_task(k, []) == ((0, 0), INVALID)
    assert s.create_move_task(k, here, here) == ((0, 0), INVALID)
    assert s.create_move_task(k, there, here) == ((0, 0), INVALID)  # no replica on source
    assert s.create_move_task(k, "127.0.0.1:1", there) == ((0, 0), INVALID)
    assert s.create_move_task(key("missing"), here, there) == ((0, 0), NOT_FOUND)
    assert s.query_task((12345, 678)) == (None, TASK_NOT_FOUND)
    assert s.query_task("nope") == (None, INVALID)
    assert s.query_task((-1, 0)) == (None, INVALID)
    fresh = MooncakeDistributedStore()
    assert fresh.create_copy_task(k, [there]) == ((0, 0), INVALID)
    assert fresh.query_task((1, 2)) == (None, INVALID)


def test_tasks_are_per_tenant(master_factory, stores):
    m = master_factory("--enable_multi_tenants=true")
    for tenant in ("ta", "tb"):
        status, _ = m.admin_call(
            "PUT", "/api/v1/tenant_quotas", {"tenant_id": tenant, "quota_bytes": 1 << 24}
        )
        assert status == 200
    a = stores(m, "16MB", "4MB", tenant_id="ta")
    other = stores(m, "16MB", "4MB", tenant_id="tb")
    k = key("tenant")
    assert a.put(k, b"t", on(a.get_hostname())) == 0
    assert other.create_copy_task(k, [other.get_hostname()]) == ((0, 0), NOT_FOUND)
    task_id, rc = a.create_copy_task(k, [other.get_hostname()])
    assert rc == 0
    assert other.query_task(task_id) == (None, TASK_NOT_FOUND)
    assert finished(a, task_id).status == TaskStatus.SUCCESS


@pytest.fixture
def tcp(monkeypatch):
    """TCP only: over same-host shared memory a frozen target would still be written."""
    monkeypatch.setenv("MC_FORCE_TCP", "true")
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "5")


def test_task_fails_when_its_executing_client_dies(master_factory, stores, peers):
    m = master_factory("--client_ttl=2", "--client_dead_ttl=2")
    s = stores(m, "16MB", "4MB")
    a = peers(m, "16MB", "4MB")
    k = key("execdies")
    assert a.call("put", k, data(4096), on(a.hostname)) == 0
    os.kill(a.proc.pid, signal.SIGSTOP)  # it can no longer ping, so never runs the task
    try:
        task_id, rc = s.create_copy_task(k, [s.get_hostname()])
        assert rc == 0
        resp, rc = s.query_task(task_id)
        assert rc == 0 and resp.status == TaskStatus.PENDING
        resp = finished(s, task_id)
    finally:
        a.kill()
    assert resp.status == TaskStatus.FAILED, resp
    assert "expired" in resp.message
    # the buffer reserved for the copy went back to the pool
    assert all(sg["name"] != a.hostname for sg in m.segments())
    assert [sg["allocated"] for sg in m.segments() if sg["name"] == s.get_hostname()] == [0]


def test_task_fails_when_its_target_dies(tcp, master_factory, stores, peers):
    m = master_factory("--client_ttl=2", "--client_dead_ttl=2")
    s = stores(m, "16MB", "4MB")
    b = peers(m, "16MB", "4MB")
    k, v = key("targetdies"), data(100_000, 5)
    assert s.put(k, v, on(s.get_hostname())) == 0
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        task_id, rc = s.create_move_task(k, s.get_hostname(), b.hostname)
        assert rc == 0
        resp = finished(s, task_id)
    finally:
        b.kill()
    assert resp.status == TaskStatus.FAILED, resp
    assert resp.message
    # the source replica is untouched
    assert segments_of(m, k) == [s.get_hostname()]
    assert s.get(k) == v
