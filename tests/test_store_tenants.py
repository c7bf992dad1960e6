"""Multi-tenancy: a master with --enable_multi_tenants keeps tenants apart.

Clients of different tenants (in this process and in a subprocess) use the
same keys; none can read, list, overwrite or delete another's objects.
Writes need the tenant registered with a quota through the master's admin
API, and a write past the quota fails cleanly. Without the flag, every
tenant shares the default namespace, as upstream.
"""

from __future__ import annotations

import numpy as np
import pytest

from mooncake.store import ErrorCode, MooncakeDistributedStore

QUOTA_EXCEEDED = int(ErrorCode.TENANT_QUOTA_EXCEEDED)
NOT_REGISTERED = int(ErrorCode.TENANT_NOT_REGISTERED)
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
INVALID = int(ErrorCode.INVALID_PARAMS)


def register(master, tenant: str, quota: int = 0) -> dict:
    status, body = master.admin_call(
        "PUT", "/api/v1/tenant_quotas", {"tenant_id": tenant, "quota_bytes": quota}
    )
    assert status == 200, body
    return body


@pytest.fixture
def mt_master(master_factory):
    return master_factory("--enable_multi_tenants=true")


def test_tenants_cannot_see_each_other(mt_master, stores, peers):
    register(mt_master, "a")
    register(mt_master, "b")
    a = stores(mt_master, tenant_id="a")
    b = peers(mt_master, tenant_id="b")  # another process
    default = stores(mt_master)

    assert a.put("shared", b"from a") == 0
    assert a.put("a-only", b"secret") == 0
    # b does not see, read, size or describe a's objects
    assert b.call("is_exist", "shared") == 0
    assert b.call("batch_is_exist", ["shared", "a-only"]) == [0, 0]
    assert b.call("get", "a-only") == b""
    assert b.call("get_size", "a-only") == NOT_FOUND
    assert default.get("shared") == b""
    assert default.get_replica_desc("shared") == []
    # b's put of the same key is b's own object; a's bytes are untouched
    assert b.call("put", "shared", b"from b") == 0
    assert b.call("upsert", "a-only", b"b overwrites?") == 0
    assert a.get("shared") == b"from a" and a.get("a-only") == b"secret"
    assert b.call("get", "shared") == b"from b"
    # b's removes reach only b's objects
    assert b.call("remove", "shared", True) == 0
    assert b.call("remove_by_regex", ".*", True) == 1  # b's a-only
    assert b.call("remove_all", True) == 0
    assert b.call("batch_remove", ["a-only"], True) == [NOT_FOUND]
    assert a.batch_get_buffer(["shared", "a-only"])[1] is not None
    assert bytes(a.get_buffer("shared")) == b"from a"
    # the master lists keys per tenant
    assert sorted(mt_master.keys("a")) == ["a-only", "shared"]
    assert mt_master.keys("b") == []
    assert mt_master.query_key("shared", "a")["size"] == 6
    assert mt_master.query_key("shared") is None  # not in the default tenant

    # zero-copy batch ops are scoped too
    buf = np.frombuffer(b"x" * 64 + b"y" * 64, dtype=np.uint8).copy()
    assert a.batch_put_from(["z1", "z2"], [buf.ctypes.data, buf.ctypes.data + 64], [64, 64]) == [
        0,
        0,
    ]
    out = np.zeros(64, dtype=np.uint8)
    assert b.call("batch_is_exist", ["z1", "z2"]) == [0, 0]
    assert default.batch_get_into(["z1"], [out.ctypes.data], [64]) == [NOT_FOUND]
    assert a.batch_get_into(["z2"], [out.ctypes.data], [64]) == [64]
    assert out.tobytes() == b"y" * 64


def test_quota_overrun_fails_cleanly(mt_master, stores):
    register(mt_master, "small", quota=4096)
    s = stores(mt_master, tenant_id="small")
    assert s.put("fits", b"a" * 3000) == 0
    assert s.put("too-big", b"b" * 2000) == QUOTA_EXCEEDED
    assert s.is_exist("too-big") == 0
    assert s.get("fits") == b"a" * 3000  # nothing lost
    status, info = mt_master.admin_call("GET", "/api/v1/tenant_quotas?tenant_id=small")
    assert status == 200 and info["used_bytes"] == 3000 and info["object_count"] == 1
    metrics = mt_master.metrics()
    assert metrics['master_tenant_used_bytes{tenant_id="small"}'] == 3000
    # removing frees the quota; the write then goes through
    assert s.remove("fits", force=True) == 0  # the get above holds a lease
    assert s.put("too-big", b"b" * 2000) == 0
    # raising the quota takes effect at once
    register(mt_master, "small", quota=1 << 20)
    assert s.put("more", b"c" * 100_000) == 0
    # a tenant holding objects cannot be unregistered
    status, body = mt_master.admin_call("DELETE", "/api/v1/tenant_quotas?tenant_id=small")
    assert status == 409 and body["error_code"] == int(ErrorCode.TENANT_NOT_EMPTY)


def test_unregistered_and_invalid_tenants(mt_master, stores):
    nobody = stores(mt_master, tenant_id="nobody")
    assert nobody.put("k", b"v") == NOT_REGISTERED
    assert nobody.get("k") == b""
    bad = stores(mt_master, tenant_id="_reserved")
    assert bad.put("k", b"v") == INVALID
    assert bad.is_exist("k") == INVALID
    # the default tenant is always registered
    assert stores(mt_master, tenant_id="default").put("k", b"v") == 0
    assert stores(mt_master).get("k") == b"v"


def test_without_multi_tenancy_tenants_share_one_namespace(store_master, stores):
    a = stores(store_master, tenant_id="a")
    b = stores(store_master, tenant_id="b")
    assert a.put("common-key-nomt", b"1") == 0
    assert b.get("common-key-nomt") == b"1"
    assert b.remove("common-key-nomt", force=True) == 0
    assert a.is_exist("common-key-nomt") == 0


def test_setup_tenant_argument_forms(mt_master):
    register(mt_master, "dict-tenant")
    s = MooncakeDistributedStore()
    try:
        rc = s.setup(
            {
                "local_hostname": "127.0.0.1",
                "metadata_server": mt_master.metadata_url,
                "master_server_address": mt_master.rpc,
                "global_segment_size": "16MB",
                "local_buffer_size": "16MB",
                "protocol": "tcp",
                "tenant_id": "dict-tenant",
            }
        )
        assert rc == 0
        assert s.put("dk", b"dv") == 0
        assert mt_master.keys("dict-tenant") == ["dk"]
    finally:
        s.close()
