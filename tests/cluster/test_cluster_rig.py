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


# Serves one connection on HOST:PORT: echoes each byte, then, at EOF, sends
# the sha256 of everything it received.
ECHO = """
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("ready", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
h = hashlib.sha256()
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if len(b) == 1:
        c.sendall(b)
    else:
        h.update(b)
c.sendall(h.hexdigest().encode())
c.close()
"""

# Connects to HOST:PORT, times ROUNDS one-byte round trips, then sends
# BULK pseudo-random bytes; prints the median round trip in seconds and
# whether the server's digest of the bulk matches.
PING = """
import hashlib, random, socket, statistics, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for _ in range(int(sys.argv[3])):
    t0 = time.monotonic()
    c.sendall(b"x")
    assert c.recv(1) == b"x"
    rtts.append(time.monotonic() - t0)
time.sleep(0.5)  # the bulk must not arrive in 1-byte reads mistaken for pings
bulk = random.Random(7).randbytes(int(sys.argv[4]))
c.sendall(bulk)
c.shutdown(socket.SHUT_WR)
digest = b""
while chunk := c.recv(100):
    digest += chunk
print(statistics.median(rtts), digest.decode() == hashlib.sha256(bulk).hexdigest())
"""

DELAY = 0.025  # seconds each way on host 1's link


def round_trip(src: rig.Host, dst: rig.Host, port: int) -> tuple[float, bool]:
    srv = dst.popen([sys.executable, "-c", ECHO, dst.addr, str(port)], stdout=subprocess.PIPE,
                    text=True)
    assert srv.stdout.readline().strip() == "ready"
    res = src.run([sys.executable, "-c", PING, dst.addr, str(port), "20", str(16 << 20)],
                  timeout=120)
    srv.wait(30)
    assert res.returncode == 0, res.stderr
    rtt, intact = res.stdout.split()
    return float(rtt), intact == "True"


def test_delay_adds_to_every_round_trip_through_the_host():
    """Host 1's link delays every frame DELAY each way: a round trip to or
    from it takes at least 2 * DELAY (the forwarder cannot deliver early),
    one between the other two hosts does not pass through it, and 16 MiB
    cross it intact both ways (TCP segments larger than the MTU included)."""
    with rig.Cluster(3, delays={1: DELAY}) as c:
        delayed, b, third = c.hosts
        rtt_to, intact_to = round_trip(b, delayed, 7101)
        rtt_from, intact_from = round_trip(delayed, third, 7102)
        rtt_other, intact_other = round_trip(b, third, 7103)
    print(f"DELAY {DELAY * 1e3:.0f} ms each way: median round trip to the delayed host "
          f"{rtt_to * 1e3:.1f} ms, from it {rtt_from * 1e3:.1f} ms, between the others "
          f"{rtt_other * 1e3:.2f} ms", flush=True)
    assert intact_to and intact_from and intact_other
    assert rtt_to >= 2 * DELAY and rtt_from >= 2 * DELAY
