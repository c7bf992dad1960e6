"""Segments mounted after setup, and unmounting them with a grace period.

`allocate_and_mount_segment` / `unmount_and_free_segment` and
`unmount_segment(ids, grace_period_seconds)`: during the grace period the
segment takes no new replicas but what it holds stays readable; then it is
unmounted and its objects are gone.
"""

from __future__ import annotations

import time

from conftest import wait_for
from mooncake.store import ErrorCode

NO_SPACE = int(ErrorCode.NO_AVAILABLE_HANDLE)


def owned_segment(master, owner) -> dict | None:
    mine = owner.get_hostname()
    return next((s for s in master.segments() if s["name"] == mine), None)


def test_grace_period_drains_then_unmounts(store_master, stores):
    owner = stores(store_master, segment=0)  # contributes only what it mounts
    writer = stores(store_master, segment=0)
    res = owner.allocate_and_mount_segment(1 << 20)
    assert res["ret"] == 0 and res["allocated_size"] == 16 << 20
    ids = res["segment_ids"]
    assert writer.put("grace-old", b"o" * 4096) == 0
    assert owned_segment(store_master, owner)["draining"] is False

    assert owner.unmount_and_free_segment(ids, 2) == 0
    seg = owned_segment(store_master, owner)
    assert seg is not None and seg["draining"] is True
    # no new replicas there, old ones still readable
    assert writer.put("grace-new", b"n" * 4096) == NO_SPACE
    assert writer.get("grace-old") == b"o" * 4096
    # a second grace period for a draining segment is refused
    assert owner.unmount_and_free_segment(ids, 5) == -1
    start = time.monotonic()
    assert wait_for(lambda: owned_segment(store_master, owner) is None, 10)
    assert time.monotonic() - start > 1  # not before the grace period
    assert writer.get("grace-old") == b""
    assert owner.unmount_and_free_segment(ids, 0) == -1  # gone


def test_no_grace_unmounts_a_draining_segment_at_once(store_master, stores):
    owner = stores(store_master, segment=0)
    ids = owner.allocate_and_mount_segment(16 << 20)["segment_ids"]
    assert owner.unmount_and_free_segment(ids, 3600) == 0
    assert owned_segment(store_master, owner)["draining"] is True
    assert owner.unmount_and_free_segment(ids, 0) == 0
    assert owned_segment(store_master, owner) is None


def test_bad_unmounts(store_master, stores):
    owner = stores(store_master, segment=0)
    ids = owner.allocate_and_mount_segment(16 << 20)["segment_ids"]
    assert owner.unmount_segment(ids, 1) == -1  # allocated ids need unmount_and_free_segment
    assert owner.unmount_and_free_segment(["1-2"], 1) == -1
    assert owner.unmount_and_free_segment(ids, -1) == -1
    assert owned_segment(store_master, owner)["draining"] is False
    # closing the client during a grace period unmounts at once
    assert owner.unmount_and_free_segment(ids, 3600) == 0
    owner.close()
    assert wait_for(lambda: owned_segment(store_master, owner) is None, 5)
