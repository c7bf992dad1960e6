"""Shared-file-system DISK replicas (mooncake_master --root_fs_dir, spec
store_ext.md §7.1) with a real master, a writer in a subprocess and a reader
in this process, sharing a local directory as 3FS/NFS clients would.

Covered: objects written past what memory holds are all read back, with the
bytes put, from their files once eviction (and the writer's exit) took their
memory; a get reads the file (a deleted file fails the get); a put whose file
cannot be written leaves no DISK replica behind; a relative --root_fs_dir is
refused.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from conftest import go_binary

MiB = 1 << 20
LEASE = "--default_kv_lease_ttl=2000"


def value(key: str, size: int = MiB) -> bytes:
    seed = key.encode() * (size // len(key) + 1)
    return seed[:size]


def put_retrying(peer, key: str, data: bytes) -> int:
    """put, retried while memory is full (-200) until eviction makes room."""
    rc = -200
    for _ in range(100):
        rc = peer.call("put", key, data)
        if rc != -200:
            break
        time.sleep(0.1)
    return rc


def disk_files(root: Path) -> list[Path]:
    return [p for p in (root / "mooncake_cluster").rglob("*") if p.is_file()]


def test_evicted_objects_are_read_from_their_files(master_factory, peers, stores, tmp_path):
    root = tmp_path / "shared"
    master = master_factory(f"--root_fs_dir={root}", LEASE)
    writer = peers(master, segment="16MB")
    reader = stores(master, segment="16MB", buffer="16MB")
    keys = [f"fs/key:{i}" for i in range(40)]  # 40 MiB into 32 MiB of memory
    for k in keys:
        assert put_retrying(writer, k, value(k)) == 0, k
    # The writer's exit finishes its file writes and takes its memory.
    writer.call("close")
    assert len(disk_files(root)) == len(keys)
    disk_only = []
    for k in keys:
        types = [r["replica_type"] for r in master.query_key(k)["replicas"]]
        # Every file is written: memory (where left) is listed first.
        assert types in (["MEMORY", "DISK"], ["DISK"]), (k, types)
        if types == ["DISK"]:
            disk_only.append(k)
    assert len(disk_only) >= len(keys) - 16  # what the reader's segment cannot hold
    for k in keys:
        assert reader.get(k) == value(k), k
    # A disk-only key is read from its file: the descriptor names it, and
    # without it the get fails.
    (desc,) = reader.get_replica_desc(disk_only[0])
    assert desc.is_disk_replica() and not desc.is_memory_replica()
    disk = desc.get_disk_descriptor()
    path = Path(disk.file_path)
    assert disk.object_size == MiB and path.read_bytes() == value(disk_only[0])
    assert path.is_relative_to(root / "mooncake_cluster")
    path.unlink()
    assert reader.get(disk_only[0]) == b""
    # Removing a key deletes its file.
    other = Path(reader.get_replica_desc(disk_only[1])[0].get_disk_descriptor().file_path)
    assert reader.remove(disk_only[1], True) == 0  # force: the gets above hold leases
    deadline = time.monotonic() + 10
    while other.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not other.exists()


def test_failed_file_write_is_revoked(master_factory, peers, stores, tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    # A file where the cluster directory should be: every file write fails
    # (the tests run as root, for whom a read-only directory is writable).
    (root / "mooncake_cluster").write_bytes(b"")
    master = master_factory(f"--root_fs_dir={root}", LEASE)
    writer = peers(master, segment="16MB")
    reader = stores(master, segment="16MB", buffer="16MB")
    assert writer.call("put", "k", value("k")) == 0
    assert reader.get("k") == value("k")  # memory serves it meanwhile
    writer.call("close")
    # The memory replica was in the writer's segment, and the DISK replica
    # was revoked: nothing is left, nothing claims to be readable.
    info = master.query_key("k")
    assert info is None or all(r["replica_type"] != "DISK" for r in info["replicas"]), info
    assert reader.is_exist("k") == 0
    assert reader.get("k") == b""


def test_relative_root_fs_dir_is_refused(go_bin_dir):
    out = subprocess.run(
        [go_binary("mooncake_master", go_bin_dir), "--root_fs_dir=relative/dir"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "absolute path" in out.stderr
