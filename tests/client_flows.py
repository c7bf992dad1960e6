#!/usr/bin/env python3
"""The call sequences of real Mooncake clients, one side per process.

Each flow reproduces what a serving framework's Mooncake integration does
with its default settings (protocol "rdma" and all) on a host without RDMA:

* ``sglang_store``: SGLang HiCache's ``MooncakeStore`` (config from env,
  from ``extra_config`` or from a JSON file; warm-up put/get; host KV pool
  registered with ``register_buffer``; pages written with
  ``batch_put_from`` and the multi-buffer form; ``batch_is_exist``;
  ``batch_get_into`` / ``batch_get_into_multi_buffers``).
* ``sglang_te``: SGLang PD disaggregation's ``MooncakeTransferEngine``
  (``initialize(host, "P2PHANDSHAKE", "rdma", "")``,
  ``batch_register_memory``, ``batch_transfer_sync_write``, and a transfer
  to a session that has died, which must fail and leave the engine usable).
* ``vllm_store``: vLLM's store connector (``register_buffer`` of the KV
  caches, multi-buffer save and load, lookup with ``batch_is_exist``,
  ``remove_all(force=True)``).
* ``vllm_p2p``: vLLM's P2P ``MooncakeConnector`` (register, write,
  unregister).
* ``lmcache``: LMCache's mooncakestore backend with ``save_chunk_meta=True``
  (``put_parts(key, meta, kv)``, lookup, ``batch_get_buffer``).

Usage: ``client_flows.py FLOW ROLE JSON`` where ROLE is ``prefill`` (writes)
or ``decode`` (reads). A process prints JSON lines: ``{"ready": ...}`` once
it has set up (TE decode sides include their session and addresses), then
``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``. A side that must
outlive the other (a store writer holds the objects in its segment, a TE
target holds the memory) waits for a line on stdin before it closes.
The bytes of page i are ``page_bytes(seed, i, n)`` on both sides, so a
reader checks them exactly.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import time
from typing import Any

import numpy as np

PAGE = 16 << 10  # bytes of one KV page (one key, or one layer part of a key)
PAGES = 24
LAYERS = 3  # parts per key in the multi-buffer forms


def page_bytes(seed: int, i: int, n: int = PAGE) -> bytes:
    return random.Random(seed * 1_000_003 + i).randbytes(n)


def emit(**kv: Any) -> None:
    print(json.dumps(kv), flush=True)


def wait_release() -> None:
    sys.stdin.readline()


def pool(n_pages: int, fill_seed: int | None = None, page: int = PAGE) -> np.ndarray:
    """A host KV pool: n_pages pages, filled with the seed's pages if given."""
    buf = np.zeros(n_pages * page, dtype=np.uint8)
    if fill_seed is not None:
        for i in range(n_pages):
            buf[i * page : (i + 1) * page] = np.frombuffer(page_bytes(fill_seed, i, page), np.uint8)
    return buf


def check_pool(buf: np.ndarray, seed: int, pages: range, page: int = PAGE, base: int = 0) -> None:
    for j, i in enumerate(pages):
        got = buf[(base + j) * page : (base + j + 1) * page].tobytes()
        if got != page_bytes(seed, i, page):
            raise AssertionError(f"page {i} differs")


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


# --------------------------------------------------------------------------
# SGLang HiCache MooncakeStore


def sglang_config(cfg: dict) -> dict:
    """The config SGLang builds, by cfg["source"]: env, extra_config or a file."""
    from mooncake.store import parse_size

    source = cfg["source"]
    if source == "env":  # MooncakeStoreConfig.load_from_env, with its defaults
        env = os.environ
        return {
            "local_hostname": env.get("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            "metadata_server": env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            "global_segment_size": parse_size(env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", "4GB")),
            "local_buffer_size": 16 << 20,
            "protocol": env.get("MOONCAKE_PROTOCOL", "rdma"),
            "device_name": env.get("MOONCAKE_DEVICE", ""),
            "master_server_address": env["MOONCAKE_MASTER"],
        }
    if source == "extra_config":  # load_from_extra_config
        extra = cfg["extra_config"]
        return {
            "local_hostname": extra.get("local_hostname", "localhost"),
            "metadata_server": extra.get("metadata_server", "P2PHANDSHAKE"),
            "global_segment_size": parse_size(extra.get("global_segment_size", "4GB")),
            "local_buffer_size": 16 << 20,
            "protocol": extra.get("protocol", "rdma"),
            "device_name": extra.get("device_name", ""),
            "master_server_address": extra["master_server_address"],
        }
    with open(cfg["config_file"]) as f:  # from_file(SGLANG_HICACHE_MOONCAKE_CONFIG_PATH)
        file_cfg = json.load(f)
    return {
        "local_hostname": file_cfg.get("local_hostname", "localhost"),
        "metadata_server": file_cfg.get("metadata_server", "P2PHANDSHAKE"),
        "global_segment_size": parse_size(file_cfg.get("global_segment_size", "4GB")),
        "local_buffer_size": parse_size(file_cfg.get("local_buffer_size", "16MB")),
        "protocol": file_cfg.get("protocol", "rdma"),
        "device_name": file_cfg.get("device_name", ""),
        "master_server_address": file_cfg["master_server_address"],
    }


def sglang_store_setup(cfg: dict):
    from mooncake.store import MooncakeDistributedStore

    c = sglang_config(cfg)
    store = MooncakeDistributedStore()
    rc = store.setup(
        c["local_hostname"],
        c["metadata_server"],
        c["global_segment_size"],
        c["local_buffer_size"],
        c["protocol"],
        c["device_name"],
        c["master_server_address"],
    )
    expect(rc == 0, f"setup returned {rc}")
    # SGLang's warm-up round trip
    warm = f"mooncake_store_warmup_key{os.getpid()}"
    expect(store.put(warm, b"\x01" * 4096) == 0, "warm-up put")
    expect(store.is_exist(warm) == 1, "warm-up is_exist")
    expect(store.get(warm) == b"\x01" * 4096, "warm-up get")
    return store


def sglang_store(role: str, cfg: dict) -> None:
    store = sglang_store_setup(cfg)
    seed, prefix = cfg["seed"], cfg["prefix"]
    keys = [f"{prefix}_{i}_k" for i in range(PAGES)]
    multi_keys = [f"{prefix}_{i}_mla" for i in range(PAGES // LAYERS)]
    if role == "prefill":
        host_pool = pool(PAGES, seed)
        expect(store.register_buffer(host_pool.ctypes.data, host_pool.nbytes) == 0, "register")
        base = host_pool.ctypes.data
        ptrs = [base + i * PAGE for i in range(PAGES)]
        res = store.batch_put_from(keys, ptrs, [PAGE] * PAGES)
        expect(res == [0] * PAGES, f"batch_put_from {res}")
        # page-first layout: one key = LAYERS pages of the pool
        parts = [[ptrs[k * LAYERS + j] for j in range(LAYERS)] for k in range(len(multi_keys))]
        res = store.batch_put_from_multi_buffers(
            multi_keys, parts, [[PAGE] * LAYERS] * len(multi_keys)
        )
        expect(res == [0] * len(multi_keys), f"batch_put_from_multi_buffers {res}")
        emit(ready=True)
        emit(ok=True)
        wait_release()
        store.unregister_buffer(host_pool.ctypes.data)
        store.close()
        return
    # decode: lookup, then read into its own registered pool
    exists = store.batch_is_exist(keys + [f"{prefix}_absent"])
    expect(exists == [1] * PAGES + [0], f"batch_is_exist {exists}")
    host_pool = pool(PAGES)
    expect(store.register_buffer(host_pool.ctypes.data, host_pool.nbytes) == 0, "register")
    base = host_pool.ctypes.data
    res = store.batch_get_into(keys, [base + i * PAGE for i in range(PAGES)], [PAGE] * PAGES)
    expect(res == [PAGE] * PAGES, f"batch_get_into {res}")
    check_pool(host_pool, seed, range(PAGES))
    host_pool[:] = 0
    parts = [
        [base + (k * LAYERS + j) * PAGE for j in range(LAYERS)] for k in range(len(multi_keys))
    ]
    res = store.batch_get_into_multi_buffers(multi_keys, parts, [[PAGE] * LAYERS] * len(multi_keys))
    expect(res == [PAGE * LAYERS] * len(multi_keys), f"batch_get_into_multi_buffers {res}")
    check_pool(host_pool, seed, range(len(multi_keys) * LAYERS))
    store.unregister_buffer(host_pool.ctypes.data)
    emit(ready=True)
    emit(ok=True)
    store.close()


# --------------------------------------------------------------------------
# Transfer Engine flows (SGLang PD disaggregation, vLLM P2P connector)


def te_initialize():
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    rc = engine.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")
    expect(rc == 0, f"initialize(rdma) returned {rc}: {engine.last_error()}")
    session = f"127.0.0.1:{engine.get_rpc_port()}"
    return engine, session


def te_flow(role: str, cfg: dict) -> None:
    """sglang_te and vllm_p2p: the target (decode) registers KV buffers and
    publishes them; the initiator (prefill) writes its pages into them."""
    engine, session = te_initialize()
    seed = cfg["seed"]
    # several separately registered buffers, as per-layer KV caches
    fill = role == "prefill"
    bufs = [pool(PAGES // LAYERS, seed + layer if fill else None) for layer in range(LAYERS)]
    ptrs = [b.ctypes.data for b in bufs]
    rc = engine.batch_register_memory(ptrs, [b.nbytes for b in bufs])
    expect(rc == 0, f"batch_register_memory {rc}")
    if role == "decode":
        emit(ready=True, session=session, ptrs=ptrs, size=bufs[0].nbytes)
        wait_release()  # the initiator has written
        for layer, b in enumerate(bufs):
            check_pool(b, seed + layer, range(PAGES // LAYERS))
        if cfg["flow"] == "vllm_p2p":
            expect(engine.batch_unregister_memory(ptrs) == 0, "batch_unregister_memory")
        emit(ok=True)
        wait_release()
        engine.close()
        return
    peer = cfg["peer"]
    n = PAGES // LAYERS
    for layer in range(LAYERS):
        src = [ptrs[layer] + i * PAGE for i in range(n)]
        dst = [peer["ptrs"][layer] + i * PAGE for i in range(n)]
        rc = engine.batch_transfer_sync_write(peer["session"], src, dst, [PAGE] * n)
        expect(rc == 0, f"batch_transfer_sync_write layer {layer}: {rc} {engine.last_error()}")
    if cfg["flow"] == "vllm_p2p":
        # vLLM writes a single block with transfer_sync_write too
        rc = engine.transfer_sync_write(peer["session"], ptrs[0], peer["ptrs"][0], PAGE)
        expect(rc == 0, f"transfer_sync_write {rc}")
        expect(engine.batch_unregister_memory(ptrs) == 0, "batch_unregister_memory")
    emit(ready=True)
    emit(ok=True)
    dead = cfg.get("dead_session")
    if dead:
        # SGLang marks a session failed when a transfer to it fails; the
        # transfer must fail (not hang) and other sessions keep working.
        wait_release()
        start = time.monotonic()
        rc = engine.transfer_sync_write(dead, ptrs[0], peer["ptrs"][0], PAGE)
        emit(dead_rc=rc, seconds=time.monotonic() - start)
        live = engine.batch_transfer_sync_write(
            cfg["live_session"]["session"], [ptrs[1]], [cfg["live_session"]["ptrs"][0]], [PAGE]
        )
        emit(live_rc=live)
    engine.close()


# --------------------------------------------------------------------------
# vLLM store connector


def default_store(cfg: dict):
    """A store set up as vLLM's and LMCache's configs do by default:
    protocol "rdma", device_name ""."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    meta, master = cfg["metadata_server"], cfg["master"]
    rc = store.setup("127.0.0.1", meta, 64 << 20, 16 << 20, "rdma", "", master)
    expect(rc == 0, f"setup {rc}")
    return store


def vllm_store(role: str, cfg: dict) -> None:
    store = default_store(cfg)
    seed, prefix = cfg["seed"], cfg["prefix"]
    n_keys = PAGES // LAYERS
    keys = [f"{prefix}@tp0@{i}" for i in range(n_keys)]
    # one KV cache tensor per layer; key i = block i of every layer
    caches = [pool(n_keys, seed + layer if role == "prefill" else None) for layer in range(LAYERS)]
    for c in caches:
        expect(store.register_buffer(c.ctypes.data, c.nbytes) == 0, "register_buffer")
    parts = [[c.ctypes.data + i * PAGE for c in caches] for i in range(n_keys)]
    sizes = [[PAGE] * LAYERS] * n_keys
    if role == "prefill":
        res = store.batch_put_from_multi_buffers(keys, parts, sizes)
        expect(res == [0] * n_keys, f"save {res}")
        expect(store.batch_is_exist(keys) == [1] * n_keys, "lookup after save")
        emit(ready=True)
        emit(ok=True)
        wait_release()
        store.close()
        return
    hits = store.batch_is_exist(keys + [f"{prefix}@tp0@miss"])
    expect(hits == [1] * n_keys + [0], f"lookup {hits}")
    res = store.batch_get_into_multi_buffers(keys, parts, sizes)
    expect(res == [PAGE * LAYERS] * n_keys, f"load {res}")
    for layer, c in enumerate(caches):
        check_pool(c, seed + layer, range(n_keys))
    removed = store.remove_all(force=True)
    expect(removed >= n_keys, f"remove_all(force=True) removed {removed}")
    expect(store.batch_is_exist(keys) == [0] * n_keys, "keys left after remove_all")
    emit(ready=True)
    emit(ok=True, removed=removed)
    store.close()


# --------------------------------------------------------------------------
# LMCache mooncakestore backend, save_chunk_meta=True

# LMCache's chunk metadata header: format, shape (4 dims) and dtype code.
_META = struct.Struct("<iiiiii")


def lmcache(role: str, cfg: dict) -> None:
    store = default_store(cfg)
    seed, prefix = cfg["seed"], cfg["prefix"]
    keys = [f"{prefix}@vllm@0@{i:016x}" for i in range(PAGES)]
    shape = (2, 4, 16, PAGE // (2 * 4 * 16 * 2))  # bf16: 2 bytes per element
    meta = _META.pack(1, *shape, 2)
    if role == "prefill":
        for i, k in enumerate(keys):
            rc = store.put_parts(k, meta, page_bytes(seed, i))
            expect(rc == 0, f"put_parts {k}: {rc}")
        emit(ready=True)
        emit(ok=True)
        wait_release()
        store.close()
        return
    expect(store.batch_is_exist(keys) == [1] * PAGES, "lookup")
    handles = store.batch_get_buffer(keys + [f"{prefix}@missing"])
    expect(handles[-1] is None, "a missing key gives None")
    for i, h in enumerate(handles[:-1]):
        expect(h is not None and h.size() == _META.size + PAGE, f"handle {i}")
        view = memoryview(h)
        fmt, *dims, dtype = _META.unpack(view[: _META.size])
        expect((fmt, tuple(dims), dtype) == (1, shape, 2), f"metadata of {i}")
        kv = np.frombuffer(h, dtype=np.uint8, offset=_META.size)
        expect(kv.tobytes() == page_bytes(seed, i), f"kv bytes of {i}")
        del view
    emit(ready=True)
    emit(ok=True)
    store.close()


FLOWS = {
    "sglang_store": sglang_store,
    "sglang_te": te_flow,
    "vllm_store": vllm_store,
    "vllm_p2p": te_flow,
    "lmcache": lmcache,
}


def main() -> None:
    flow, role, cfg_json = sys.argv[1:]
    cfg = json.loads(cfg_json)
    cfg["flow"] = flow
    try:
        FLOWS[flow](role, cfg)
    except Exception as e:  # reported to the test as a failed side
        emit(ready=True)
        emit(ok=False, error=f"{type(e).__name__}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
