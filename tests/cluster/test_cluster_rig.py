"""The cluster rig itself (rig.py): hosts reach each other and only each
other, each is its own host to the shm transport, partitions cut exactly the
pair they name, and closing leaves nothing behind."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import rig

from conftest import wait_for

# A TCP echo server on HOST:PORT that answers each connection with its hostname.
SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(socket.gethostname().encode())
    c.close()
"""

# Connects to HOST:PORT; prints what it read, or "unreachable".
CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
        print(c.recv(100).decode())
except OSError:
    print("unreachable")
"""

PORT = 7000


@pytest.fixture(scope="module")
def cluster():
    with rig.Cluster(3) as c:
        yield c


@pytest.fixture(scope="module")
def servers(cluster):
    for h in cluster.hosts:
        p = h.popen([sys.executable, "-c", SERVER, h.addr, str(PORT)], stdout=subprocess.PIPE,
                    text=True)
        assert p.stdout.readline().strip() == "ready"
    return cluster


def reach(src: rig.Host, dst: rig.Host, timeout: float = 2.0) -> str:
    res = src.run([sys.executable, "-c", CLIENT, dst.addr, str(PORT), str(timeout)])
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_hosts_reach_each_other_by_address(servers):
    c = servers
    for a in c.hosts:
        for b in c.hosts:
            assert reach(a, b) == b.name


def test_each_host_is_a_host_of_its_own(cluster):
    """Processes of one host share its pid namespace; hosts do not, nor
    does the machine. (Processes alive at the same time: a pid namespace's
    inode number is reused once it is gone.)"""
    mine = subprocess.run(["readlink", "/proc/self/ns/pid"], capture_output=True, text=True).stdout
    script = "hostname; readlink /proc/self/ns/pid; ip -4 -o addr show dev eth0; exec sleep 60"
    procs = [(h, h.popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True))
             for h in cluster.hosts for _ in range(2)]
    seen: dict[str, set[str]] = {}
    for h, p in procs:
        name, pidns, addr = (p.stdout.readline().strip() for _ in range(3))
        assert name == h.name
        assert pidns != mine.strip()
        assert f" {h.addr}/24 " in addr
        seen.setdefault(h.name, set()).add(pidns)
    assert all(len(v) == 1 for v in seen.values()), seen
    assert len(set.union(*seen.values())) == len(cluster.hosts), seen
    for _, p in procs:
        p.kill()
        p.wait()


def test_kill_of_a_started_process_kills_it_on_the_host(cluster):
    h = cluster[0]
    p = h.popen(["sh", "-c", "echo $$; exec sleep 600"], stdout=subprocess.PIPE, text=True)
    inner = p.stdout.readline().strip()
    assert h.run(["kill", "-0", inner]).returncode == 0
    p.kill()
    p.wait()
    assert wait_for(lambda: h.run(["kill", "-0", inner]).returncode != 0, 10)


def test_host_cannot_reach_the_machine_namespace(cluster):
    # The only routes a host has are its loopback and the rig's subnet.
    res = cluster[0].run(["ip", "-4", "route", "show"])
    routes = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(routes) == 1 and routes[0].startswith(f"10.231.{cluster.subnet}.0/24 "), routes


def test_partition_cuts_only_the_pair_and_heals(servers):
    c = servers
    a, b, third = c.hosts
    c.partition(a, b)
    try:
        assert reach(a, b, 1.0) == "unreachable"
        assert reach(b, a, 1.0) == "unreachable"
        assert reach(a, third) == third.name
        assert reach(third, b) == b.name
    finally:
        c.heal()
    assert reach(a, b) == b.name
    assert reach(b, a) == a.name


def test_close_kills_processes_and_removes_namespaces():
    c = rig.Cluster(2)
    namespaces = [c.bridge_ns] + [h.ns for h in c.hosts]
    p = c[0].popen(["sleep", "600"])
    # The sleep's pid as the machine sees it: a process of host 0's network namespace.
    pids = []
    deadline = time.monotonic() + 10
    while not pids and time.monotonic() < deadline:
        pids = subprocess.run(["ip", "netns", "pids", c[0].ns], capture_output=True,
                              text=True).stdout.split()
    assert pids
    c.close()
    assert p.poll() is not None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in namespaces:
        assert ns not in listed
    assert wait_for(lambda: not any(_alive(pid) for pid in pids), 10)


def _alive(pid: str) -> bool:
    """pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_namespaces_of_a_killed_run_are_removed_by_the_next():
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names a run that no longer exists
    stale = f"{rig.PREFIX}-{gone.pid}-0badc0de-h1"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        with rig.Cluster(1):
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout.split()
            assert stale not in listed
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
