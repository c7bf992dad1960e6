"""NUMA placement of the calling thread (upstream `bind_to_numa_node`).

Linux only, and without libnuma: the node's CPUs come from sysfs, the
thread's CPU affinity is set with `os.sched_setaffinity`, and its memory
policy with the `set_mempolicy` system call (MPOL_PREFERRED: allocations
come from the node while it has free memory).
"""

from __future__ import annotations

import ctypes
import os
import re

NODE_DIR = "/sys/devices/system/node"

_MPOL_PREFERRED = 1
# set_mempolicy's system call number per architecture.
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "s390x": 270}


def parse_cpulist(text: str) -> set[int]:
    """CPUs of a sysfs cpulist ("0-3,8,10-11")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def node_cpus(node: int) -> set[int]:
    """CPUs of NUMA node `node`; ValueError if the host has no such node."""
    path = os.path.join(NODE_DIR, f"node{node}", "cpulist")
    if isinstance(node, bool) or not isinstance(node, int) or node < 0 or not os.path.isfile(path):
        have = _node_names()
        raise ValueError(f"NUMA node {node!r} does not exist on this host (nodes: {have})")
    with open(path, encoding="ascii") as f:
        return parse_cpulist(f.read())


def _node_names() -> list[str]:
    """The host's NUMA nodes as sysfs names them ("node0", ...), sorted."""
    try:
        names = os.listdir(NODE_DIR)
    except OSError:
        return []
    return sorted(n for n in names if re.fullmatch(r"node[0-9]+", n))


def bind_to_numa_node(node: int) -> None:
    """Run the calling thread on NUMA node `node`'s CPUs and prefer its memory.

    ValueError for a node the host lacks; OSError if the kernel refuses.
    """
    cpus = node_cpus(node)
    if not cpus:
        raise ValueError(f"NUMA node {node} has no CPUs")
    os.sched_setaffinity(0, cpus)
    machine = os.uname().machine
    number = _SYS_SET_MEMPOLICY.get(machine)
    if number is None:
        raise OSError(f"bind_to_numa_node: set_mempolicy unknown on {machine}")
    bits = 64
    mask = (ctypes.c_ulong * (node // bits + 1))()
    mask[node // bits] = 1 << (node % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(
        ctypes.c_long(number),
        ctypes.c_int(_MPOL_PREFERRED),
        mask,
        ctypes.c_ulong(len(mask) * bits + 1),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"set_mempolicy(MPOL_PREFERRED, node {node}): {os.strerror(err)}")
