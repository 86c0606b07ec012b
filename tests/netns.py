"""A Redis Cluster whose nodes each live in a network namespace of their own, on a bridge, so that
a test can cut a node's link, or drop its packets or those between two nodes: a real partition.

Addresses are in 198.18.0.0/24 (RFC 2544's benchmarking range). Before anything is made, an
`unreachable 198.18.0.0/24` route with a high metric goes into the root namespace, so that with
the bridge down nothing for those addresses can leave the machine; if it cannot be added, nothing
is made. `close()` removes every namespace, link and route made here, and stops every node.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

SUBNET = "198.18.0.0/24"
HOST_ADDRESS = "198.18.0.254"
PORT = 6379


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def available() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("tc") is None:
        return "no tc (iproute2) to drop packets"
    probe = f"p45probe{os.getpid()}"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    if ip("route", "show", SUBNET, check=False).stdout.strip():
        return f"{SUBNET} is already routed on this machine"
    return None


class NamespacedCluster:
    """`primaries` * (1 + `replicas`) redis-servers, node n at 198.18.0.(n+1) in namespace
    `<tag>n`, its link `<tag>h<n>` on the bridge `<tag>br` in the root namespace."""

    def __init__(self, directory, primaries: int = 3, replicas: int = 2, node_timeout_ms: int = 1000) -> None:
        self.tag = f"p{os.getpid() % 100000}"
        self.bridge = f"{self.tag}br"
        self.count = primaries * (1 + replicas)
        self.processes: list[subprocess.Popen] = []
        self._namespaces: list[str] = []
        self._links: list[str] = []
        self._guard = False
        try:
            self._make_network()
            for n in range(self.count):
                self._start_node(directory, n, node_timeout_ms)
            addresses = [f"{self.address(n)}:{PORT}" for n in range(self.count)]
            subprocess.run(
                ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", str(replicas),
                 "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            self.wait_until_healthy(primaries)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def address(n: int) -> str:
        return f"198.18.0.{n + 1}"

    def namespace(self, n: int) -> str:
        return f"{self.tag}n{n}"

    def link(self, n: int) -> str:
        return f"{self.tag}h{n}"

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{self.address(n)}:{PORT}" for n in range(self.count))

    def _make_network(self) -> None:
        # The guard first: with it, a link or bridge that is down drops, and nothing leaves.
        if ip("route", "add", "unreachable", SUBNET, "metric", "4000", check=False).returncode != 0:
            raise RuntimeError(f"cannot add the guard route: unreachable {SUBNET}")
        self._guard = True
        ip("link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        ip("addr", "add", f"{HOST_ADDRESS}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for n in range(self.count):
            ns, host_end = self.namespace(n), self.link(n)
            ip("netns", "add", ns)
            self._namespaces.append(ns)
            ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._links.append(host_end)
            ip("link", "set", host_end, "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{self.address(n)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def _start_node(self, directory, n: int, node_timeout_ms: int) -> None:
        node_dir = directory / f"node{n}"
        node_dir.mkdir()
        command = ["ip", "netns", "exec", self.namespace(n), "redis-server", "--bind", self.address(n),
                   "--port", str(PORT), "--dir", str(node_dir), "--save", "", "--appendonly", "no",
                   "--protected-mode", "no",
                   "--logfile", str(node_dir / "redis.log"), "--cluster-enabled", "yes",
                   "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(node_timeout_ms),
                   "--repl-diskless-sync-delay", "0", "--cluster-require-full-coverage", "no"]  # fmt: skip
        self.processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_until(lambda: self.command(n, "PING") == "PONG", 15)

    def command(self, n: int, *args: str) -> str:
        """One command to node n, through redis-cli in the root namespace (over the bridge)."""
        try:
            return subprocess.run(
                ["redis-cli", "-h", self.address(n), "-p", str(PORT), *args],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
        except subprocess.TimeoutExpired:
            return ""

    def roles(self) -> dict[int, str]:
        """Each reachable node's role: master or slave."""
        out = {}
        for n in range(self.count):
            info = self.command(n, "ROLE").splitlines()
            if info:
                out[n] = info[0]
        return out

    def primaries(self) -> list[int]:
        return sorted(n for n, role in self.roles().items() if role == "master")

    def replicas_of(self, n: int) -> list[int]:
        """The nodes replicating node n, as it lists them."""
        listed = [
            line.split("ip=")[1].split(",")[0]
            for line in self.command(n, "INFO", "replication").splitlines()
            if line.startswith("slave") and "ip=" in line
        ]
        return sorted(m for m in range(self.count) if self.address(m) in listed)

    def wait_until_healthy(self, primaries: int, timeout: float = 40) -> None:
        def healthy() -> bool:
            if any(
                not self.command(n, "CLUSTER", "INFO").startswith("cluster_state:ok")
                for n in range(self.count)
            ):
                return False
            roles = self.roles()
            replicas = [n for n, role in roles.items() if role == "slave"]
            return sum(role == "master" for role in roles.values()) == primaries and all(
                "master_link_status:up" in self.command(n, "INFO", "replication") for n in replicas
            )

        wait_until(healthy, timeout)

    # The faults.

    def cut(self, n: int) -> None:
        """Node n's link down: it reaches no one, no one reaches it."""
        ip("link", "set", self.link(n), "down")

    def heal(self, n: int) -> None:
        ip("link", "set", self.link(n), "up")

    def drop(self, n: int) -> None:
        """Every packet to or from node n dropped, its link up: TCP queues and retransmits, as
        across a real partition (a link that is down fails a send at once instead)."""
        drop_packets(self.namespace(n), "eth0", None)  # what it sends
        drop_packets(None, self.link(n), None)  # what is sent to it, at the bridge's port

    def drop_between(self, n: int, m: int) -> None:
        """The packets between nodes n and m dropped, both ways; each still reaches the others."""
        drop_packets(self.namespace(n), "eth0", self.address(m))
        drop_packets(self.namespace(m), "eth0", self.address(n))

    def undrop(self, *nodes: int) -> None:
        """Every drop made on these nodes' links removed."""
        for n in nodes:
            pass_packets(self.namespace(n), "eth0")
            pass_packets(None, self.link(n))

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(10)
        for ns in self._namespaces:
            ip("netns", "del", ns, check=False)  # takes its end of each veth, and so the pair
        for link in self._links:
            ip("link", "del", link, check=False)
        if self._guard:
            ip("route", "del", "unreachable", SUBNET, "metric", "4000", check=False)
        self._namespaces, self._links, self._guard = [], [], False


def tc(namespace: str | None, commands: list[str], check: bool = True) -> None:
    """Traffic-control commands, one process: a fault starts or ends in one step."""
    where = ["-n", namespace] if namespace else []
    subprocess.run(
        ["tc", *where, "-force", "-batch", "-"], input="\n".join(commands) + "\n", capture_output=True,
        text=True, timeout=10, check=check,
    )  # fmt: skip


def drop_packets(namespace: str | None, device: str, destination: str | None) -> None:
    """Drop the IP packets `device` sends (to `destination` only, when given). This kernel has no
    netem: an htb root passes everything through class 1:1, and a u32 filter sends the chosen
    packets to class 1:2, whose leaf is a pfifo of length 0, which drops all it is given."""
    match = f"match ip dst {destination}/32" if destination else "match u32 0 0"
    tc(namespace, [
        f"qdisc add dev {device} root handle 1: htb default 1 r2q 100000",
        f"class add dev {device} parent 1: classid 1:1 htb rate 10gbit",
        f"class add dev {device} parent 1: classid 1:2 htb rate 10gbit",
        f"qdisc add dev {device} parent 1:2 handle 2: pfifo limit 0",
        f"filter add dev {device} parent 1: protocol ip prio 1 u32 {match} flowid 1:2",
    ])  # fmt: skip


def pass_packets(namespace: str | None, device: str) -> None:
    """Remove `device`'s drops, if it has any."""
    tc(namespace, [f"qdisc del dev {device} root"], check=False)


def wait_until(condition: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.05)
