"""A Redis Cluster whose nodes each live in a network namespace of their own, on a bridge, so that
a test can cut a node's link or drop the packets between two nodes: a real partition.

Addresses are in 198.18.0.0/24 (RFC 2544's benchmarking range). Before anything is made, an
`unreachable 198.18.0.0/24` route with a high metric goes into the root namespace, so that with
the bridge down nothing for those addresses can leave the machine; if it cannot be added, nothing
is made. `close()` removes every namespace, link and route made here, and stops every node.
"""

from __future__ import annotations

import os
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
                   "--repl-diskless-sync-delay", "0"]  # fmt: skip
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


def wait_until(condition: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.05)
