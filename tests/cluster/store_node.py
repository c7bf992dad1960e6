"""A store client on a rig host, driven through JSON lines (test_cluster_store.py).

``store_node.py LOCAL_HOSTNAME METADATA_URL MASTER SEGMENT BUFFER`` sets a
`MooncakeDistributedStore` up (SEGMENT "0": a pure client that holds no
replica), prints ``READY <segment name>`` (or ``FAILED <rc>`` and exits 1),
then answers each stdin line ``[method, args]`` with one line
``{"result": ...}`` or ``{"error": ...}``:

    ["put", [key, base64 value, replicas]]  -> return code
    ["get", [key]]                          -> base64 of the value
    ["put_same_node", [key, base64 value]]  -> return code of a zero-copy
                                               put with prefer_alloc_in_same_node
    ["where", [key]]                        -> transport endpoints of its replicas

EOF on stdin closes the store and exits.
"""

from __future__ import annotations

import base64
import ctypes
import json
import sys


def main(argv: list[str]) -> int:
    hostname, metadata, master, segment, buffer = argv
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    store = MooncakeDistributedStore()
    seg = 0 if segment == "0" else segment
    rc = store.setup(hostname, metadata, seg, buffer, "tcp", "", master)
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        return 1
    print(f"READY {store.get_hostname()}", flush=True)
    for line in sys.stdin:
        method, args = json.loads(line)
        try:
            if method == "put":
                cfg = ReplicateConfig()
                cfg.replica_num = int(args[2])
                result = store.put(args[0], base64.b64decode(args[1]), cfg)
            elif method == "get":
                result = base64.b64encode(store.get(args[0])).decode()
            elif method == "put_same_node":
                data = base64.b64decode(args[1])
                buf = ctypes.create_string_buffer(data, len(data))
                ptr = ctypes.addressof(buf)
                if store.register_buffer(ptr, len(data)) != 0:
                    raise RuntimeError("register_buffer failed")
                cfg = ReplicateConfig()
                cfg.prefer_alloc_in_same_node = True
                result = store.put_from(args[0], ptr, len(data), cfg)
                store.unregister_buffer(ptr)
            elif method == "where":
                result = [
                    r.get_memory_descriptor().buffer_descriptor.transport_endpoint
                    for r in store.get_replica_desc(args[0])
                    if r.is_memory_replica()
                ]
            else:
                raise ValueError(f"unknown method {method!r}")
            reply = {"result": result}
        except Exception as e:  # reported to the test
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
