"""A cluster of hosts on one machine, for the cluster tests (tests/cluster/).

``Cluster(n)`` makes `n` hosts. Each host is a network namespace with one
interface, ``eth0``, at ``10.231.X.i/24`` (X is picked per run), joined to
the others through a bridge that lives in a namespace of the rig's own: the
machine's own network namespace is not touched, and traffic between hosts
never leaves the rig's namespaces. Each host also has a pid namespace (so
the shm transport, which treats processes with the same boot id and pid
namespace as one host, is never chosen between hosts, and is between the
processes of one host), a UTS namespace with the host's hostname, and a
mount namespace with the /proc of its pid namespace; `Host.popen` starts a
process in all of them.

``partition(a, b)`` drops every packet between two hosts (nftables rules in
both hosts' namespaces); ``refuse(a, b, ports)`` resets a's connections to
some of b's ports; ``heal()`` removes every such rule.

``Cluster(n, delays={i: seconds})`` puts a delay on host i's link (this
kernel has no netem): its ``eth0`` is joined to the bridge through a
namespace of its own in which a forwarder process (``_DELAY``) copies every
frame between the two sides, each one `seconds` after it arrived, in both
directions. Every packet to or from the host, of any protocol and port,
takes that much longer each way: a round trip between it and another host
gains twice the delay (four times between two delayed hosts).

Cleanup: `close()` kills every process started on a host and deletes every
namespace (which deletes its links); it runs from the fixture's finalizer,
from an atexit hook should the fixture not get to it, and, for namespaces of
runs that died before cleaning up (SIGKILL), at the next `Cluster()`: the
names carry the creating process's pid, and those whose process is gone are
removed. Names are unique per run, so parallel runs do not collide.

Needs root, ``ip`` (iproute2), ``unshare`` (util-linux) and ``nft``
(nftables; iproute2 and nftables are installed from Debian with apt-get
when missing); ``nsenter`` and ``setpriv`` (util-linux). Without root
the tests using the rig are skipped.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

import pytest

PREFIX = "mcrig"
_NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-")
_live: set[Cluster] = set()
_live_lock = threading.Lock()


def _sh(argv: Sequence[str], check: bool = True,
        timeout: float = 30.0) -> subprocess.CompletedProcess:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    return res


def require_tools() -> None:
    """Skip without root; install iproute2 and nftables from Debian when
    missing; fail when a tool is still missing."""
    if os.geteuid() != 0:
        pytest.skip("the cluster rig needs root (network namespaces)")
    packages = [pkg for tool, pkg in (("ip", "iproute2"), ("nft", "nftables"))
                if shutil.which(tool) is None]
    if packages and shutil.which("apt-get") is not None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                       env=env, capture_output=True, timeout=600)
    missing = [t for t in ("ip", "unshare", "nsenter", "setpriv", "nft") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"the cluster rig needs {missing} "
                    "(apt-get install iproute2 util-linux nftables)")


def _netns_list() -> list[str]:
    res = _sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _kill_netns_processes(ns: str) -> None:
    res = _sh(["ip", "netns", "pids", ns], check=False)
    for pid in res.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def _delete_netns(ns: str) -> None:
    _kill_netns_processes(ns)
    _sh(["ip", "netns", "del", ns], check=False)


def remove_stale() -> None:
    """Delete the namespaces of rig runs whose process no longer exists."""
    for ns in _netns_list():
        m = _NAME_RE.match(ns)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _delete_netns(ns)


# pid 1 of a host's pid namespace: sets the hostname, then reaps orphans
# (the processes started on the host are its siblings' children, but
# daemons they start outlive them) until the host is closed.
_HOST_INIT = """
import os, socket, sys, time
socket.sethostname(sys.argv[1])
print("up", flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""



# Run by Host.wait_ports: argv is seconds, address, ports.
_WAIT_PORTS = """
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[1])
for port in sys.argv[3:]:
    while True:
        try:
            socket.create_connection((sys.argv[2], int(port)), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(1)
            time.sleep(0.05)
"""

# Run in a host's delay namespace by Cluster: argv is the two interfaces
# and the delay in seconds. Each frame arriving on one side is sent out the
# other `delay` seconds later, in order. The sockets carry the kernel's
# virtio-net header (PACKET_VNET_HDR), so a TCP segment of up to 64 KiB the
# host's stack hands over whole (GSO) is passed on whole, with its
# checksum still to be completed, and is split for the wire by the other
# side, as the veth would have.
_DELAY = """
import collections, socket, sys, threading, time
ETH_P_ALL, SOL_PACKET, PACKET_VNET_HDR, PACKET_OUTGOING = 3, 263, 15, 4
delay = float(sys.argv[3])

def opened(ifname):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.bind((ifname, 0))
    return s

def pump(src, dst):
    queue, cv = collections.deque(), threading.Condition()
    def send():
        while True:
            with cv:
                while not queue:
                    cv.wait()
                due, frame = queue.popleft()
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                dst.send(frame)
            except OSError:
                pass
    threading.Thread(target=send, daemon=True).start()
    while True:
        frame, addr = src.recvfrom(1 << 17)
        if addr[2] != PACKET_OUTGOING:  # not what the other pump sent out here
            with cv:
                queue.append((time.monotonic() + delay, frame))
                cv.notify()

a, b = opened(sys.argv[1]), opened(sys.argv[2])
threading.Thread(target=pump, args=(b, a), daemon=True).start()
print("up", flush=True)
pump(a, b)
"""


class Host:
    """One host of a `Cluster`: a network namespace with address `addr`,
    and a pid, UTS (hostname `name`) and mount namespace (with a /proc of
    its pid namespace) that every process started on it shares."""

    def __init__(self, cluster: Cluster, index: int, ns: str, addr: str,
                 hostname: str | None = None) -> None:
        from conftest import _die_with_parent

        self.cluster = cluster
        self.index = index
        self.ns = ns
        self.addr = addr
        self.name = f"host{index}"
        self.hostname = hostname or self.name  # what gethostname() says on it
        # unshare dies with the test process (PDEATHSIG), and the host's
        # pid 1 with unshare (--kill-child), and everything on the host with it.
        self._init = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--kill-child", "--uts",
             "--mount-proc", sys.executable, "-c", _HOST_INIT, self.hostname],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
            preexec_fn=_die_with_parent)  # fmt: skip
        cluster._procs.append(self._init)
        if self._init.stdout.readline().strip() != "up":
            raise RuntimeError(f"{self.name}: the host's init did not start")
        with open(f"/proc/{self._init.pid}/task/{self._init.pid}/children") as f:
            self.init_pid = int(f.read().split()[0])

    def command(self, argv: Sequence[str], cwd: str | None = None) -> list[str]:
        """argv run on this host, in directory cwd (default: the current
        one): in the host's namespaces, dying with the returned command's
        process (nsenter)."""
        return ["nsenter", "-t", str(self.init_pid), "--net", "--pid", "--uts", "--mount",
                f"--wd={cwd or os.getcwd()}", "--",
                "setpriv", "--pdeathsig", "KILL", *argv]  # fmt: skip

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start argv on this host (`subprocess.Popen` keywords apply); the
        process is killed at the latest when the cluster closes, and dies
        with the test process (PR_SET_PDEATHSIG) or when the returned
        process is killed."""
        from conftest import _die_with_parent

        kwargs.setdefault("preexec_fn", _die_with_parent)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(self.command(argv, kwargs.pop("cwd", None)), **kwargs)
        self.cluster._procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], timeout: float = 60.0,
            **kwargs) -> subprocess.CompletedProcess:
        """Run argv on this host to completion; output captured as text."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv, kwargs.pop("cwd", None)), timeout=timeout,
                              stdin=subprocess.DEVNULL, **kwargs)

    def wait_ports(self, addr: str, ports: Sequence[int], timeout: float = 30.0
                   ) -> subprocess.CompletedProcess:
        """Wait, on this host, until every port of `ports` at `addr` accepts
        connections; returncode 1 when `timeout` seconds pass first."""
        argv = [sys.executable, "-c", _WAIT_PORTS, str(timeout), addr, *map(str, ports)]
        return self.run(argv, timeout=timeout + 30)

    def nft(self, script: str) -> None:
        """Apply an nftables script in this host's namespace."""
        res = subprocess.run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"], input=script,
                             capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(f"nft on {self.name}: {res.stderr.strip()}\n{script}")

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.addr})"


class Cluster:
    """`n` hosts joined by a bridge (see the module docstring). Host i
    (from 1) is named "host<i>" unless `hostnames` maps i to another name
    (several hosts may share one, as containers left at a default do)."""

    TABLE = "mcrig"

    def __init__(self, n: int, hostnames: dict[int, str] | None = None,
                 delays: dict[int, float] | None = None) -> None:
        require_tools()
        remove_stale()
        self._procs: list[subprocess.Popen] = []
        self._partitions: set[tuple[int, int]] = set()
        tag = f"{PREFIX}-{os.getpid()}-{random.getrandbits(32):08x}"
        self.subnet = random.randrange(0, 256)
        self.bridge_ns = f"{tag}-br"
        self.hosts: list[Host] = []
        self._namespaces: list[str] = []
        with _live_lock:
            _live.add(self)
        try:
            self._make_ns(self.bridge_ns)
            _sh(["ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge"])
            _sh(["ip", "-n", self.bridge_ns, "link", "set", "br0", "up"])
            for i in range(1, n + 1):
                self._add_host(tag, i, (hostnames or {}).get(i), (delays or {}).get(i))
        except BaseException:
            self.close()
            raise

    def _make_ns(self, ns: str) -> None:
        _sh(["ip", "netns", "add", ns])
        self._namespaces.append(ns)
        _sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _add_host(self, tag: str, i: int, hostname: str | None, delay: float | None) -> None:
        ns = f"{tag}-h{i}"
        addr = f"10.231.{self.subnet}.{i}"
        self._make_ns(ns)
        port = f"p{i}"
        # Made inside the rig's namespaces: no link is ever in the machine's own.
        if delay is None:
            _sh(["ip", "-n", self.bridge_ns, "link", "add", port, "type", "veth",
                 "peer", "name", "eth0", "netns", ns])  # fmt: skip
        else:  # eth0 <-> host side | forwarder | bridge side <-> port
            dns = f"{tag}-d{i}"
            self._make_ns(dns)
            _sh(["ip", "-n", dns, "link", "add", "host", "type", "veth",
                 "peer", "name", "eth0", "netns", ns])  # fmt: skip
            _sh(["ip", "-n", dns, "link", "add", "bridge", "type", "veth",
                 "peer", "name", port, "netns", self.bridge_ns])  # fmt: skip
            for side in ("host", "bridge"):
                _sh(["ip", "-n", dns, "link", "set", side, "promisc", "on", "up"])
            from conftest import _die_with_parent

            fwd = subprocess.Popen(["ip", "netns", "exec", dns, sys.executable, "-c", _DELAY,
                                    "host", "bridge", str(delay)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                   preexec_fn=_die_with_parent)  # fmt: skip
            self._procs.append(fwd)
            if fwd.stdout.readline().strip() != "up":
                raise RuntimeError(f"host{i}: the delay forwarder did not start")
        _sh(["ip", "-n", self.bridge_ns, "link", "set", port, "master", "br0", "up"])
        _sh(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"])
        _sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        self.hosts.append(Host(self, i, ns, addr, hostname))

    def __getitem__(self, i: int) -> Host:
        return self.hosts[i]

    def __len__(self) -> int:
        return len(self.hosts)

    def partition(self, a: Host, b: Host) -> None:
        """Drop every packet between hosts a and b, both ways, until `heal`:
        each host drops what arrives from the other, as a broken link or
        switch would (packets leave and are lost: a connect or a
        retransmission times out; nothing fails at once with EPERM, as a
        drop on output would make it)."""
        self._partitions.add((a.index, b.index))
        for me, other in ((a, b), (b, a)):
            me.nft(f"""
table inet {self.TABLE} {{
  chain input {{ type filter hook input priority 0; policy accept; }}
}}
add rule inet {self.TABLE} input ip saddr {other.addr} drop
""")

    def refuse(self, src: Host, dst: Host, ports: tuple[int, int]) -> None:
        """Refuse (TCP reset) the connections src opens to dst's ports
        ports[0]..ports[1], until `heal`; all other traffic still flows."""
        lo, hi = ports
        src.nft(f"""
table inet {self.TABLE} {{
  chain output {{ type filter hook output priority 0; policy accept; }}
}}
add rule inet {self.TABLE} output ip daddr {dst.addr} tcp dport {lo}-{hi} reject with tcp reset
""")

    def heal(self) -> None:
        """Remove every partition and refusal."""
        for h in self.hosts:
            subprocess.run(["ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet",
                            self.TABLE], capture_output=True, timeout=30)
        self._partitions.clear()

    def close(self) -> None:
        """Kill every process started on a host and delete every namespace
        (and with them every link). Safe to call more than once."""
        from conftest import kill_process

        procs, self._procs = self._procs, []
        for p in reversed(procs):  # the hosts' inits last
            kill_process(p)
        for ns in reversed(self._namespaces):
            _delete_netns(ns)
        self._namespaces = []
        with _live_lock:
            _live.discard(self)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    with _live_lock:
        live = list(_live)
    for c in live:
        c.close()
