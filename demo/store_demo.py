"""KV store demo: a storage process, a writer and a reader.

Usage: store_demo.py METADATA_URL MASTER_ADDR. The writer (this process)
contributes no memory; a storage process contributes 256 MiB. The writer
puts bytes and a tensor (also as 2 tensor-parallel shards); a reader
process gets them back and checks them.
"""

from __future__ import annotations

import subprocess
import sys

from mooncake.store import (
    MooncakeDistributedStore,
    ParallelAxis,
    ReadTarget,
    ReplicateConfig,
    TensorParallelism,
)


def client(metadata: str, master: str, segment: str) -> MooncakeDistributedStore:
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", metadata, segment, "64MB", "tcp", "", master)
    if rc != 0:
        sys.exit(f"store setup failed: {rc}")
    return store


def storage(metadata: str, master: str) -> None:
    store = client(metadata, master, "256MB")
    print(f"storage client {store.get_hostname()} contributes 256 MiB", flush=True)
    sys.stdin.readline()
    store.close()


def reader(metadata: str, master: str) -> None:
    import torch

    store = client(metadata, master, "0")
    value = store.get("demo/bytes")
    tensor = store.get_tensor("demo/tensor")
    # put_tensor_with_tp wrote 2 TP shards: name the TP axis to read them whole.
    tp = ParallelAxis()
    tp.kind, tp.rank, tp.size, tp.split_dim = "tp", 0, 2, 1
    target = ReadTarget()
    target.mode, target.parallelism = "full", TensorParallelism([tp])
    full = store.get_tensor_with_parallelism("demo/sharded", target)
    shard1 = store.get_tensor_with_tp("demo/sharded", tp_rank=1, tp_size=2)
    expect = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    checks = {
        "bytes": value == b"hello from mooncake-go" * 1000,
        "tensor": tensor is not None and torch.equal(tensor, expect),
        "tp reassembled": full is not None and torch.equal(full, expect),
        "tp shard 1": shard1 is not None and torch.equal(shard1, expect[:, 32:]),
    }
    for name, ok in checks.items():
        print(f"reader: {name}: {'OK' if ok else 'MISMATCH'}")
    store.close()
    sys.exit(0 if all(checks.values()) else 1)


def writer(metadata: str, master: str) -> None:
    import torch

    host = subprocess.Popen(
        [sys.executable, __file__, metadata, master, "--storage"],
        stdin=subprocess.PIPE,
        text=True,
        stdout=subprocess.PIPE,
    )
    try:
        print(host.stdout.readline().strip())
        store = client(metadata, master, "0")
        cfg = ReplicateConfig()
        cfg.replica_num = 1
        assert store.put("demo/bytes", b"hello from mooncake-go" * 1000, cfg) == 0
        t = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
        assert store.put_tensor("demo/tensor", t) == 0
        assert store.put_tensor_with_tp("demo/sharded", t, tp_size=2, split_dim=1) == 0
        print(
            f"writer: stored 3 objects; is_exist(demo/tensor) = {store.is_exist('demo/tensor')}, "
            f"size {store.get_size('demo/tensor')} B"
        )
        rc = subprocess.run([sys.executable, __file__, metadata, master, "--reader"]).returncode
        store.close()
        host.stdin.write("done\n")
        host.stdin.flush()
        host.wait(timeout=30)
        if rc != 0:
            sys.exit(rc)
    finally:
        if host.poll() is None:
            host.kill()


if __name__ == "__main__":
    meta, master_addr = sys.argv[1], sys.argv[2]
    if "--storage" in sys.argv:
        storage(meta, master_addr)
    elif "--reader" in sys.argv:
        reader(meta, master_addr)
    else:
        writer(meta, master_addr)
