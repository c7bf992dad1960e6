"""A store client on a rig host, driven through JSON lines (test_cluster_store.py).

``store_node.py LOCAL_HOSTNAME METADATA_URL MASTER SEGMENT BUFFER`` sets a
`MooncakeDistributedStore` up (SEGMENT "0": a pure client that holds no
replica), prints ``READY <segment name>`` (or ``FAILED <rc>`` and exits 1),
then answers each stdin line ``[method, args]`` with one line
``{"result": ...}`` or ``{"error": ...}``:

    ["put", [key, base64 value, replicas]]  -> return code
    ["get", [key]]                          -> base64 of the value

EOF on stdin closes the store and exits.
"""

from __future__ import annotations

import base64
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
