"""The servers a benchmark starts, on loopback: gunicorn, the FastAPI peers, the bare Flask floor,
redis-server and the Redis Cluster (the tests' own), and a git revision's tree beside this one.

Servers run on SERVER_CPU and the load and redis-server on CLIENT_CPU (taskset), so that on a
2-core machine the server under test has a core of its own.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.harness import BENCH, CLIENT_CPU, ROOT, SERVER_CPU, TOKEN

# The tests' own redis-server and Redis Cluster, for the benchmarks that need a cluster or a fault.
from tests.servers import RedisClusterServers as RedisClusterServers
from tests.servers import RedisServer as RedisServer

TICK = os.sysconf("SC_CLK_TCK")
PYTHON = sys.executable
#: gunicorn with the configuration of the tree it starts in (every revision has gunicorn.conf.py).
GUNICORN = [PYTHON, "-m", "gunicorn", "-c", "gunicorn.conf.py"]
#: The apps the service is measured against (bench/apps/), importable from any tree's gunicorn.
APPS = BENCH / "apps"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(*pids: int) -> float:
    """The CPU time (user and system) the processes `pids` have spent so far, from /proc."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)
    return total / TICK


def children(pid: int) -> list[int]:
    """The process's children: a gunicorn master's workers."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def children_cpu_seconds(pid: int) -> float:
    """The CPU time a gunicorn master's workers have spent so far."""
    return cpu_seconds(*children(pid))


def status_field(pid: int, name: str) -> int:
    """A number of /proc/PID/status (`VmRSS` in KiB, `Threads`)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise LookupError(name)


@dataclass
class Server:
    """A server under test, started with `{port}` in its argv replaced by a free port."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    #: Where it runs, and so which tree gunicorn imports the app from (it puts its cwd first).
    cwd: Path = ROOT
    #: On SERVER_CPU (the default), or wherever the scheduler puts it.
    pin: bool = True
    #: How long it may take to answer its first request (under valgrind: minutes).
    start_s: float = 30.0
    #: Where its stdout (the access lines) goes: /dev/null unless a test reads them.
    stdout: Path | None = None

    def start(self) -> Server:
        env = {
            **os.environ,
            "PLANTS_API_TOKENS": TOKEN,
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            "PYTHONPATH": str(self.cwd),
            **self.env,
        }
        argv = [arg.replace("{port}", str(self.port)) for arg in self.argv]
        with self.stdout.open("ab") if self.stdout else open(os.devnull, "wb") as out:
            self.process = subprocess.Popen(
                ["taskset", "-c", SERVER_CPU, *argv] if self.pin else argv,
                cwd=self.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.PIPE,
            )
        return self.answering(time.monotonic() + self.start_s)

    def answering(self, deadline: float) -> Server:
        """Once it answers a request (any status), by `deadline` (time.monotonic())."""
        assert self.process is not None
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("POST", "/plants", body="{}", headers={"Content-Type": "application/json"})
                conn.getresponse().read()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited: {self.process.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
                    ) from None
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def pids(self) -> list[int]:
        """The master and its workers (gunicorn), or the one process (uvicorn)."""
        return [self.pid, *children(self.pid)]

    def cpu_seconds(self) -> float:
        return cpu_seconds(*self.pids())

    def worker_rss_bytes(self) -> int:
        return status_field(self.pids()[-1], "VmRSS") * 1024  # gunicorn: the worker

    def stop(self) -> None:
        self.terminate()
        self.wait_stopped()

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM), without waiting."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self) -> None:
        """Wait for it to stop, and kill it after 30 s."""
        if self.process:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def stop_all(servers: Iterable[Server]) -> None:
    """Stop `servers` together: every one is asked before any is waited for, since a gunicorn takes
    about half a second to stop (its workers' graceful exit)."""
    servers = list(servers)
    for server in servers:
        server.terminate()
    for server in servers:
        server.wait_stopped()


def gunicorn(
    name: str,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    args: tuple[str, ...] = (),
    pin: bool = True,
) -> Server:
    """The service under the gunicorn configuration of the tree `cwd`, with more of gunicorn's `args`."""
    return Server(name, [*GUNICORN, *args, "wsgi:app"], dict(env or {}), cwd=cwd, pin=pin)


def floor(name: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Server:
    """The bare Flask route (bench/apps/floor.py) on the worker of the tree `cwd`."""
    return Server(name, [*GUNICORN, "--pythonpath", str(APPS), "floor:app"], dict(env or {}), cwd=cwd)


def peer(
    name: str,
    redis: bool,
    env: dict[str, str] | None = None,
    workers: int = 1,
    *,
    contract: bool = False,
    access_log: bool = False,
    valgrind: list[str] | None = None,
) -> Server:
    """A FastAPI peer under uvicorn: the bare one in memory, or on Redis (PLANTS_STORE_URL) with
    redis.asyncio; or, with `contract`, the service's whole create contract in memory
    (bench/apps/fastapi_contract_peer.py). With `access_log`, uvicorn's access line is on as uvicorn
    ships it (`--log-level info`, one line a request on stdout: where the service's gunicorn writes
    its own, and here both go to /dev/null); otherwise `--log-level warning` turns it off. Under
    `valgrind` (callgrind's argv), the contract peer with its dump mark (bench/apps/callgrind_mark.py)."""
    module = "fastapi_contract_peer" if contract else "fastapi_redis_peer" if redis else "fastapi_peer"
    if valgrind:
        module = "callgrind_mark"
    level = "info" if access_log else "warning"
    argv = [PYTHON, "-m", "uvicorn", f"bench.apps.{module}:app", "--workers", str(workers),
            "--host", "127.0.0.1", "--port", "{port}", "--log-level", level]  # fmt: skip
    if workers > 1:
        argv = ["taskset", "-c", f"{SERVER_CPU},{CLIENT_CPU}", *argv]
    if valgrind:
        return Server(name, [*valgrind, *argv], dict(env or {}), start_s=600)
    return Server(name, argv, dict(env or {}))


def start_redis(directory: Path, *options: str) -> tuple[subprocess.Popen, Path]:
    """A redis-server on CLIENT_CPU and a unix socket in `directory`, without persistence;
    `options` are more of its settings."""
    sock = directory / "redis.sock"
    process = subprocess.Popen(
        ["taskset", "-c", CLIENT_CPU, "redis-server", "--port", "0", "--unixsocket", str(sock),
         "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(directory), *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis(unix_socket_path=str(sock)).ping()
            return process, sock
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def pin_to_client_cpu(pid: int) -> None:
    """Move a running process (a cluster node) beside the load, off the server's core."""
    subprocess.run(["taskset", "-p", "-c", CLIENT_CPU, str(pid)], check=True, capture_output=True)


def scratch(name: str) -> Path:
    """A new temporary directory for one run's sockets and files."""
    return Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """The git revision `ref` checked out beside this tree (a detached `git worktree`), for an A/B."""
    directory = scratch("ref")
    tree = directory / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(directory, ignore_errors=True)
